// Compact live columns. Decode evaluates 1 column of 16 (C04), so each element-wise step of a live run
// reads and writes one element in 16: every operand gathered out of its strided layout, the result
// scattered back, op after op (RMSNorm, RoPE, SiLU x up: ~20 such steps a layer, the largest share of a
// decode step after the weight GEMVs). Here a run's element-wise steps compute on dense [outer][chunk]
// copies of their values instead ("compact forms"): a value is gathered once, by its first compact
// reader; a result is scattered into its full layout only when something reads it there (a matmul, a
// reduction, a program output, an operand read broadcast). The same kernels on the same values in the
// same order: results are bit-identical, only where values are stored changes.
#pragma once
#include <cstdint>
#include <deque>
#include <set>
#include <utility>
#include <vector>

#include "sim/ops/op.h"

namespace orion::sim::compact {

// The prefix box of a region: `outer` blocks of `chunk` elements, `stride` apart (sim/ops/prefix.h).
struct Geometry {
  int64_t outer = 0, chunk = 0, stride = 0;
  bool operator==(const Geometry& o) const { return outer == o.outer && chunk == o.chunk && stride == o.stride; }
};

struct StepInfo {
  int out;
  const std::vector<int>* ins;
  const std::set<int>* build_only;
  bool runner;    // the op has a compact runner (ops::OpCtx::run_compact)
  const ops::CompactInputsFn* inputs;  // which inputs it takes compact (ops::OpCtx::compact_inputs)
};

struct Plan {
  std::vector<char> step;             // per step: computes its region in compact form
  std::vector<std::vector<int>> in;   // per step and input: the value whose compact form it reads, or -1
  std::vector<char> full;             // per value: also written in its full layout (compact steps' results)
  // per program output: the value whose compact form is scattered straight into the caller's output (its
  // live columns are that form's box, and nothing else reads it whole), or -1: copied out of the arena
  std::vector<int> direct;
  std::vector<int64_t> slot;          // per value: element offset of its compact form in the area, or -1
  std::vector<Geometry> geometry;     // per value with a slot
  int64_t elems = 0;                  // the area's size in fp16 elements
  bool any() const { return elems > 0; }
};

// On by default; off (a test hook) runs every step as before, for comparing the two.
bool enabled();
void set_enabled(bool on);
// Compact steps run, process-wide (a test hook: that the path is taken): added per run, taken and reset.
void count_steps_run(int64_t n);
int64_t take_steps_run();

// `regions`: live::Result::step; `views`: (view, source) pairs and each view's byte offset (by value id);
// `live`: the hint per output (Plan::execute_live).
Plan plan(const std::deque<ops::Value>& values, const std::vector<StepInfo>& steps,
          const std::vector<std::pair<int, int>>& views, const std::vector<int64_t>& view_off,
          const std::vector<int>& out_ids, const std::vector<ops::Region>& regions, const std::vector<int64_t>& live);

}  // namespace orion::sim::compact
