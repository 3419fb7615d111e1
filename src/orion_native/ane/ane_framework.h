// Lazy loading of AppleNeuralEngine.framework (ane-private-api.md §1, §2.5, §10 "Init once"): dlopen,
// class lookup, selector checks, the _ANEDeviceInfo capability record, and the error helpers that put
// class, selector, NSError domain/code/description, OS build and chip into every message.
#pragma once
#import <Foundation/Foundation.h>

#include <string>
#include <vector>

#include "ane/ane_guard.h"
#include "ane/ane_private.h"
#include "common/error.h"

namespace orion::ane {

struct DeviceInfo {
  bool has_ane = false;
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
  bool client_route = false;               // _ANEClient/_ANEModel route usable
  std::string client_reason;               // why not
  std::vector<std::string> missing_optional;
  DeviceInfo info;
};

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
// Eval status for an NSError code (_ANEErrors, reference §8): 8 -> 0x1d, 23 -> 0x0e, 3 -> 0x0f.
int eval_status(NSError* err);

// Runs f() (which must only send messages, not throw) under orion_ane_guard; an NSException becomes
// an orion::Error naming the class and selector.
template <class F>
NSException* guarded(F& f) {
  return orion_ane_guard([](void* p) { (*static_cast<F*>(p))(); }, &f);
}
[[noreturn]] void throw_exception(NSException* e, const char* cls, const char* sel);  // releases e
template <class F>
void call(const char* cls, const char* sel, F&& f) {
  if (NSException* e = guarded(f)) throw_exception(e, cls, sel);
}

}  // namespace orion::ane
