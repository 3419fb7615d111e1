// Per-step timing of simulated evaluations (orion.sim.profile()): off by default; while on, every step a
// plan runs adds its wall time to a process-wide table keyed by (op, step name), with the step's flops and
// the bytes it reads and writes, so a user sees where an eval's time goes, by op.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace orion::sim {

struct StepTotals {
  std::string op, name;
  int64_t calls = 0;
  double seconds = 0, flops = 0, bytes = 0;
};

bool step_profiling();                    // cheap: one relaxed atomic load
void set_step_profiling(bool on);         // on: start from an empty table
void add_step_time(const std::string& op, const std::string& name, double seconds, double flops, double bytes);
std::vector<StepTotals> take_step_profile();  // the table so far (emptied)

}  // namespace orion::sim
