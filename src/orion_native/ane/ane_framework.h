// Lazy loading of AppleNeuralEngine.framework (docs/ane-framework.md): dlopen, then
// the REQUIRED check (the four classes and the in-memory route's selectors: what working code needs),
// then best-effort extras (the _ANEDeviceInfo capability record, compiledModelExists, the _ANEClient
// route), each under its own exception guard so that none of them can disable the backend; and the
// error helpers that put class, selector, NSError domain/code/description, OS build and chip into
// every message.
#pragma once
#import <Foundation/Foundation.h>

#include <string>
#include <vector>

#include "ane/ane_guard.h"
#include "ane/ane_private.h"
#include "common/error.h"

namespace orion::ane {

struct DeviceInfo {
  bool has_ane = false;      // +hasANE's answer, when it gave one (has_ane_known)
  bool has_ane_known = false;
  bool virtual_machine = false;
  unsigned num_anes = 0, num_cores = 0;
  long long board_type = 0;
  std::string architecture, subtype, variant, product_variant, subtype_and_variant;
  std::string product_name, framework_build;  // +productName, +buildVersion
  std::string os_build;  // sysctl kern.osversion on macOS (or the framework's buildVersion)
  std::string chip;      // sysctl machdep.cpu.brand_string, e.g. "Apple M4 Max"
  std::string dialect;   // MIL dialect to target: "ios16" on h13/h14 (M1/M2, C29), else "ios18"
  std::string chip_profile;  // simulator chip profile matching the ANE generation: m1..m5, "" if unknown
};

struct Framework {
  bool available = false;
  std::string reason;  // why not, when unavailable
  std::string path;    // what was dlopen'ed
  bool fake = false;   // the Linux contract-test fake (tests/ane_fake)
  id descriptor_class = nil, model_class = nil, request_class = nil, surface_object_class = nil;
  id device_info_class = nil, client_class = nil, ane_model_class = nil;
  bool has_compiled_model_exists = false;  // optional -[_ANEInMemoryModel compiledModelExists]
  // The _ANEClient/_ANEModel route's selectors are present. That does not make it usable: on an M4 Max
  // it failed, so it is reported as kClientRouteStatus and stays opt-in.
  bool client_route = false;
  std::string client_reason;               // why its selectors are not all there
  std::vector<std::string> missing_optional;
  // Optional probes that failed (a getter that raised or answered an unexpected type, no +hasANE):
  // reported by `orion info`, never a reason to refuse (working code asks none of them).
  std::vector<std::string> warnings;
  DeviceInfo info;
};

// What `orion info` / orion.devices() say about the direct route when its selectors exist.
constexpr const char* kClientRouteStatus = "unverified (known to fail on M4 Max)";

// Probes once (thread-safe) and never throws; the result lives for the whole process.
const Framework& framework();
// " (macOS build 25D2128, Apple M4 Max, ANE h16g)": appended to every backend error message.
std::string context();

// RAII autorelease pool for every entry point (threads of the caller have none).
struct Pool {
  Pool();
  ~Pool();
  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;
  NSAutoreleasePool* pool;
};

std::string str(NSString* s);  // UTF-8 copy, "" for nil
std::string describe(NSError* err);  // "domain=... code=... description=..."
// Eval status for an NSError code (the framework's _ANEErrors): 8 -> 0x1d, 23 -> 0x0e, 3 -> 0x0f.
int eval_status(NSError* err);

// Runs f() (which must only send messages, not throw) under orion_ane_guard; an NSException becomes
// an orion::Error naming the class and selector.
template <class F>
NSException* guarded(F& f) {
  return orion_ane_guard([](void* p) { (*static_cast<F*>(p))(); }, &f);
}
// Releases e. `what` is the exact call with its arguments' shapes (empty: "-[cls sel]").
[[noreturn]] void throw_exception(NSException* e, const char* cls, const char* sel, const std::string& what = "");
template <class F>
void call(const char* cls, const char* sel, F&& f, const std::string& what = "") {
  if (NSException* e = guarded(f)) throw_exception(e, cls, sel, what);
}

}  // namespace orion::ane
