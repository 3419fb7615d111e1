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
#include <cstring>
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

// ANE generation from the sub-type (h13 M1, h14 M2, h15 M3, h16 M4, h17 M5).
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

// Return type of a class method as the runtime declares it, qualifiers (r, n, o, V, ...) stripped.
std::string return_type(id cls, SEL s) {
  NSMethodSignature* sig = [cls methodSignatureForSelector:s];
  const char* t = sig ? [sig methodReturnType] : nullptr;
  if (!t) return "";
  while (*t && std::strchr("rnNoORV", *t)) ++t;
  return t;
}

// One optional +[_ANEDeviceInfo ...] getter, under its own exception guard, sent only when the class
// answers it with the return type we declare (an integer/BOOL, or an object). `send` does the typed
// message send, stores the value and returns "" or what was wrong with it. Any problem becomes a
// warning (or a missing_optional entry) and the value stays empty; returns whether a value was stored.
template <class Send>
bool getter(Framework* fw, SEL sel, bool object, Send send) {
  std::string name = "+[_ANEDeviceInfo " + str(NSStringFromSelector(sel)) + "]", problem;
  auto body = [&] {
    id cls = fw->device_info_class;
    if (![cls respondsToSelector:sel]) {
      problem = "missing";
      return;
    }
    std::string t = return_type(cls, sel);
    bool ok = object ? t == "@" : (t.size() == 1 && std::strchr("cCsSiIlLqQB", t[0]));
    if (!ok) {
      problem = "declares return type '" + t + "', not " + (object ? "an object" : "an integer or BOOL") + "; not sent";
      return;
    }
    problem = send((id<OrionANEDeviceInfoClass>)cls);
  };
  if (NSException* e = guarded(body)) {
    problem = "raised " + str([e name]) + ": " + str([e reason]);
    [e release];
  }
  if (problem == "missing") fw->missing_optional.push_back(name);
  else if (!problem.empty()) fw->warnings.push_back(name + " " + problem + "; ignored");
  return problem.empty();
}

// An NSString getter's answer (nil -> ""); another class is a problem.
std::string text_of(id v, std::string* out) {
  if (v && ![v isKindOfClass:[NSString class]])
    return std::string("returned a ") + str(NSStringFromClass([v class])) + ", not an NSString";
  *out = str((NSString*)v);
  return "";
}

// Best effort: reads every _ANEDeviceInfo value it can; nothing here disables the backend (the
// caller refuses only on an explicit +hasANE = NO).
void read_device_info(Framework* fw) {
  using D = id<OrionANEDeviceInfoClass>;
  DeviceInfo& i = fw->info;
  BOOL has = NO, vm = NO;
  if (getter(fw, @selector(hasANE), false, [&](D d) { has = [d hasANE]; return std::string(); })) {
    i.has_ane_known = true;
    i.has_ane = has;
  }
  if (getter(fw, @selector(isVirtualMachine), false, [&](D d) { vm = [d isVirtualMachine]; return std::string(); }))
    i.virtual_machine = vm;
  getter(fw, @selector(numANEs), false, [&](D d) { i.num_anes = [d numANEs]; return std::string(); });
  getter(fw, @selector(numANECores), false, [&](D d) { i.num_cores = [d numANECores]; return std::string(); });
  getter(fw, @selector(aneBoardType), false, [&](D d) { i.board_type = [d aneBoardType]; return std::string(); });
  getter(fw, @selector(aneArchitectureType), true, [&](D d) { return text_of([d aneArchitectureType], &i.architecture); });
  getter(fw, @selector(aneSubType), true, [&](D d) { return text_of([d aneSubType], &i.subtype); });
  getter(fw, @selector(aneSubTypeVariant), true, [&](D d) { return text_of([d aneSubTypeVariant], &i.variant); });
  getter(fw, @selector(aneSubTypeProductVariant), true,
         [&](D d) { return text_of([d aneSubTypeProductVariant], &i.product_variant); });
  getter(fw, @selector(aneSubTypeAndVariant), true,
         [&](D d) { return text_of([d aneSubTypeAndVariant], &i.subtype_and_variant); });
  getter(fw, @selector(productName), true, [&](D d) { return text_of([d productName], &i.product_name); });
  getter(fw, @selector(buildVersion), true, [&](D d) { return text_of([d buildVersion], &i.framework_build); });
}

