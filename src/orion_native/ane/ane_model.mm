// See ane_model.h. Manual retain/release (-fno-objc-arc); no @try / C++ try here (ane_guard.h).
#include "ane/ane_model.h"

#include <unistd.h>

#include <cstdio>
#include <mutex>

#include "ane/ane_folders.h"
#include "ane/ane_framework.h"
#include "ane/iosurface_storage.h"
#include "common/error.h"

namespace orion::ane {

namespace {

// Cached requests per model, one per distinct surface set: a program that every layer of a model shares binds
// each layer's weight and cache surfaces in turn (up to ~48 sets a token), and a request rebuilt per eval
// costs an _ANEIOSurfaceObject per surface and a validate. Stale sets (surfaces since freed) age out.
constexpr size_t kRequests = 64;

NSDictionary* empty_options() { return [NSDictionary dictionary]; }  // never nil: nil drops the framework's keys

NSString* ns(const std::string& s) {
  return [[[NSString alloc] initWithBytes:s.data() length:s.size() encoding:NSUTF8StringEncoding] autorelease];
}

// Key = the BLOBFILE path, value = @{@"offset": @0, @"data": blob} (the whole
// MILBlob file), the literal working code builds. The framework uses each entry's first enumerated
// value, so "data" must come first; working code does not check that, so neither do we beyond one
// warning (the descriptor's error message shows the order). ORION_ANE_WEIGHT_ENTRY=one (opt-in
// experiment, never the default) builds @{@"data": blob} instead.
NSDictionary* weight_dictionary(const std::vector<runtime::WeightEntry>& weights, bool single) {
  NSMutableDictionary* dict = [NSMutableDictionary dictionaryWithCapacity:weights.size()];
  static std::once_flag warned;
  for (const auto& w : weights) {
    NSData* blob = [NSData dataWithBytes:w.bytes.data() length:w.bytes.size()];
    NSDictionary* entry = single ? @{@"data": blob} : @{@"offset": @0, @"data": blob};
    if (![[[entry allKeys] objectAtIndex:0] isEqual:@"data"])
      std::call_once(warned, [] {
        std::fprintf(stderr, "orion: warning: ANE weight entries enumerate 'offset' before 'data' in this process (reference "
                             "§4 ordering hazard); passing them as working code does\n");
      });
    [dict setObject:entry forKey:ns(w.key)];
  }
  return dict;  // @{} when weight-free, never nil (C11)
}

const char* class_name(id o) { return o ? [NSStringFromClass([o class]) UTF8String] : "nil"; }

// "NSData 1234 B" / "NSNumber 0" / "NSString ..." / class name: an argument's shape for error messages.
std::string shape_of(id v) {
  if (!v) return "nil";
  if ([v isKindOfClass:[NSData class]]) return "NSData " + std::to_string((unsigned long)[(NSData*)v length]) + " B";
  if ([v isKindOfClass:[NSNumber class]]) return "NSNumber " + str([(NSNumber*)v stringValue]);
  if ([v isKindOfClass:[NSDictionary class]] && [(NSDictionary*)v count] == 0) return "@{}";
  return class_name(v);
}

// The weight dictionary as the framework sees it: entries in enumeration order, each with its keys in
// enumeration order (so an entry enumerating 'offset' first is visible here).
std::string shape_of_weights(NSDictionary* wd) {
  std::string o = "NSDictionary " + std::to_string((unsigned long)[wd count]) + " entr" + ([wd count] == 1 ? "y" : "ies");
  if (![wd count]) return o + " (@{})";
  o += " {";
  NSUInteger n = 0;
  for (NSString* key in wd) {
    if (n++ == 4) {
      o += ", ...";
      break;
    }
    NSDictionary* e = [wd objectForKey:key];
    o += (n > 1 ? ", '" : "'") + str(key) + "': {";
    NSUInteger k = 0;
    for (NSString* ek in e) o += (k++ ? ", " : "") + str(ek) + ": " + shape_of([e objectForKey:ek]);
    o += "}";
  }
  return o + "}";
}

std::string shape_of_surfaces(const std::vector<runtime::Surface*>& ss) {
  std::string o = std::to_string(ss.size()) + " x _ANEIOSurfaceObject [";
  for (size_t i = 0; i < ss.size(); ++i) o += (i ? ", " : "") + std::to_string(ss[i]->alloc_size()) + " B";
  o += "], indices [";
  for (size_t i = 0; i < ss.size(); ++i) o += (i ? ", " : "") + std::to_string(i);
  return o + "]";
}

// The request's shape: what evaluate was called with.
std::string shape_of_request(const std::vector<runtime::Surface*>& in, const std::vector<runtime::Surface*>& out) {
  return "_ANERequest{inputs: " + shape_of_surfaces(in) + "; outputs: " + shape_of_surfaces(out) +
         "; weightsBuffer: nil, perfStats: nil, procedureIndex: @0}";
}

}  // namespace

Model::Model(Route route, std::string mil, const std::vector<runtime::WeightEntry>& weights)
    : route_(route), mil_(std::move(mil)), weights_(&weights) {}

const std::vector<runtime::WeightEntry>& Model::weights() const {
  if (!weights_) throw_error(ErrorKind::Orion, "internal: ANE model " + hex_id_.substr(0, 16) + "... no longer has its weight files");
  return *weights_;
}

Model::~Model() { shutdown(); }

const char* Model::cls() const { return route_ == Route::in_memory ? "_ANEInMemoryModel" : "_ANEClient"; }

// "-[_ANEInMemoryModel loadWithQoS:21 options:@{} error:&error] (model 0123456789ABCDEF...)": the exact
// call with its arguments' shapes, for every error message.
std::string Model::text(const std::string& sel_with_args) const {
  return std::string("-[") + cls() + " " + sel_with_args + "] (model " + hex_id_.substr(0, 16) + "...)";
}

std::string Model::model_arg() const {
  return route_ == Route::in_memory ? "" : "<_ANEModel at NSTemporaryDirectory()/" + hex_id_.substr(0, 16) + "...>";
}

void Model::create() {
  Pool pool;
  const Framework& fw = framework();
  NSData* text = [NSData dataWithBytes:mil_.data() length:mil_.size()];  // UTF-8 bytes, not NSString (C09)
  NSDictionary* wd = weight_dictionary(weights(), single_key_entries());
  std::string desc_call = "+[_ANEInMemoryModelDescriptor modelWithMILText:<NSData " + std::to_string(mil_.size()) +
                          " B> weights:<" + shape_of_weights(wd) + "> optionsPlist:nil]";
  id desc = nil;
  call("_ANEInMemoryModelDescriptor", "modelWithMILText:weights:optionsPlist:", [&] {
    desc = [(id<OrionANEInMemoryModelDescriptorClass>)fw.descriptor_class modelWithMILText:text weights:wd optionsPlist:nil];
  }, desc_call);
  if (!desc)
    throw_compile("C11", "", desc_call + " returned nil: the framework rejected the MIL text or the weight dictionary" + context());
  descriptor_ = [desc retain];
  id m = nil;
  call("_ANEInMemoryModel", "inMemoryModelWithDescriptor:", [&] {
    m = [(id<OrionANEInMemoryModelClass>)fw.model_class inMemoryModelWithDescriptor:desc];
  }, "+[_ANEInMemoryModel inMemoryModelWithDescriptor:<_ANEInMemoryModelDescriptor>]");
  if (!m)
    throw_error(ErrorKind::Orion, "+[_ANEInMemoryModel inMemoryModelWithDescriptor:<_ANEInMemoryModelDescriptor>] returned nil" +
                                      context());
  NSString* hid = nil;
  id hid_any = nil;
  call("_ANEInMemoryModel", "hexStringIdentifier", [&] { hid_any = [(id<OrionANEInMemoryModel>)m hexStringIdentifier]; },
       "-[_ANEInMemoryModel hexStringIdentifier]");
  if (![hid_any isKindOfClass:[NSString class]])
    throw_error(ErrorKind::Orion, std::string("-[_ANEInMemoryModel hexStringIdentifier] returned ") + class_name(hid_any) +
                                      ", not an NSString: no temp folder name" + context());
  hid = (NSString*)hid_any;
  hex_id_ = str(hid);
  std::string dir = model_folder(hex_id_);  // a single safe folder name; any shape is used, as working code does
  if (route_ == Route::in_memory) {
    model_ = [m retain];
    return;
  }
  // Direct route (experimental): the _ANEModel the in-memory model would create for its folder.
  static std::once_flag noted;
  std::call_once(noted, [] {
    std::fprintf(stderr, "orion: note: using the experimental _ANEClient route, %s (reference §11)\n", kClientRouteStatus);
  });
  NSURL* url = [NSURL fileURLWithPath:ns(dir) isDirectory:YES];
  id am = nil;
  std::string at = "+[_ANEModel modelAtURL:<NSURL " + dir + "> key:<NSString " + std::to_string(hex_id_.size()) + " chars>]";
  call("_ANEModel", "modelAtURL:key:", [&] { am = [(id<OrionANEModelClass>)fw.ane_model_class modelAtURL:url key:hid]; }, at);
  if (!am) throw_error(ErrorKind::Orion, at + " returned nil" + context());
  model_ = [am retain];
  id c = nil;
  call("_ANEClient", "sharedConnection", [&] { c = [(id<OrionANEClientClass>)fw.client_class sharedConnection]; },
       "+[_ANEClient sharedConnection]");
  if (!c) throw_error(ErrorKind::Orion, "+[_ANEClient sharedConnection] returned nil" + context());
  client_ = [c retain];
}

// The blob the framework's own save step leaves in the folder's "data" file: it writes every entry's
// first value to <dir>/<first key> = "data" in the weight dictionary's enumeration order, so the last
// enumerated entry wins. The descriptor's own dictionary is enumerated when it answers -weights (it may
// be a copy of ours), else ours. Only the client route and the delta_patch recipe write "data" themselves.
const runtime::WeightEntry* Model::data_blob() {
  const std::vector<runtime::WeightEntry>& ws = weights();
  if (ws.empty()) return nullptr;
  Pool pool;
  id d = nil;
  if ([descriptor_ respondsToSelector:@selector(weights)])
    call("_ANEInMemoryModelDescriptor", "weights", [&] { d = [(id<OrionANEInMemoryModelDescriptor>)descriptor_ weights]; },
         "-[_ANEInMemoryModelDescriptor weights]");
  if (![d isKindOfClass:[NSDictionary class]]) d = weight_dictionary(ws, single_key_entries());
  const runtime::WeightEntry* last = &ws.back();
  for (NSString* key in (NSDictionary*)d)
    for (const auto& w : ws)
      if (w.key == str(key)) last = &w;
  return last;
}

void Model::prepare() {
  folder_ = true;
  populate_model_folder(hex_id_, mil_, weights());
  // The direct route has no in-memory model to run the framework's own save step (net.plist, data).
  if (route_ == Route::client) write_framework_files(hex_id_, mil_, data_blob());
}

void Model::prepare_patch(const std::string& donor_hex_id) {
  folder_ = true;
  populate_model_folder(hex_id_, mil_, weights());
  // The patch was measured with ONE weight file only. With several, "data" gets the blob the
  // framework's own save step would leave there (the last entry in the weight dictionary's
  // enumeration order, see create()): say so, since the probe's outcome may depend on it.
  const runtime::WeightEntry* data = data_blob();
  if (weights().size() > 1)
    std::fprintf(stderr, "orion: note: delta-patch probe (W4) with %zu weight files: 'data' = '%s' (the entry the "
                         "framework's own save step writes last, in the weight dictionary's enumeration order); W4 is "
                         "only documented with one weight file\n", weights().size(), data->key.c_str());
  write_framework_files(hex_id_, mil_, data);
  if (!donor_hex_id.empty()) copy_file(model_folder(donor_hex_id) + "/net.plist", model_folder(hex_id_) + "/net.plist");
}

void Model::compile() {
  Pool pool;
  std::lock_guard<std::mutex> lk(mu_);
  NSError* err = nil;
  BOOL ok = NO;
  NSDictionary* opts = empty_options();
  bool im = route_ == Route::in_memory;
  const char* sel = im ? "compileWithQoS:options:error:" : "compileModel:options:qos:error:";
  std::string what = text(im ? "compileWithQoS:21 options:@{} error:&error"
                             : "compileModel:" + model_arg() + " options:@{} qos:21 error:&error");
  call(cls(), sel, [&] {
    if (im)
      ok = [(id<OrionANEInMemoryModel>)model_ compileWithQoS:kOrionANEQoS options:opts error:&err];
    else
      ok = [(id<OrionANEClient>)client_ compileModel:model_ options:opts qos:kOrionANEQoS error:&err];
  }, what);
  if (ok) {
    stats().framework_compiles++;
    return;
  }
  int64_t n = stats().framework_compiles;
  std::string msg = "ANECCompile() FAILED: " + what + " returned NO: " + describe(err);
  if (!err && n >= 100) {
    Error e(ErrorKind::Budget, msg + "; " + std::to_string(n) + " compiles already happened in this process, so this is "
                                   "most likely the per-process compile budget. Pass changing weights as program inputs "
                                   "(the 'dynamic' strategy) or checkpoint and restart the process [C05]" + context());
    e.constraint = "C05";
    throw e;
  }
  throw_compile("", "", msg + context());
}

LoadOutcome Model::load(bool implicit_compile) {
  Pool pool;
  std::lock_guard<std::mutex> lk(mu_);
  const Framework& fw = framework();
  bool im = route_ == Route::in_memory;
  bool observe = implicit_compile && im && fw.has_compiled_model_exists;
  BOOL existed = NO;
  if (observe)
    call(cls(), "compiledModelExists", [&] { existed = [(id<OrionANEInMemoryModel>)model_ compiledModelExists]; },
         text("compiledModelExists"));
  const char* sel = im ? "loadWithQoS:options:error:" : "loadModel:options:qos:error:";
  std::string what = text(im ? "loadWithQoS:21 options:@{} error:&error"
                             : "loadModel:" + model_arg() + " options:@{} qos:21 error:&error");
  NSError* err = nil;
  BOOL ok = NO;
  for (int attempt = 0; attempt < 2 && !ok; ++attempt) {
    if (attempt) {  // 0x50004-style transient load failures: retry once after 100 ms, as working code does
      stats().load_retries++;
      usleep(100 * 1000);
    }
    err = nil;
    NSDictionary* opts = empty_options();
    call(cls(), sel, [&] {
      if (im)
        ok = [(id<OrionANEInMemoryModel>)model_ loadWithQoS:kOrionANEQoS options:opts error:&err];
      else
        ok = [(id<OrionANEClient>)client_ loadModel:model_ options:opts qos:kOrionANEQoS error:&err];
    }, what);
  }
  if (!ok) throw_error(ErrorKind::Orion, what + " returned NO (also on a retry 100 ms later): " + describe(err) + context());
  loaded_ = true;
  stats().loads++;
  LoadOutcome out;
  if (!implicit_compile) return out;
  if (!observe) {
    stats().unverified_loads++;
    out.unverified = true;
    return out;
  }
  BOOL now = NO;
  call(cls(), "compiledModelExists", [&] { now = [(id<OrionANEInMemoryModel>)model_ compiledModelExists]; },
       text("compiledModelExists"));
  if (!existed && now) {
    stats().hidden_compiles++;
    out.hidden_compile = true;
  }
  return out;
}

LoadOutcome Model::reload(const std::vector<runtime::WeightEntry>& weights) {
  {
    Pool pool;
    std::lock_guard<std::mutex> lk(mu_);
    stats().reload_probes++;
    // As working probe code: unload (its NO is logged, not fatal: the probe judges the outcome),
    // rewrite, load, and build new requests (unload_locked dropped the old ones).
    unload_locked(true);
    // The framework's unload deleted the folder: recreate it with the new weight files.
    populate_model_folder(hex_id_, mil_, weights);
    generation_++;
  }
  return load(true);
}

id Model::request_for(const std::vector<runtime::Surface*>& in, const std::vector<runtime::Surface*>& out) {
  std::vector<uint64_t> key;
  for (auto* s : in) key.push_back(s->id());
  key.push_back(0);
  for (auto* s : out) key.push_back(s->id());
  for (size_t i = 0; i < requests_.size(); ++i) {
    if (requests_[i].key != key) continue;
    CachedRequest hit = requests_[i];
    requests_.erase(requests_.begin() + (long)i);
    requests_.push_back(hit);
    return hit.request;
  }
  const Framework& fw = framework();
  auto wrap = [&](const std::vector<runtime::Surface*>& ss, NSMutableArray* objs, NSMutableArray* idx) {
    for (size_t i = 0; i < ss.size(); ++i) {
      IOSurfaceRef s = (IOSurfaceRef)ss[i]->native_handle();
      std::string what = "+[_ANEIOSurfaceObject objectWithIOSurface:<IOSurface " + std::to_string(ss[i]->alloc_size()) + " B>]";
      id w = nil;
      call("_ANEIOSurfaceObject", "objectWithIOSurface:", [&] {
        w = [(id<OrionANEIOSurfaceObjectClass>)fw.surface_object_class objectWithIOSurface:s];
      }, what);
      if (!w) throw_error(ErrorKind::Orion, what + " returned nil" + context());
      [objs addObject:w];
      [idx addObject:[NSNumber numberWithUnsignedInt:(unsigned)i]];  // slot order = alphabetical (C03/C13)
    }
  };
  NSMutableArray *ins = [NSMutableArray array], *iidx = [NSMutableArray array];
  NSMutableArray *outs = [NSMutableArray array], *oidx = [NSMutableArray array];
  wrap(in, ins, iidx);
  wrap(out, outs, oidx);
  std::string what = "+[_ANERequest requestWithInputs:inputIndices:outputs:outputIndices:weightsBuffer:perfStats:"
                     "procedureIndex:] with " + shape_of_request(in, out);
  id r = nil;
  call("_ANERequest", "requestWithInputs:inputIndices:outputs:outputIndices:weightsBuffer:perfStats:procedureIndex:", [&] {
    r = [(id<OrionANERequestClass>)fw.request_class requestWithInputs:ins
                                                          inputIndices:iidx
                                                               outputs:outs
                                                         outputIndices:oidx
                                                         weightsBuffer:nil
                                                             perfStats:nil
                                                        procedureIndex:[NSNumber numberWithInt:0]];
  }, what);
  if (!r) throw_error(ErrorKind::Orion, what + " returned nil" + context());
  // -validate is the framework's own check, run again inside evaluate (decompiled code); working code does not
  // call it, so a NO only warns here and evaluate's answer decides.
  BOOL valid = YES;
  if ([r respondsToSelector:@selector(validate)])
    call("_ANERequest", "validate", [&] { valid = [(id<OrionANERequest>)r validate]; }, "-[_ANERequest validate] on " + what);
  if (!valid)
    std::fprintf(stderr, "orion: warning: -[_ANERequest validate] answered NO for %s; evaluating anyway%s\n",
                 shape_of_request(in, out).c_str(), context().c_str());
  requests_.push_back({key, [r retain]});
  stats().requests_built++;
  if (requests_.size() > kRequests) {
    [requests_.front().request release];
    requests_.erase(requests_.begin());
  }
  return r;
}

void Model::eval(const std::vector<runtime::Surface*>& in, const std::vector<runtime::Surface*>& out) {
  Pool pool;
  std::lock_guard<std::mutex> lk(mu_);
  if (released_ || !loaded_)
    throw_error(ErrorKind::ProgramState, "the ANE model " + hex_id_.substr(0, 16) + "... is " +
                                             (released_ ? "released" : "not loaded") + context());
  id req = request_for(in, out);
  NSError* err = nil;
  BOOL ok = NO;
  NSDictionary* opts = empty_options();
  bool im = route_ == Route::in_memory;
  const char* sel = im ? "evaluateWithQoS:options:request:error:" : "evaluateWithModel:options:request:qos:error:";
  std::string what = text(im ? "evaluateWithQoS:21 options:@{} request:" + shape_of_request(in, out) + " error:&error"
                             : "evaluateWithModel:" + model_arg() + " options:@{} request:" + shape_of_request(in, out) +
                                   " qos:21 error:&error");
  {
    // The CPU holds every surface locked except while the device uses it (iosurface_storage.h).
    DeviceAccess device(in, out);
    call(cls(), sel, [&] {
      if (im)
        ok = [(id<OrionANEInMemoryModel>)model_ evaluateWithQoS:kOrionANEQoS options:opts request:req error:&err];
      else
        ok = [(id<OrionANEClient>)client_ evaluateWithModel:model_ options:opts request:req qos:kOrionANEQoS error:&err];
    }, what);
  }
  stats().evals++;
  if (!ok && !err)
    throw_eval(0, "C42", what + " returned NO without an NSError: the request failed -[_ANERequest validate]" + context());
  if (!ok) throw_eval(eval_status(err), "", what + " failed: " + describe(err) + context());
}

void Model::unload_locked(bool reloading) {
  if (!loaded_) {
    drop_requests();
    return;
  }
  NSError* err = nil;
  BOOL ok = NO;
  struct Unload {
    Model* m;
    NSError** err;
    BOOL* ok;
    void operator()() {
      if (m->route_ == Route::in_memory)
        *ok = [(id<OrionANEInMemoryModel>)m->model_ unloadWithQoS:kOrionANEQoS error:err];
      else
        *ok = [(id<OrionANEClient>)m->client_ unloadModel:m->model_ options:empty_options() qos:kOrionANEQoS error:err];
    }
  } u{this, &err, &ok};
  NSException* ex = guarded(u);
  drop_requests();  // working probe code builds a new _ANERequest after every reload
  loaded_ = false;  // as working code, which ignores unload's result
  stats().unloads++;
  if (ok && !ex) return;
  std::string msg = text(route_ == Route::in_memory ? "unloadWithQoS:21 error:&error"
                                                    : "unloadModel:" + model_arg() + " options:@{} qos:21 error:&error") +
                    " " + (ex ? "raised " + str([ex name]) + ": " + str([ex reason]) : "returned NO: " + describe(err));
  [ex release];
  stats().unload_failures++;
  if (!reloading) stats().cleanup_errors++;
  std::fprintf(stderr, "orion: %s ANE model %.16s...: %s; continuing%s\n", reloading ? "reloading" : "releasing",
               hex_id_.c_str(), msg.c_str(), context().c_str());
}

void Model::drop_requests() {
  for (auto& r : requests_) [r.request release];
  requests_.clear();
}

void Model::shutdown() noexcept {
  if (released_) return;
  Pool pool;
  std::lock_guard<std::mutex> lk(mu_);
  if (released_) return;
  unload_locked(false);  // before releasing anything (the fake checks "unload before release")
  drop_requests();
  [model_ release];
  [descriptor_ release];
  [client_ release];
  model_ = descriptor_ = client_ = nil;
  released_ = true;
  if (folder_) remove_model_folder(hex_id_);
}

}  // namespace orion::ane
