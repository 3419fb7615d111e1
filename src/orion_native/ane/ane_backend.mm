// The "ane" backend: plugs ane::Model into the runtime's Backend/BackendModel interface and registers
// itself with the backend registry. Every compile is first validated with the simulator's checks and
// the caller's profile (a typed CompileError with the constraint ID before the framework is touched,
// instead of the framework's bare failure), which also give the I/O slots in hardware order, the
// warnings and the cost estimate; no simulator plan (and so no second copy of the weights) is kept:
// the device holds the program.
// The delta recipes run on the device itself, the same way for orion doctor and for training.
#include "ane/ane_backend.h"

#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "ane/ane_folders.h"
#include "ane/ane_framework.h"
#include "ane/ane_model.h"
#include "ane/iosurface_storage.h"
#include "common/error.h"
#include "runtime/backends.h"
#include "runtime/request_rules.h"
#include "sim/backend.h"

namespace orion::ane {

namespace {

std::mutex g_mu;
Route g_route = Route::in_memory;
bool g_route_set = false;
int g_single = -1;  // -1: not read from the environment yet

// Live framework models by identifier: one per hexStringIdentifier, so identical programs share one
// and the folder-collision bug of C44 cannot happen inside the process.
std::map<std::string, std::weak_ptr<Model>>& models() {
  static auto* m = new std::map<std::string, std::weak_ptr<Model>>();
  return *m;
}
std::vector<std::weak_ptr<Model>>& all_models() {  // for shutdown_all, including reloaded ones
  static auto* v = new std::vector<std::weak_ptr<Model>>();
  return *v;
}

// One framework compile or patch at a time: two threads making the same program would otherwise both
// miss find_model() and race on the one temp folder their identifier names.
std::mutex& compile_mutex() {
  static auto* m = new std::mutex();
  return *m;
}

class AneModel : public runtime::BackendModel {
 public:
  AneModel(std::shared_ptr<const sim::Validation> checked, std::shared_ptr<Model> model, int64_t min_surface)
      : checked_(std::move(checked)), model_(std::move(model)), generation_(model_->generation()), min_surface_(min_surface) {}

  const std::vector<runtime::IOSlot>& inputs() const override { return checked_->inputs; }
  const std::vector<runtime::IOSlot>& outputs() const override { return checked_->outputs; }
  std::vector<Warning> compile_warnings() const override { return checked_->warnings; }
  CostEstimate cost() const override { return checked_->cost; }
  Model& model() { return *model_; }
  const std::shared_ptr<Model>& shared_model() const { return model_; }
  const std::shared_ptr<const sim::Validation>& checked() const { return checked_; }

  void eval(const std::vector<runtime::Surface*>& in, const std::vector<runtime::Surface*>& out,
            std::vector<Warning>*) override {
    if (model_->generation() != generation_)
      throw_error(ErrorKind::WeightUpdate, "this compiled program's ANE model was reloaded with other weight files by a "
                                           "delta reload of another program; recompile it");
    require_iosurfaces(in, inputs(), "input");
    require_iosurfaces(out, outputs(), "output");
    runtime::check_request(in, out, inputs(), outputs(), min_surface_);
    model_->eval(in, out);
  }

 private:
  // The device can only read IOSurfaces; plain heap surfaces (orion.Surface) are the simulator's.
  static void require_iosurfaces(const std::vector<runtime::Surface*>& ss, const std::vector<runtime::IOSlot>& slots,
                                 const char* dir) {
    for (size_t i = 0; i < ss.size() && i < slots.size(); ++i)
      if (ss[i] && !ss[i]->native_handle())
        throw_error(ErrorKind::Input, std::string(dir) + " surface for '" + slots[i].name +
                                          "' is not an IOSurface: ANE programs take surfaces made by the ANE backend "
                                          "(prog.input_surface()/output_surface() or the backend's make_surface)");
  }

  std::shared_ptr<const sim::Validation> checked_;
  std::shared_ptr<Model> model_;
  uint64_t generation_;
  int64_t min_surface_;
};

void at_exit() { shutdown_all(); }

std::shared_ptr<Model> find_model(const std::string& hex_id) {
  std::lock_guard<std::mutex> lk(g_mu);
  auto it = models().find(hex_id);
  return it == models().end() ? nullptr : it->second.lock();
}

void register_model(const std::shared_ptr<Model>& model) {
  std::lock_guard<std::mutex> lk(g_mu);
  models()[model->hex_id()] = model;
  all_models().push_back(model);
  for (auto it = models().begin(); it != models().end();) it = it->second.expired() ? models().erase(it) : std::next(it);
  auto& all = all_models();
  for (auto it = all.begin(); it != all.end();) it = it->expired() ? all.erase(it) : std::next(it);
}

AneModel& ane_model(const std::shared_ptr<runtime::BackendModel>& m) {
  auto* a = dynamic_cast<AneModel*>(m.get());
  if (!a) throw_error(ErrorKind::WeightUpdate, "internal: a weight update on the ANE backend got another backend's program");
  return *a;
}

class AneBackend : public runtime::Backend {
 public:
  std::string name() const override { return "ane"; }

  runtime::SurfacePtr make_surface(size_t alloc_size) override { return make_iosurface(alloc_size); }

  std::shared_ptr<runtime::BackendModel> compile(const runtime::CompileRequest& req) override {
    auto checked = start(req);
    std::lock_guard<std::mutex> compiling(compile_mutex());
    auto model = std::make_shared<Model>(route(), *req.mil, *req.weights);
    if (auto shared = share(*model)) return std::make_shared<AneModel>(checked, shared, req.profile.min_surface_bytes);
    model->prepare();
    model->compile();
    model->load(false);
    model->forget_weights();
    register_model(model);
    return std::make_shared<AneModel>(checked, model, req.profile.min_surface_bytes);
  }