std::string selector_name(bool instance, const char* cls, SEL sel) {
  return std::string(instance ? "-[" : "+[") + cls + " " + str(NSStringFromSelector(sel)) + "]";
}

struct Sel {
  id cls;
  const char* cname;
  SEL sel;
  bool instance;
  bool present() const { return instance ? [cls instancesRespondToSelector:sel] : [cls respondsToSelector:sel]; }
};

// REQUIRED: the four classes and the in-memory route's selectors (what working code uses).
struct Required {
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
    Sel sels[] = {
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
    for (auto& s : sels)
      if (!s.present()) missing += (missing.empty() ? "" : ", ") + selector_name(s.instance, s.cname, s.sel);
    if (!missing.empty()) f.reason = "the private API changed: missing selector(s) " + missing;
  }
};

// Optional: -compiledModelExists (hidden-compile observation) and the experimental direct route.
struct Optional {
  Framework* fw;
  void operator()() {
    Framework& f = *fw;
    f.has_compiled_model_exists = [f.model_class instancesRespondToSelector:@selector(compiledModelExists)];
    if (!f.has_compiled_model_exists) f.missing_optional.push_back("-[_ANEInMemoryModel compiledModelExists]");
    f.client_class = lookup("_ANEClient");
    f.ane_model_class = lookup("_ANEModel");
    if (!f.client_class || !f.ane_model_class) {
      f.client_reason = std::string("class ") + (f.client_class ? "_ANEModel" : "_ANEClient") + " is missing";
      return;
    }
    Sel csels[] = {{f.client_class, "_ANEClient", @selector(sharedConnection), false},
                   {f.ane_model_class, "_ANEModel", @selector(modelAtURL:key:), false},
                   {f.client_class, "_ANEClient", @selector(compileModel:options:qos:error:), true},
                   {f.client_class, "_ANEClient", @selector(loadModel:options:qos:error:), true},
                   {f.client_class, "_ANEClient", @selector(evaluateWithModel:options:request:qos:error:), true},
                   {f.client_class, "_ANEClient", @selector(unloadModel:options:qos:error:), true}};
    for (auto& s : csels)
      if (!s.present())
        f.client_reason += (f.client_reason.empty() ? "missing selector(s) " : ", ") + selector_name(s.instance, s.cname, s.sel);
    f.client_route = f.client_reason.empty();
  }
};

void probe_framework(Framework* fw) {
  Framework& f = *fw;
  Required req{fw};
  if (NSException* e = guarded(req)) {
    f.reason = "probing the private framework's required classes and selectors raised " + str([e name]) + ": " +
               str([e reason]);
    [e release];
  }
  if (!f.reason.empty()) return;
  Optional opt{fw};
  if (NSException* e = guarded(opt)) {
    f.warnings.push_back("probing the optional selectors raised " + str([e name]) + ": " + str([e reason]));
    f.client_route = false;
    if (f.client_reason.empty()) f.client_reason = "probing its selectors raised " + str([e name]);
    [e release];
  }
  // Device check (best effort): working code asks nothing, so a missing class or +hasANE, or
  // one that raises, only warns. An explicit NO is the one refusal: in a VM without a virtual ANE
  // every compile/load/eval fails ("Host too old"), and device="auto" must then pick the simulator.
  auto find_info = [&] { f.device_info_class = lookup("_ANEDeviceInfo"); };
  if (NSException* e = guarded(find_info)) [e release];
  if (!f.device_info_class) {
    f.warnings.push_back("class _ANEDeviceInfo is missing: cannot confirm a Neural Engine (working code does not ask)");
  } else {
    read_device_info(fw);
    if (!f.info.has_ane_known)
      f.warnings.push_back("+[_ANEDeviceInfo hasANE] gave no answer: cannot confirm a Neural Engine (working code does not ask)");
  }
  if (f.info.has_ane_known && !f.info.has_ane) {
    f.reason = std::string("no Neural Engine on this machine (+[_ANEDeviceInfo hasANE] = NO") +
               (f.info.virtual_machine ? "; running in a virtual machine without a virtual ANE" : "") + ")";
    return;
  }
  f.available = true;
}

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
  probe_framework(fw);
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

void throw_exception(NSException* e, const char* cls, const char* sel, const std::string& what) {
  std::string msg = (what.empty() ? std::string("-[") + cls + " " + sel + "]" : what) + " raised " + str([e name]) + ": " +
                    str([e reason]);
  [e release];
  throw_error(ErrorKind::Orion, msg + context());
}

}  // namespace orion::ane
