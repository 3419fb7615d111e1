// The one interface every execution backend implements (the simulator in sim/, the ANE in ane/; each
// registers itself: runtime/backends.h). Nothing above runtime/ knows which backend it talks to, and
// runtime/ includes nothing of a backend; what crosses is what the ANE itself takes: MIL text and a
// weight dictionary of MILBlob files, plus the backend-neutral facts in common/ (profile, warnings, cost).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "common/cost.h"
#include "common/dtype.h"
#include "common/profile.h"
#include "common/warning.h"
#include "runtime/surface.h"

namespace orion::runtime {

struct WeightEntry {
  std::string key;             // "@model_path/weights/w.bin" (BLOBFILE path)
  std::vector<uint8_t> bytes;  // the whole MILBlob file
};

struct IOSlot {
  std::string name;  // MIL name
  DType dtype;
  Shape shape;
  size_t bytes() const { return (size_t)shape_numel(shape) * dtype_size(dtype); }
};

struct CompileRequest {
  const std::string* mil = nullptr;
  const std::vector<WeightEntry>* weights = nullptr;
  Profile profile;
  std::string identifier;
  std::string dir;  // the program's temp folder, already holding model.mil and the weight files (C44)
};

// A compiled program as the device holds it. Shared by every Program with the same identifier.
class BackendModel {
 public:
  virtual ~BackendModel() = default;
  // I/O in hardware slot order: alphabetical (byte-wise) by MIL name (C03, C13).
  virtual const std::vector<IOSlot>& inputs() const = 0;
  virtual const std::vector<IOSlot>& outputs() const = 0;
  // Evaluates with surfaces bound to slots exactly as given (the hardware request): slot i of `in`
  // feeds inputs()[i]. Size and count rules are checked as the hardware does (eval-fail 0x1d).
  virtual void eval(const std::vector<Surface*>& in, const std::vector<Surface*>& out,
                    std::vector<Warning>* warnings) = 0;
  // The same with a hint: live[j] >= 0, the caller reads only the first live[j] entries of the last
  // axis of output slot j (the rest unspecified); -1, all. Backends may ignore it (the ANE does: an
  // eval costs the same for 1 or 16 columns there); the simulator skips what no live entry reads.
  virtual void eval_live(const std::vector<Surface*>& in, const std::vector<Surface*>& out,
                         std::vector<Warning>* warnings, const std::vector<int64_t>& live) {
    eval(in, out, warnings);
  }
  // Whether input slot `slot` is read from a bound surface's panels (Surface::set_panels) when they cover it:
  // every reader of the input a panel GEMM. Otherwise the runtime decodes them into the surface before an eval.
  virtual bool reads_panels(size_t slot) const { return false; }
  // Why parts of the program still compute every column under `live` (debug log).
  virtual std::vector<std::string> live_notes(const std::vector<int64_t>& live) const { return {}; }
  virtual std::vector<Warning> compile_warnings() const { return {}; }
  virtual CostEstimate cost() const { return {}; }
};

// What one weight update did on the device (strategies: orion.weight_updates), as the backend saw it. The runtime
// charges the compile budget from it; it says nothing about the outputs (only a comparison with a fresh
// compile does: orion.weight_updates.probe).
struct UpdateReport {
  int64_t compiles = 0;          // explicit compiles
  int64_t hidden_compiles = 0;   // compiles a load did implicitly, as observed (or as the evidence says)
  int64_t unverified_loads = 0;  // loads that may have compiled where the backend cannot observe it
  int64_t loads = 0, unloads = 0;
  int64_t budget_used = 0;       // set by the runtime: compiles charged to the budget
  std::vector<Warning> warnings;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  virtual std::shared_ptr<BackendModel> compile(const CompileRequest& req) = 0;
  // I/O surfaces for this backend's programs (the ANE backend returns IOSurface-backed ones).
  virtual SurfacePtr make_surface(size_t alloc_size) { return std::make_shared<Surface>(alloc_size); }

  // Weight updates. `dynamic` (weights as inputs) needs nothing from a backend and `recompile` is
  // compile(); these are the two experimental delta recipes, done the same way for every caller.
  // delta_reload: the runtime rewrote the weight files in req.dir (req.weights = the new files);
  // unload `loaded`, load it again. Returns the model that now answers for the program (`loaded` itself
  // when the device kept its program).
  virtual std::shared_ptr<BackendModel> reload(const std::shared_ptr<BackendModel>& loaded, const CompileRequest& req,
                                               UpdateReport* report) = 0;
  // delta_patch: a model for req (new weights, the MIL of `previous`) loaded without an explicit
  // compile, with `previous`'s compiled files as the donor.
  virtual std::shared_ptr<BackendModel> patch(const std::shared_ptr<BackendModel>& previous, const CompileRequest& req,
                                              UpdateReport* report) = 0;
};

}  // namespace orion::runtime
