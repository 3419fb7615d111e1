// What a compiled program is estimated to cost on the ANE, whichever backend holds it (the simulator's
// cost model computes it: sim/cost.cpp).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace orion {

// One executed op's share of the estimate (Program.profile() in Python). Views (reshape, identity) and
// folded consts are not executed and cost nothing.
struct OpCost {
  std::string name, op, unit;  // MIL result name, op, "conv" | "matmul" | "other" (C46)
  double flops = 0;
  int64_t bytes = 0;           // operands + result as stored
  double est_ms = 0;           // this op's part: est_ms == dispatch_ms + the sum over ops
};

// Static estimate of what the ANE would spend (cost model: C26 SRAM cliff, C41 dispatch, C46 op choice).
struct CostEstimate {
  double flops = 0;            // multiply-adds counted as 2
  int64_t weight_bytes = 0;    // baked const bytes
  int64_t activation_bytes = 0;// peak live intermediate bytes (fp16)
  double est_ms = 0;           // modelled device time per eval (M4 figures, sim/cost.cpp)
  double dispatch_ms = 0;      // the per-eval fixed part of est_ms (C41)
  std::vector<OpCost> ops;     // executed ops in program order
};

}  // namespace orion
