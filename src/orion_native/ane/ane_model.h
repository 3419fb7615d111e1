// One framework model (one hexStringIdentifier) in this process: the sequence of docs/ane-framework.md
// (temp folder, compile, load, request, eval, unload) on either route, with every call checked.
//   create()  descriptor (NSData MIL + weight dictionary, never nil) -> model -> identifier
//   prepare() temp folder NSTemporaryDirectory()/<id>/ with model.mil + weight files (C44)
//   compile() / load()  QoS 21, options @{} (never nil); load retried once after 100 ms
//   eval()    _ANEIOSurfaceObject wrappers + _ANERequest built once per surface set and reused until
//             the next unload (a reload builds new ones, as working probe code does)
//   shutdown() unload, drop requests, release model/descriptor, remove the folder (idempotent)
// Every error message names the exact call with its arguments' shapes and the NSError.
#pragma once
#import <Foundation/Foundation.h>

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "ane/ane_backend.h"
#include "runtime/backend.h"

namespace orion::ane {

// What a load did, for the weight-update report: a compile inside aned (compiledModelExists NO -> YES),
// or a load where that could not be observed.
struct LoadOutcome {
  bool hidden_compile = false;
  bool unverified = false;
};

class Model {
 public:
  // `weights` (the compile request's) must stay alive until forget_weights(): no copy is kept, the
  // descriptor holds the framework's own.
  Model(Route route, std::string mil, const std::vector<runtime::WeightEntry>& weights);
  ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  void create();
  void prepare();
  // delta_patch: instead of compiling, copy the donor folder's net.plist (or write the MIL as net.plist)
  // and the weight blob as "data", as the one measured patch did.
  void prepare_patch(const std::string& donor_hex_id);
  void compile();
  // hidden: the load is expected to compile inside aned (no explicit compile); counted when observed.
  LoadOutcome load(bool expect_hidden_compile);
  // After the first load: the weight files are in the folder and in the descriptor.
  void forget_weights() { weights_ = nullptr; }
  // delta_reload: unload (a NO is logged, not fatal), rewrite the weight files in the folder, load the same
  // model object again; cached requests are dropped.
  LoadOutcome reload(const std::vector<runtime::WeightEntry>& weights);
  void eval(const std::vector<runtime::Surface*>& in, const std::vector<runtime::Surface*>& out);
  void shutdown() noexcept;

  const std::string& hex_id() const { return hex_id_; }
  const std::string& mil() const { return mil_; }
  Route route() const { return route_; }
  uint64_t generation() const { return generation_; }
  bool released() const { return released_; }

 private:
  id request_for(const std::vector<runtime::Surface*>& in, const std::vector<runtime::Surface*>& out);
  // Unloads when loaded; a NO or an exception is logged and counted, never thrown (working code ignores it).
  void unload_locked(bool reloading);
  void drop_requests();
  const char* cls() const;
  std::string text(const std::string& sel_with_args) const;  // the exact call, for error messages
  std::string model_arg() const;                             // the _ANEModel argument (client route)
  const runtime::WeightEntry* data_blob();                   // what the folder's "data" file holds
  const std::vector<runtime::WeightEntry>& weights() const;

  Route route_;
  std::string mil_;
  const std::vector<runtime::WeightEntry>* weights_;  // until forget_weights() (see the constructor)
  std::string hex_id_;
  id descriptor_ = nil;  // _ANEInMemoryModelDescriptor (retained)
  id model_ = nil;       // _ANEInMemoryModel, or _ANEModel on the client route (retained)
  id client_ = nil;      // _ANEClient (retained), client route only
  bool loaded_ = false, released_ = false, folder_ = false;
  uint64_t generation_ = 0;
  struct CachedRequest {
    std::vector<uint64_t> key;  // surface ids, inputs then outputs
    id request;                 // retained
  };
  std::vector<CachedRequest> requests_;  // most recent last, at most kRequests
  std::mutex mu_;                        // one framework call at a time per model
};

}  // namespace orion::ane
