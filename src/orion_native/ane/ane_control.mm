// See ane_api.h. Never throws (it is called from C through ctypes): failures become {"error": ...}.
#include "ane/ane_api.h"

#include <cstdio>
#include <string>

#include "ane/ane_backend.h"
#include "ane/ane_folders.h"
#include "ane/ane_framework.h"

namespace orion::ane {

namespace {

std::string q(const std::string& s) {
  std::string o = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      o += '\\';
      o += (char)c;
    } else if (c < 0x20) {
      char b[8];
      std::snprintf(b, sizeof b, "\\u%04x", c);
      o += b;
    } else {
      o += (char)c;
    }
  }
  return o + "\"";
}

std::string b(bool v) { return v ? "true" : "false"; }
std::string n(int64_t v) { return std::to_string(v); }

std::string info() {
  const Framework& f = framework();
  const DeviceInfo& d = f.info;
  Stats& s = stats();
  std::string missing = "[";
  for (size_t i = 0; i < f.missing_optional.size(); ++i) missing += (i ? ", " : "") + q(f.missing_optional[i]);
  missing += "]";
  std::string warnings = "[";
  for (size_t i = 0; i < f.warnings.size(); ++i) warnings += (i ? ", " : "") + q(f.warnings[i]);
  warnings += "]";
  // Route status: the in-memory route is what working code uses; the client route's selectors
  // existing does not make it usable (it failed on an M4 Max).
  std::string inmemory = f.available ? "usable" : "unavailable";
  std::string client = !f.available ? "unavailable" : f.client_route ? kClientRouteStatus : "unavailable (" + f.client_reason + ")";
  return "{\"built\": true, \"fake\": " + b(f.fake) + ", \"available\": " + b(f.available) +
         ", \"reason\": " + q(f.reason) + ", \"framework\": " + q(f.path) +
         ", \"device\": {\"has_ane\": " + (d.has_ane_known ? b(d.has_ane) : "null") + ", \"virtual_machine\": " + b(d.virtual_machine) +
         ", \"num_anes\": " + n(d.num_anes) + ", \"num_cores\": " + n(d.num_cores) +
         ", \"architecture\": " + q(d.architecture) + ", \"subtype\": " + q(d.subtype) + ", \"variant\": " + q(d.variant) +
         ", \"product_variant\": " + q(d.product_variant) + ", \"subtype_and_variant\": " + q(d.subtype_and_variant) +
         ", \"board_type\": " + n(d.board_type) + ", \"product_name\": " + q(d.product_name) +
         ", \"framework_build\": " + q(d.framework_build) + ", \"os_build\": " + q(d.os_build) +
         ", \"chip\": " + q(d.chip) + ", \"chip_profile\": " + q(d.chip_profile) + ", \"dialect\": " + q(d.dialect) + "}" +
         ", \"routes\": {\"inmemory\": " + q(inmemory) + ", \"client\": " + q(client) +
         ", \"client_selectors\": " + b(f.available && f.client_route) + ", \"client_reason\": " + q(f.client_reason) + "}" +
         ", \"route\": " + q(route_name(route())) + ", \"warnings\": " + warnings +
         ", \"weight_entry\": " + q(single_key_entries() ? "one" : "two") +
         ", \"compiled_model_exists\": " + b(f.has_compiled_model_exists) + ", \"missing_optional\": " + missing +
         ", \"stats\": {\"framework_compiles\": " + n(s.framework_compiles) + ", \"hidden_compiles\": " + n(s.hidden_compiles) +
         ", \"unverified_loads\": " + n(s.unverified_loads) + ", \"shared_models\": " + n(s.shared_models) +
         ", \"loads\": " + n(s.loads) + ", \"load_retries\": " + n(s.load_retries) + ", \"unloads\": " + n(s.unloads) +
         ", \"evals\": " + n(s.evals) + ", \"requests_built\": " + n(s.requests_built) +
         ", \"reload_probes\": " + n(s.reload_probes) + ", \"patch_probes\": " + n(s.patch_probes) +
         ", \"cleanup_errors\": " + n(s.cleanup_errors) + ", \"unload_failures\": " + n(s.unload_failures) + "}" + ", \"live_models\": " + n(live_models()) +
         ", \"live_folders\": " + n(live_model_folders()) + ", \"temp_dir\": " + q(temp_directory()) + "}";
}

std::string error(const std::string& m) { return "{\"error\": " + q(m) + "}"; }

}  // namespace

std::string control(const std::string& c) {
  if (c == "info") return info();
  const Framework& f = framework();
  if (c == "route=inmemory" || c == "route=client") {  // client: experimental, kClientRouteStatus
    bool client = c == "route=client";
    if (!f.available) return error("the ANE backend is unavailable: " + f.reason);
    if (client && !f.client_route) return error("the _ANEClient route is unavailable: " + f.client_reason + context());
    set_route(client ? Route::client : Route::in_memory);
    return info();
  }
  if (c == "entry=one" || c == "entry=two") {
    set_single_key_entries(c == "entry=one");
    return info();
  }
  if (c == "shutdown") {
    shutdown_all();
    return info();
  }
  return error("unknown command '" + c + "' (info, route=inmemory|client, entry=two|one, shutdown)");
}

}  // namespace orion::ane

extern "C" __attribute__((visibility("default"))) const char* orion_ane_control(const char* command) {
  static thread_local std::string answer;
  answer = orion::ane::control(command ? command : "");
  return answer.c_str();
}
