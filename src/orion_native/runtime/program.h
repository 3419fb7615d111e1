// A program's lifecycle, identical for every backend: compile(MIL text, weights) -> load -> eval ->
// unload -> release. Owns its I/O surfaces (uniform alloc per direction, >= the profile minimum) and
// binds them in the hardware's slot order, so callers only ever deal in names.
#pragma once
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/backend.h"
#include "runtime/surface.h"

namespace orion::runtime {

enum class State { compiled, loaded, unloaded, released };
const char* state_name(State s);

class Program {
 public:
  // Validates the weight dictionary (C11), charges the compile budget (C05), lays out the temp
  // folder (C44) and compiles, reusing a cached compiled model for a known identifier.
  Program(Backend& backend, std::string mil, std::vector<WeightEntry> weights, const Profile& profile);
  ~Program();

  const std::string& identifier() const { return identifier_; }
  const std::string& mil() const { return mil_; }
  const std::string& folder() const { return dir_; }
  std::string backend_name() const { return backend_->name(); }
  std::vector<std::string> weight_keys() const;
  State state() const;
  // Slot order; copies kept by the Program so they stay valid after release().
  const std::vector<IOSlot>& inputs() const { return inputs_; }
  const std::vector<IOSlot>& outputs() const { return outputs_; }
  int input_slot(const std::string& name) const;   // -1 when unknown
  int output_slot(const std::string& name) const;
  // Whether the compiled program reads input `slot` from a bound surface's panels (BackendModel::reads_panels).
  bool reads_panels(size_t slot) const;
  std::vector<Warning> compile_warnings() const;
  CostEstimate cost() const;

  void load();
  void unload();
  void release();

  SurfacePtr input_surface(size_t slot) const;
  SurfacePtr output_surface(size_t slot) const;
  void bind_input(size_t slot, SurfacePtr s);
  void bind_output(size_t slot, SurfacePtr s);
  // A zero-filled surface this program's backend can bind (an IOSurface on the ANE: heap surfaces are
  // the simulator's), e.g. a layer's weights or cache for a program that every layer shares.
  SurfacePtr new_surface(size_t alloc_size) const;

  // Copies `n` elements of `src_dtype` (fp16 or fp32) into the slot's surface, converting to the
  // slot's dtype; marks the input as staged (it may then be omitted from later calls).
  void write_input(size_t slot, const void* src, DType src_dtype, size_t n, bool stage);
  bool staged(size_t slot) const { return staged_[slot]; }
  // Runs with the currently bound surfaces (GIL must be released by the caller). `live` (per output
  // slot, BackendModel::eval_live): only those leading entries of each output's last axis are read.
  std::vector<Warning> eval(const std::vector<int64_t>* live = nullptr);
  std::vector<std::string> live_notes(const std::vector<int64_t>& live) const;
  // Held by a binding across write-inputs -> eval -> read-outputs so concurrent callers of one
  // program cannot interleave their surfaces.
  std::mutex& call_mutex() { return call_mu_; }
  // Raw request: surfaces bound to hardware slots exactly as given (no name mapping).
  std::vector<Warning> eval_slots(const std::vector<SurfacePtr>& in, const std::vector<SurfacePtr>& out);

  // Weight-update primitives (strategies: orion.weight_updates), one path per recipe for every caller; each keeps
  // this Program's surfaces and reports what the device did (the runtime charges the budget from it).
  // Whether the outputs follow the new weights is the probe's question (orion.weight_updates.probe).
  // recompile: new program from new weight bytes; the old compiled model is dropped; budget charged.
  UpdateReport recompile(std::vector<WeightEntry> weights);
  // delta_reload (experimental): rewrite the weight files in the folder, then the backend
  // unloads and loads the same model. Give exactly the keys the program was compiled with.
  UpdateReport delta_reload(const std::vector<WeightEntry>& weights);
  // delta_patch (experimental): a new descriptor with the new weights and the old MIL, loaded
  // without an explicit compile, the current program as the donor. Checked against the budget first.
  UpdateReport delta_patch(std::vector<WeightEntry> weights);

 private:
  void require(State s, const char* action) const;
  void require_live(const char* action) const;
  CompileRequest request(const std::vector<WeightEntry>& weights, const std::string& id, const std::string& dir) const;
  void compile_into(std::vector<WeightEntry> weights);
  void charge(UpdateReport* r);
  void allocate_surfaces();
  void check_same_io(const BackendModel& m) const;

  Backend* backend_;
  std::string mil_;
  std::vector<std::string> weight_keys_;  // sorted; the bytes are the backend's (no copy kept here)
  Profile profile_;
  std::string identifier_, dir_;
  std::shared_ptr<BackendModel> model_;
  State state_ = State::compiled;
  std::vector<IOSlot> inputs_, outputs_;
  std::vector<SurfacePtr> in_, out_;
  std::vector<bool> staged_;
  std::unordered_map<std::string, int> in_index_, out_index_;
  mutable std::mutex mu_;
  std::mutex call_mu_;
};

std::string make_identifier(const std::string& mil, const std::vector<WeightEntry>& weights, const std::string& options);

}  // namespace orion::runtime