  // delta_reload on the very same framework model object: whatever the device does with the rewritten files.
  std::shared_ptr<runtime::BackendModel> reload(const std::shared_ptr<runtime::BackendModel>& loaded,
                                                const runtime::CompileRequest& req, runtime::UpdateReport* r) override {
    AneModel& live = ane_model(loaded);
    {
      // Whatever the reload does, this model no longer stands for its identifier's weights: never
      // share it with a later compile of the original program.
      std::lock_guard<std::mutex> lk(g_mu);
      auto it = models().find(live.model().hex_id());
      if (it != models().end() && it->second.lock() == live.shared_model()) models().erase(it);
    }
    LoadOutcome o = live.model().reload(*req.weights);
    r->unloads = r->loads = 1;
    r->hidden_compiles = o.hidden_compile;
    r->unverified_loads = o.unverified;
    return std::make_shared<AneModel>(live.checked(), live.shared_model(), req.profile.min_surface_bytes);
  }

  // delta_patch: a new descriptor with the new weights, the previous program's compiled files copied into its
  // folder, loaded without an explicit compile; a compile inside aned is observed when it happens.
  std::shared_ptr<runtime::BackendModel> patch(const std::shared_ptr<runtime::BackendModel>& previous,
                                               const runtime::CompileRequest& req, runtime::UpdateReport* r) override {
    std::string donor = ane_model(previous).model().hex_id();
    auto checked = start(req);
    std::lock_guard<std::mutex> compiling(compile_mutex());
    auto model = std::make_shared<Model>(route(), *req.mil, *req.weights);
    if (auto shared = share(*model)) return std::make_shared<AneModel>(checked, shared, req.profile.min_surface_bytes);
    stats().patch_probes++;
    model->prepare_patch(donor);
    LoadOutcome o = model->load(true);
    model->forget_weights();
    r->loads = 1;
    r->hidden_compiles = o.hidden_compile;
    r->unverified_loads = o.unverified;
    register_model(model);
    return std::make_shared<AneModel>(checked, model, req.profile.min_surface_bytes);
  }

 private:
  // The framework is there, and the program passes the simulator's checks.
  static std::shared_ptr<const sim::Validation> start(const runtime::CompileRequest& req) {
    const Framework& fw = framework();
    if (!fw.available) throw_error(ErrorKind::Orion, "the ANE backend is unavailable: " + fw.reason);
    static std::once_flag once;
    std::call_once(once, [] {
      clean_stale_model_folders();
      std::atexit(at_exit);
    });
    return std::make_shared<const sim::Validation>(sim::validate(req));
  }

  // A live model with the same framework identifier answers instead (nothing compiled or loaded).
  static std::shared_ptr<Model> share(Model& model) {
    model.create();
    auto shared = find_model(model.hex_id());
    if (!shared) return nullptr;
    stats().shared_models++;
    model.shutdown();  // never compiled or loaded: just drops the objects
    return shared;
  }
};

class AneProvider : public runtime::BackendProvider {
 public:
  std::string name() const override { return "ane"; }
  runtime::BackendStatus status() override {
    const Framework& fw = framework();
    return {"ane", fw.available, fw.reason};
  }
  runtime::Backend& backend() override {
    const Framework& fw = framework();
    if (!fw.available) throw_error(ErrorKind::Orion, "the ANE backend is unavailable: " + fw.reason);
    static AneBackend* b = new AneBackend();  // process lifetime
    return *b;
  }
};

const bool g_registered = [] {
  runtime::register_backend(new AneProvider());
  return true;
}();

Route route_from_env() {
  const char* r = std::getenv("ORION_ANE_ROUTE");
  return r && std::strcmp(r, "client") == 0 ? Route::client : Route::in_memory;
}

}  // namespace

const char* route_name(Route r) { return r == Route::client ? "client" : "inmemory"; }

Route route() {
  std::lock_guard<std::mutex> lk(g_mu);
  if (!g_route_set) {
    g_route = route_from_env();
    g_route_set = true;
  }
  return g_route;
}

void set_route(Route r) {
  const Framework& fw = framework();
  if (r == Route::client && !fw.client_route)
    throw_error(ErrorKind::Orion, "the _ANEClient route is unavailable: " + fw.client_reason + context());
  std::lock_guard<std::mutex> lk(g_mu);
  g_route = r;
  g_route_set = true;
}

bool single_key_entries() {
  std::lock_guard<std::mutex> lk(g_mu);
  if (g_single < 0) {
    const char* e = std::getenv("ORION_ANE_WEIGHT_ENTRY");
    g_single = e && std::strcmp(e, "one") == 0 ? 1 : 0;
  }
  return g_single == 1;
}

void set_single_key_entries(bool one) {
  std::lock_guard<std::mutex> lk(g_mu);
  g_single = one ? 1 : 0;
}

Stats& stats() {
  static Stats* s = new Stats();
  return *s;
}

int live_models() {
  std::lock_guard<std::mutex> lk(g_mu);
  int n = 0;
  for (auto& w : all_models())
    if (auto m = w.lock(); m && !m->released()) n++;
  return n;
}

void shutdown_all() {
  std::vector<std::shared_ptr<Model>> live;
  {
    std::lock_guard<std::mutex> lk(g_mu);
    for (auto& w : all_models())
      if (auto m = w.lock()) live.push_back(m);
  }
  for (auto& m : live) m->shutdown();  // later wrapper destructors find them released
}

}  // namespace orion::ane
