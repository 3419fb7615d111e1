// Static cost model of one eval on an M4-class ANE (figures others measured on M4/M5; deliberately simple):
//   est_ms = 0.095 ms dispatch (C41)
//          + conv-like flops / (peak x depth efficiency) + matmul flops x 3 / (same)   (C46)
//   peak   = 11 TFLOPS (128 chained 1x1 convs measured on M4 Max / M5)
//   depth efficiency = clamp(heavy ops / 128, 0.2, 1): 32 chained convs reach 2.6 of 11.1 TFLOPS (C46)
//   x SRAM factor above 32 MB working set (weights + peak activations + I/O): 1 + 0.43 per extra 64 MB,
//     i.e. 96 MB runs ~30 % slower, matching the 2048^2 vs 4096^2 matmul probe on M4 (C26).
// Element-wise and other ops are counted at the conv rate (they fuse into the conv pipeline).
// Per op (CostEstimate::ops): its effective flops at the program's rate; with the dispatch they sum to est_ms.
#include <algorithm>

#include "sim/ops/op.h"

namespace orion::sim::cost {

CostEstimate estimate(const std::vector<StepCost>& steps, int64_t weight_bytes, int64_t activation_bytes, int64_t io_bytes) {
  constexpr double kDispatchMs = 0.095;  // C41 (maderix Part 2, M4)
  constexpr double kPeakFlops = 11.0e12;
  constexpr double kMatmulPenalty = 3.0;  // C46
  CostEstimate c;
  auto effective = [&](const StepCost& s) { return s.unit == ops::OpCtx::Unit::matmul ? s.flops * kMatmulPenalty : s.flops; };
  double eff_flops = 0;
  int heavy = 0;
  for (const auto& s : steps) {
    c.flops += s.flops;
    eff_flops += effective(s);
    if (s.unit != ops::OpCtx::Unit::other) ++heavy;
  }
  c.weight_bytes = weight_bytes;
  c.activation_bytes = activation_bytes;
  double eff = std::clamp(heavy / 128.0, 0.2, 1.0);
  double ws = (double)(weight_bytes + activation_bytes + io_bytes);
  double sram = ws > kSramBytes ? 1.0 + 0.43 * (ws - kSramBytes) / (64.0 * 1024 * 1024) : 1.0;
  double ms_per_flop = 1e3 * sram / (kPeakFlops * eff);  // depth efficiency and SRAM factor are program-wide
  c.dispatch_ms = kDispatchMs;
  c.est_ms = kDispatchMs + eff_flops / (kPeakFlops * eff) * 1e3 * sram;
  c.ops.reserve(steps.size());
  for (const auto& s : steps) {
    const char* unit = s.unit == ops::OpCtx::Unit::matmul ? "matmul" : s.unit == ops::OpCtx::Unit::conv ? "conv" : "other";
    c.ops.push_back({s.name, s.op, unit, s.flops, s.bytes, effective(s) * ms_per_flop});
  }
  return c;
}

}  // namespace orion::sim::cost
