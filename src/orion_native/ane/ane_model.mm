// See ane_model.h. Manual retain/release (-fno-objc-arc); no @try / C++ try here (ane_guard.h).
#include "ane/ane_model.h"

#include <unistd.h>

#include <cstdio>

#include "ane/ane_folders.h"
#include "ane/ane_framework.h"
#include "ane/iosurface_storage.h"
#include "common/error.h"

namespace orion::ane {

namespace {

constexpr size_t kRequests = 4;  // cached requests per model (one per distinct surface set)

NSDictionary* empty_options() { return [NSDictionary dictionary]; }  // never nil (§2.2)

NSString* ns(const std::string& s) {
  return [[[NSString alloc] initWithBytes:s.data() length:s.size() encoding:NSUTF8StringEncoding] autorelease];
}

// Reference §4: key = the BLOBFILE path, value = {data: whole MILBlob file, offset: 0}. The framework
// uses each entry's allKeys.firstObject / allValues.firstObject, so "data" must enumerate first; when
// it would not, fall back to a single-key entry (which removes the hazard).
NSDictionary* weight_dictionary(const std::vector<runtime::WeightEntry>& weights, bool single) {
  NSMutableDictionary* dict = [NSMutableDictionary dictionaryWithCapacity:weights.size()];
  static bool warned = false;
  for (const auto& w : weights) {
    NSData* blob = [NSData dataWithBytes:w.bytes.data() length:w.bytes.size()];
    NSDictionary* entry = nil;
    if (!single) {
      id<NSCopying> keys[2] = {@"data", @"offset"};
      id values[2] = {blob, [NSNumber numberWithUnsignedLongLong:0]};
      entry = [NSDictionary dictionaryWithObjects:values forKeys:keys count:2];
      if (![[[entry allKeys] objectAtIndex:0] isEqual:@"data"] || [[entry allValues] objectAtIndex:0] != blob) {
        if (!warned)
          std::fprintf(stderr, "orion: ANE weight entries would enumerate 'offset' before 'data' (reference §4 "
                               "ordering hazard); using single-key {data} entries\n");
        warned = true;
        entry = nil;
      }
    }
    if (!entry) {
      id<NSCopying> keys[1] = {@"data"};
      id values[1] = {blob};
      entry = [NSDictionary dictionaryWithObjects:values forKeys:keys count:1];
    }
    [dict setObject:entry forKey:ns(w.key)];
  }
  return dict;  // @{} when weight-free, never nil (C11)
}

}  // namespace

Model::Model(Route route, std::string mil, std::vector<runtime::WeightEntry> weights)
    : route_(route), mil_(std::move(mil)), weights_(std::move(weights)) {}

Model::~Model() { shutdown(); }

const char* Model::cls() const { return route_ == Route::in_memory ? "_ANEInMemoryModel" : "_ANEClient"; }

void Model::create() {
  Pool pool;
  const Framework& fw = framework();
  NSData* text = [NSData dataWithBytes:mil_.data() length:mil_.size()];  // UTF-8 bytes, not NSString (C09)
  NSDictionary* wd = weight_dictionary(weights_, single_key_entries());
  id desc = nil;
  call("_ANEInMemoryModelDescriptor", "modelWithMILText:weights:optionsPlist:", [&] {
    desc = [(id<OrionANEInMemoryModelDescriptorClass>)fw.descriptor_class modelWithMILText:text weights:wd optionsPlist:nil];
  });
  if (!desc)
    throw_compile("C11", "", "+[_ANEInMemoryModelDescriptor modelWithMILText:weights:optionsPlist:] returned nil: the "
                             "framework rejected the MIL text or the weight dictionary (" +
                                 std::to_string(weights_.size()) + " entries)" + context());
  descriptor_ = [desc retain];
  id m = nil;
  call("_ANEInMemoryModel", "inMemoryModelWithDescriptor:", [&] {
    m = [(id<OrionANEInMemoryModelClass>)fw.model_class inMemoryModelWithDescriptor:desc];
  });
  if (!m) throw_error(ErrorKind::Orion, "+[_ANEInMemoryModel inMemoryModelWithDescriptor:] returned nil" + context());
  NSString* hid = nil;
  call("_ANEInMemoryModel", "hexStringIdentifier", [&] { hid = [(id<OrionANEInMemoryModel>)m hexStringIdentifier]; });
  hex_id_ = str(hid);
  std::string dir = model_folder(hex_id_);  // validates the identifier's shape
  if (route_ == Route::in_memory) {
    model_ = [m retain];
    return;
  }
  // Direct route: the _ANEModel the in-memory model would create for its folder (§2.2 "internally").
  NSURL* url = [NSURL fileURLWithPath:ns(dir) isDirectory:YES];
  id am = nil;
  call("_ANEModel", "modelAtURL:key:", [&] { am = [(id<OrionANEModelClass>)fw.ane_model_class modelAtURL:url key:hid]; });
  if (!am) throw_error(ErrorKind::Orion, "+[_ANEModel modelAtURL:key:] returned nil for " + dir + context());
  model_ = [am retain];
  id c = nil;
  call("_ANEClient", "sharedConnection", [&] { c = [(id<OrionANEClientClass>)fw.client_class sharedConnection]; });
  if (!c) throw_error(ErrorKind::Orion, "+[_ANEClient sharedConnection] returned nil" + context());
  client_ = [c retain];
}

void Model::prepare() {
  folder_ = true;
  populate_model_folder(hex_id_, mil_, weights_);
  // The direct route has no in-memory model to run the framework's own save step (§3 step 5).
  if (route_ == Route::client) write_framework_files(hex_id_, mil_, weights_);
}

void Model::prepare_patch(const std::string& donor_hex_id) {
  folder_ = true;
  populate_model_folder(hex_id_, mil_, weights_);
  write_framework_files(hex_id_, mil_, weights_);
  if (!donor_hex_id.empty()) copy_file(model_folder(donor_hex_id) + "/net.plist", model_folder(hex_id_) + "/net.plist");
}

void Model::compile() {
  Pool pool;
  std::lock_guard<std::mutex> lk(mu_);
  NSError* err = nil;
  BOOL ok = NO;
  NSDictionary* opts = empty_options();
  const char* sel = route_ == Route::in_memory ? "compileWithQoS:options:error:" : "compileModel:options:qos:error:";
  call(cls(), sel, [&] {
    if (route_ == Route::in_memory)
      ok = [(id<OrionANEInMemoryModel>)model_ compileWithQoS:kOrionANEQoS options:opts error:&err];
    else
      ok = [(id<OrionANEClient>)client_ compileModel:model_ options:opts qos:kOrionANEQoS error:&err];
  });
  if (ok) {
    stats().framework_compiles++;
    return;
  }
  int64_t n = stats().framework_compiles;
  std::string what = std::string("ANECCompile() FAILED: -[") + cls() + " " + sel + "] returned NO: " + describe(err);
  if (!err && n >= 100) {
    Error e(ErrorKind::Budget, what + "; " + std::to_string(n) + " compiles already happened in this process, so this is "
                                   "most likely the per-process compile budget. Pass changing weights as program inputs "
                                   "(the 'dynamic' strategy) or checkpoint and restart the process [C05]" + context());
    e.constraint = "C05";
    throw e;
  }
  throw_compile("", "", what + context());
}

void Model::load(bool implicit_compile) {
  Pool pool;
  std::lock_guard<std::mutex> lk(mu_);
  const Framework& fw = framework();
  bool observe = implicit_compile && route_ == Route::in_memory && fw.has_compiled_model_exists;
  BOOL existed = NO;
  if (observe)
    call(cls(), "compiledModelExists", [&] { existed = [(id<OrionANEInMemoryModel>)model_ compiledModelExists]; });
  const char* sel = route_ == Route::in_memory ? "loadWithQoS:options:error:" : "loadModel:options:qos:error:";
  NSError* err = nil;
  BOOL ok = NO;
  for (int attempt = 0; attempt < 2 && !ok; ++attempt) {
    if (attempt) {  // 0x50004-style transient load failures: retry once after 100 ms (§8)
      stats().load_retries++;
      usleep(100 * 1000);
    }
    err = nil;
    NSDictionary* opts = empty_options();
    call(cls(), sel, [&] {
      if (route_ == Route::in_memory)
        ok = [(id<OrionANEInMemoryModel>)model_ loadWithQoS:kOrionANEQoS options:opts error:&err];
      else
        ok = [(id<OrionANEClient>)client_ loadModel:model_ options:opts qos:kOrionANEQoS error:&err];
    });
  }
  if (!ok)
    throw_error(ErrorKind::Orion, std::string("-[") + cls() + " " + sel + "] returned NO (also on a retry 100 ms later): " +
                                      describe(err) + context());
  loaded_ = true;
  stats().loads++;
  if (!implicit_compile) return;
  if (!observe) {
    stats().unverified_loads++;
    return;
  }
  BOOL now = NO;
  call(cls(), "compiledModelExists", [&] { now = [(id<OrionANEInMemoryModel>)model_ compiledModelExists]; });
  if (!existed && now) stats().hidden_compiles++;
}

void Model::reload(const std::vector<runtime::WeightEntry>& weights) {
  {
    Pool pool;
    std::lock_guard<std::mutex> lk(mu_);
    stats().reload_probes++;
    unload_locked(true);
    // The framework's unload deleted the folder (§3 step 8): recreate it with the new weight files.
    populate_model_folder(hex_id_, mil_, weights);
    weights_ = weights;
    generation_++;
  }
  load(true);
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
      id w = nil;
      call("_ANEIOSurfaceObject", "objectWithIOSurface:", [&] {
        w = [(id<OrionANEIOSurfaceObjectClass>)fw.surface_object_class objectWithIOSurface:s];
      });
      if (!w) throw_error(ErrorKind::Orion, "+[_ANEIOSurfaceObject objectWithIOSurface:] returned nil" + context());
      [objs addObject:w];
      [idx addObject:[NSNumber numberWithUnsignedInt:(unsigned)i]];  // slot order = alphabetical (C03/C13)
    }
  };
  NSMutableArray *ins = [NSMutableArray array], *iidx = [NSMutableArray array];
  NSMutableArray *outs = [NSMutableArray array], *oidx = [NSMutableArray array];
  wrap(in, ins, iidx);
  wrap(out, outs, oidx);
  id r = nil;
  call("_ANERequest", "requestWithInputs:inputIndices:outputs:outputIndices:weightsBuffer:perfStats:procedureIndex:", [&] {
    r = [(id<OrionANERequestClass>)fw.request_class requestWithInputs:ins
                                                          inputIndices:iidx
                                                               outputs:outs
                                                         outputIndices:oidx
                                                         weightsBuffer:nil
                                                             perfStats:nil
                                                        procedureIndex:[NSNumber numberWithInt:0]];
  });
  if (!r) throw_error(ErrorKind::Orion, "+[_ANERequest requestWithInputs:...procedureIndex:] returned nil" + context());
  BOOL valid = YES;
  if ([r respondsToSelector:@selector(validate)]) call("_ANERequest", "validate", [&] { valid = [(id<OrionANERequest>)r validate]; });
  if (!valid)
    throw_eval(0, "C42", "-[_ANERequest validate] rejected a request with " + std::to_string(in.size()) + " inputs and " +
                             std::to_string(out.size()) + " outputs" + context());
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
  for (auto* s : in) surface_cpu_wrote(s->native_handle());
  NSError* err = nil;
  BOOL ok = NO;
  NSDictionary* opts = empty_options();
  const char* sel = route_ == Route::in_memory ? "evaluateWithQoS:options:request:error:"
                                               : "evaluateWithModel:options:request:qos:error:";
  call(cls(), sel, [&] {
    if (route_ == Route::in_memory)
      ok = [(id<OrionANEInMemoryModel>)model_ evaluateWithQoS:kOrionANEQoS options:opts request:req error:&err];
    else
      ok = [(id<OrionANEClient>)client_ evaluateWithModel:model_ options:opts request:req qos:kOrionANEQoS error:&err];
  });
  stats().evals++;
  if (!ok && !err)
    throw_eval(0, "C42", std::string("-[") + cls() + " " + sel + "] returned NO without an NSError: the request failed "
                         "-[_ANERequest validate]" + context());
  if (!ok) throw_eval(eval_status(err), "", std::string("-[") + cls() + " " + sel + "] failed: " + describe(err) + context());
  for (auto* s : out) surface_cpu_will_read(s->native_handle());
}

void Model::unload_locked(bool report) {
  if (!loaded_) return;
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
  loaded_ = false;
  stats().unloads++;
  if (ok && !ex) return;
  std::string sel = route_ == Route::in_memory ? "unloadWithQoS:error:" : "unloadModel:options:qos:error:";
  std::string msg = std::string("-[") + cls() + " " + sel + "] " +
                    (ex ? "raised " + str([ex name]) + ": " + str([ex reason]) : "returned NO: " + describe(err));
  [ex release];
  if (report) throw_error(ErrorKind::WeightUpdate, msg + context());
  stats().cleanup_errors++;
  std::fprintf(stderr, "orion: releasing ANE model %.16s...: %s\n", hex_id_.c_str(), msg.c_str());
}

void Model::shutdown() noexcept {
  if (released_) return;
  Pool pool;
  std::lock_guard<std::mutex> lk(mu_);
  if (released_) return;
  unload_locked(false);  // before releasing anything (the fake checks "unload before release")
  for (auto& r : requests_) [r.request release];
  requests_.clear();
  [model_ release];
  [descriptor_ release];
  [client_ release];
  model_ = descriptor_ = client_ = nil;
  released_ = true;
  if (folder_) remove_model_folder(hex_id_);
}

}  // namespace orion::ane
