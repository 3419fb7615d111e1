// State shared by the ANE backend (ane_backend.mm) and its diagnostics hook (ane_control.mm).
#pragma once
#include <atomic>
#include <cstdint>
#include <string>

namespace orion::ane {

// Two ways to drive the framework: the in-memory model every upstream project uses, and the
// _ANEClient/_ANEModel route the in-memory model wraps (experimental and unverified: it failed on an
// M4 Max; opt-in only). Default: ORION_ANE_ROUTE ("inmemory"/"client").
enum class Route { in_memory, client };
Route route();
void set_route(Route r);  // throws when the client route is unusable on this machine
const char* route_name(Route r);

// Weight-dictionary entry shape (docs/ane-framework.md): "two" (default) = @{@"offset": @0, @"data": blob}
// as working code builds it; "one" = @{@"data": blob}, an opt-in experiment (ORION_ANE_WEIGHT_ENTRY).
bool single_key_entries();
void set_single_key_entries(bool one);

struct Stats {
  std::atomic<int64_t> framework_compiles{0};  // successful explicit compiles (charge the budget, C05)
  std::atomic<int64_t> hidden_compiles{0};     // loads that made aned compile (compiledModelExists NO->YES)
  std::atomic<int64_t> unverified_loads{0};    // loads without compile where that could not be observed
  std::atomic<int64_t> shared_models{0};       // compiles answered by a live model with the same identifier
  std::atomic<int64_t> loads{0}, load_retries{0}, unloads{0}, evals{0}, requests_built{0};
  std::atomic<int64_t> reload_probes{0}, patch_probes{0};
  std::atomic<int64_t> cleanup_errors{0};      // unload failures during release (reported on stderr)
  std::atomic<int64_t> unload_failures{0};     // every unload NO/exception (logged, never fatal)
};
Stats& stats();
int live_models();
void shutdown_all();  // unloads and releases every model, removes every folder (at exit; tests)

}  // namespace orion::ane
