#include "runtime/process.h"

#include <deque>
#include <mutex>

#include "common/error.h"

namespace orion::runtime {

namespace {
std::mutex g_mu;
std::map<std::string, Budget> g_budgets;
std::map<std::string, bool> g_budget_set;
std::map<std::string, std::weak_ptr<BackendModel>> g_cache;
std::deque<std::shared_ptr<BackendModel>> g_warm;  // keeps recently compiled models alive
constexpr size_t kWarm = 8;
}  // namespace

Counters& counters() {
  static Counters c;
  return c;
}

std::map<std::string, int64_t> counters_snapshot() {
  Counters& c = counters();
  return {{"compiles", c.compiles},         {"hidden_compiles", c.hidden_compiles}, {"cache_hits", c.cache_hits},
          {"loads", c.loads},               {"unloads", c.unloads},                 {"evals", c.evals},
          {"weight_writes", c.weight_writes}, {"bytes_written", c.bytes_written},   {"releases", c.releases}};
}

void reset_counters() {
  Counters& c = counters();
  for (auto* a : {&c.compiles, &c.hidden_compiles, &c.cache_hits, &c.loads, &c.unloads, &c.evals, &c.weight_writes,
                  &c.bytes_written, &c.releases})
    a->store(0);
}

Budget budget(const std::string& backend) {
  std::lock_guard<std::mutex> lk(g_mu);
  return g_budgets[backend];
}

void set_budget_limit(const std::string& backend, int64_t limit) {
  if (limit < 0) throw_error(ErrorKind::Input, "compile budget must be >= 0");
  std::lock_guard<std::mutex> lk(g_mu);
  g_budgets[backend].limit = limit;
  g_budget_set[backend] = true;
}

void reset_budget(const std::string& backend) {
  std::lock_guard<std::mutex> lk(g_mu);
  g_budgets[backend].used = 0;
}

void check_budget(const std::string& backend, int64_t default_limit) {
  std::lock_guard<std::mutex> lk(g_mu);
  Budget& b = g_budgets[backend];
  if (!g_budget_set[backend]) b.limit = default_limit;
  if (b.used >= b.limit) {
    Error e(ErrorKind::Budget, "compile budget exhausted: " + std::to_string(b.used) +
                                   " compiles in this process (limit " + std::to_string(b.limit) +
                                   "). Pass changing weights as program inputs (the 'dynamic' strategy: no "
                                   "recompiles), or checkpoint and restart the process [C05]");
    e.constraint = "C05";
    throw e;
  }
}

void charge_budget(const std::string& backend) {
  std::lock_guard<std::mutex> lk(g_mu);
  g_budgets[backend].used++;
}

std::shared_ptr<BackendModel> cache_find(const std::string& identifier) {
  std::lock_guard<std::mutex> lk(g_mu);
  auto it = g_cache.find(identifier);
  if (it == g_cache.end()) return nullptr;
  auto m = it->second.lock();
  if (!m) g_cache.erase(it);
  return m;
}

void cache_put(const std::string& identifier, const std::shared_ptr<BackendModel>& model) {
  std::lock_guard<std::mutex> lk(g_mu);
  g_cache[identifier] = model;
  g_warm.push_back(model);
  if (g_warm.size() > kWarm) g_warm.pop_front();
  for (auto it = g_cache.begin(); it != g_cache.end();) it = it->second.expired() ? g_cache.erase(it) : std::next(it);
}

void cache_clear() {
  std::lock_guard<std::mutex> lk(g_mu);
  g_cache.clear();
  g_warm.clear();
}

}  // namespace orion::runtime
