#include "sim/step_profile.h"

#include <atomic>
#include <map>
#include <mutex>
#include <utility>

namespace orion::sim {
namespace {
std::atomic<bool> g_on{false};
std::mutex g_mu;
std::map<std::pair<std::string, std::string>, StepTotals> g_table;
}  // namespace

bool step_profiling() { return g_on.load(std::memory_order_relaxed); }

void set_step_profiling(bool on) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (on) g_table.clear();
  g_on.store(on, std::memory_order_relaxed);
}

void add_step_time(const std::string& op, const std::string& name, double seconds, double flops, double bytes) {
  std::lock_guard<std::mutex> lock(g_mu);
  StepTotals& t = g_table[{op, name}];
  if (t.calls == 0) {
    t.op = op;
    t.name = name;
  }
  t.calls += 1;
  t.seconds += seconds;
  t.flops += flops;
  t.bytes += bytes;
}

std::vector<StepTotals> take_step_profile() {
  std::lock_guard<std::mutex> lock(g_mu);
  std::vector<StepTotals> out;
  out.reserve(g_table.size());
  for (auto& [key, t] : g_table) out.push_back(std::move(t));
  g_table.clear();
  return out;
}

}  // namespace orion::sim
