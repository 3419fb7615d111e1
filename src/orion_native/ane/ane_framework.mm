// See ane_framework.h. Manual retain/release (-fno-objc-arc); no @try and no C++ try/catch here (see
// ane_guard.h).
#include "ane/ane_framework.h"

#include <dlfcn.h>
#include <sys/utsname.h>
#if defined(__APPLE__)
#include <sys/sysctl.h>
#endif

#include <cctype>
#include <cstdlib>
#include <mutex>

namespace orion::ane {

namespace {

const char* kFrameworkPath = "/System/Library/PrivateFrameworks/AppleNeuralEngine.framework/AppleNeuralEngine";

std::string sysctl_string(const char* name) {
#if defined(__APPLE__)
  char buf[256] = {0};
  size_t n = sizeof buf - 1;
  if (sysctlbyname(name, buf, &n, nullptr, 0) == 0) return std::string(buf);
#else
  (void)name;
#endif
  return "";
}

std::string host_chip() {
  std::string c = sysctl_string("machdep.cpu.brand_string");
  if (!c.empty()) return c;
  struct utsname u;
  return uname(&u) == 0 ? std::string(u.sysname) + " " + u.machine : "unknown";
}

// ANE generation from the sub-type (reference §2.5: h13 M1, h14 M2, h15 M3, h16 M4, h17 M5).
std::string chip_profile_for(const std::string& subtype) {
  std::string s;
  for (char ch : subtype) s += (char)std::tolower((unsigned char)ch);
  if (s.rfind("h13", 0) == 0) return "m1";
  if (s.rfind("h14", 0) == 0) return "m2";
  if (s.rfind("h15", 0) == 0) return "m3";
  if (s.rfind("h16", 0) == 0) return "m4";
  if (s.rfind("h17", 0) == 0) return "m5";
  return "";
}

id lookup(const char* name) { return (id)NSClassFromString([NSString stringWithUTF8String:name]); }

// Reads every _ANEDeviceInfo value it answers; called under the exception guard.
void read_device_info(Framework* fw) {
  id<OrionANEDeviceInfoClass> d = (id<OrionANEDeviceInfoClass>)fw->device_info_class;
  DeviceInfo& i = fw->info;
  auto opt = [&](SEL s) {
    bool ok = [(id)d respondsToSelector:s];
    if (!ok) fw->missing_optional.push_back(std::string("+[_ANEDeviceInfo ") + str(NSStringFromSelector(s)) + "]");
    return ok;
  };
  i.has_ane = [d hasANE];
  if (opt(@selector(isVirtualMachine))) i.virtual_machine = [d isVirtualMachine];
  if (opt(@selector(numANEs))) i.num_anes = [d numANEs];
  if (opt(@selector(numANECores))) i.num_cores = [d numANECores];
  if (opt(@selector(aneArchitectureType))) i.architecture = str([d aneArchitectureType]);
  if (opt(@selector(aneSubType))) i.subtype = str([d aneSubType]);
  if (opt(@selector(aneSubTypeVariant))) i.variant = str([d aneSubTypeVariant]);
  if (opt(@selector(aneSubTypeProductVariant))) i.product_variant = str([d aneSubTypeProductVariant]);
  if (opt(@selector(aneSubTypeAndVariant))) i.subtype_and_variant = str([d aneSubTypeAndVariant]);
  if (opt(@selector(aneBoardType))) i.board_type = [d aneBoardType];
  if (opt(@selector(productName))) i.product_name = str([d productName]);
  if (opt(@selector(buildVersion))) i.framework_build = str([d buildVersion]);
}

struct Probe {
  Framework* fw;
  void operator()() {
    Framework& f = *fw;
    struct Req {
      id* slot;
      const char* name;
    } required[] = {{&f.descriptor_class, "_ANEInMemoryModelDescriptor"},
                    {&f.model_class, "_ANEInMemoryModel"},
                    {&f.request_class, "_ANERequest"},
                    {&f.surface_object_class, "_ANEIOSurfaceObject"}};
    for (auto& r : required) {
      *r.slot = lookup(r.name);
      if (!*r.slot) {
        f.reason = std::string("class ") + r.name + " is missing from " + f.path;
        return;
      }
    }
    struct Sel {
      id cls;
      const char* cname;
      SEL sel;
      bool instance;
    } sels[] = {
        {f.descriptor_class, "_ANEInMemoryModelDescriptor", @selector(modelWithMILText:weights:optionsPlist:), false},
        {f.model_class, "_ANEInMemoryModel", @selector(inMemoryModelWithDescriptor:), false},
        {f.model_class, "_ANEInMemoryModel", @selector(hexStringIdentifier), true},
        {f.model_class, "_ANEInMemoryModel", @selector(compileWithQoS:options:error:), true},
        {f.model_class, "_ANEInMemoryModel", @selector(loadWithQoS:options:error:), true},
        {f.model_class, "_ANEInMemoryModel", @selector(evaluateWithQoS:options:request:error:), true},
        {f.model_class, "_ANEInMemoryModel", @selector(unloadWithQoS:error:), true},
        {f.request_class, "_ANERequest",
         @selector(requestWithInputs:inputIndices:outputs:outputIndices:weightsBuffer:perfStats:procedureIndex:), false},
        {f.surface_object_class, "_ANEIOSurfaceObject", @selector(objectWithIOSurface:), false},
    };
    std::string missing;
    for (auto& s : sels) {
      bool ok = s.instance ? [s.cls instancesRespondToSelector:s.sel] : [s.cls respondsToSelector:s.sel];
      if (!ok) missing += std::string(missing.empty() ? "" : ", ") + (s.instance ? "-[" : "+[") + s.cname + " " + str(NSStringFromSelector(s.sel)) + "]";
    }
    if (!missing.empty()) {
      f.reason = "the private API changed: missing selector(s) " + missing;
      return;
    }
    f.has_compiled_model_exists = [f.model_class instancesRespondToSelector:@selector(compiledModelExists)];
    if (!f.has_compiled_model_exists) f.missing_optional.push_back("-[_ANEInMemoryModel compiledModelExists]");

    // The direct route (optional).
    f.client_class = lookup("_ANEClient");
    f.ane_model_class = lookup("_ANEModel");
    if (!f.client_class || !f.ane_model_class) {
      f.client_reason = std::string("class ") + (f.client_class ? "_ANEModel" : "_ANEClient") + " is missing";
    } else {
      Sel csels[] = {{f.client_class, "_ANEClient", @selector(sharedConnection), false},
                     {f.ane_model_class, "_ANEModel", @selector(modelAtURL:key:), false},
                     {f.client_class, "_ANEClient", @selector(compileModel:options:qos:error:), true},
                     {f.client_class, "_ANEClient", @selector(loadModel:options:qos:error:), true},
                     {f.client_class, "_ANEClient", @selector(evaluateWithModel:options:request:qos:error:), true},
                     {f.client_class, "_ANEClient", @selector(unloadModel:options:qos:error:), true}};
      for (auto& s : csels) {
        bool ok = s.instance ? [s.cls instancesRespondToSelector:s.sel] : [s.cls respondsToSelector:s.sel];
        if (!ok) f.client_reason += std::string(f.client_reason.empty() ? "missing selector(s) " : ", ") +
                                    (s.instance ? "-[" : "+[") + s.cname + " " + str(NSStringFromSelector(s.sel)) + "]";
      }
      f.client_route = f.client_reason.empty();
    }

    // Device check: dlopen succeeding is not enough (§1 "Failure mode off-Mac").
    f.device_info_class = lookup("_ANEDeviceInfo");
    if (!f.device_info_class || ![f.device_info_class respondsToSelector:@selector(hasANE)]) {
      f.reason = "cannot confirm a Neural Engine: +[_ANEDeviceInfo hasANE] is missing from " + f.path;
      return;
    }
    read_device_info(&f);
    if (!f.info.has_ane) {
      f.reason = std::string("no Neural Engine on this machine (+[_ANEDeviceInfo hasANE] = NO") +
                 (f.info.virtual_machine ? "; running in a virtual machine without a virtual ANE" : "") + ")";
      return;
    }
    f.available = true;
  }
};

std::string context_of(const Framework& f) {
  std::string c = " (";
  c += f.info.product_name.empty() ? "macOS" : f.info.product_name;
  c += " build " + (f.info.os_build.empty() ? std::string("unknown") : f.info.os_build);
  c += ", " + f.info.chip;
  if (!f.info.architecture.empty() || !f.info.subtype.empty())
    c += ", ANE " + (f.info.architecture.empty() ? f.info.subtype : f.info.architecture);
  if (f.fake) c += ", fake framework " + f.path;
  return c + ")";
}

Framework* probe() {
  Framework* fw = new Framework();  // process lifetime (never destroyed: no exit-order hazards)
  Pool pool;
  fw->info.chip = host_chip();
  fw->info.os_build = sysctl_string("kern.osversion");
#if defined(__APPLE__) && !defined(__arm64__)
  fw->reason = "not Apple Silicon: the Neural Engine needs an arm64 Mac (this is an x86_64 build)";
  return fw;
#endif
  fw->path = kFrameworkPath;
#if defined(ORION_ANE_TEST_HOOKS)
  // Test hook of the ORION_ANE_FAKE build only: load tests/ane_fake's AppleNeuralEngine instead.
  if (const char* p = std::getenv("ORION_ANE_FRAMEWORK_PATH"); p && *p) fw->path = p;
  fw->fake = true;
#endif
  if (!dlopen(fw->path.c_str(), RTLD_NOW)) {
    const char* e = dlerror();
    fw->reason = "AppleNeuralEngine.framework is missing: dlopen(" + fw->path + ") failed: " + (e ? e : "?");
#if defined(ORION_ANE_TEST_HOOKS)
    fw->reason += " (fake build: set ORION_ANE_FRAMEWORK_PATH to tests/ane_fake's library)";
#endif
    return fw;
  }
  Probe pr{fw};
  if (NSException* e = guarded(pr)) {
    fw->available = false;
    fw->reason = "probing the private framework raised " + str([e name]) + ": " + str([e reason]);
    [e release];
  }
  if (fw->info.os_build.empty()) fw->info.os_build = fw->info.framework_build;
  fw->info.chip_profile = chip_profile_for(fw->info.subtype);
  fw->info.dialect = (fw->info.chip_profile == "m1" || fw->info.chip_profile == "m2") ? "ios16" : "ios18";
  if (!fw->reason.empty()) fw->reason += context_of(*fw);
  return fw;
}

}  // namespace

const Framework& framework() {
  static Framework* fw = probe();  // thread-safe one-time initialisation
  return *fw;
}

std::string context() { return context_of(framework()); }

Pool::Pool() : pool([[NSAutoreleasePool alloc] init]) {}
Pool::~Pool() { [pool drain]; }

std::string str(NSString* s) {
  if (!s) return "";
  const char* c = [s UTF8String];
  return c ? std::string(c) : std::string();
}

std::string describe(NSError* err) {
  if (!err) return "no NSError (the framework returned NO without one)";
  std::string d = "NSError domain=" + str([err domain]) + " code=" + std::to_string((long)[err code]) +
                  " description=\"" + str([err localizedDescription]) + "\"";
  NSDictionary* info = [err userInfo];
  if (info && [info count]) {
    std::string u = str([info description]);
    if (u.size() > 600) u = u.substr(0, 600) + "...";
    d += " userInfo=" + u;
  }
  return d;
}

int eval_status(NSError* err) {
  if (!err) return 0;
  switch ((long)[err code]) {
    case 8: return 0x1d;   // Program Inference error
    case 23: return 0x0e;  // Program not found
    case 3: return 0x0f;   // timed out
    default: return (int)[err code];
  }
}

void throw_exception(NSException* e, const char* cls, const char* sel) {
  std::string msg = std::string("-[") + cls + " " + sel + "] raised " + str([e name]) + ": " + str([e reason]);
  [e release];
  throw_error(ErrorKind::Orion, msg + context());
}

}  // namespace orion::ane
