// Process-wide runtime state: event counters (so tests can assert "zero recompiles"), the compile
// budget (C05) and the compiled-program cache keyed by identifier (the daemon's cache, C07).
#pragma once
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "common/profile.h"
#include "runtime/backend.h"

namespace orion::runtime {

struct Counters {
  std::atomic<int64_t> compiles{0};         // compile calls that succeeded (each charges the budget)
  std::atomic<int64_t> hidden_compiles{0};  // compiles done implicitly by a load (delta_patch)
  std::atomic<int64_t> cache_hits{0};       // compiles answered from the identifier cache
  std::atomic<int64_t> loads{0};
  std::atomic<int64_t> unloads{0};
  std::atomic<int64_t> evals{0};
  std::atomic<int64_t> weight_writes{0};    // writes into staged input surfaces (dynamic weights)
  std::atomic<int64_t> bytes_written{0};
  std::atomic<int64_t> releases{0};
};
Counters& counters();
std::map<std::string, int64_t> counters_snapshot();
void reset_counters();

// Per-backend compile budget. charge() throws BudgetExceeded [C05] once `limit` compiles happened.
struct Budget {
  int64_t used = 0;
  int64_t limit = kCompileBudget;
};
Budget budget(const std::string& backend);
void set_budget_limit(const std::string& backend, int64_t limit);
void reset_budget(const std::string& backend);  // simulator only: the hardware's budget never resets
void check_budget(const std::string& backend, int64_t default_limit);  // throws before a compile
void charge_budget(const std::string& backend);

// Identifier -> compiled model, shared while alive; a few recently released ones are kept warm.
std::shared_ptr<BackendModel> cache_find(const std::string& identifier);
void cache_put(const std::string& identifier, const std::shared_ptr<BackendModel>& model);
void cache_clear();

}  // namespace orion::runtime
