#include "runtime/program.h"

#include <algorithm>
#include <cstring>

#include "common/error.h"
#include "runtime/folders.h"
#include "runtime/process.h"
#include "runtime/sha256.h"
#include "cpu/kernels/kernels.h"

namespace orion::runtime {

const char* state_name(State s) {
  switch (s) {
    case State::compiled: return "compiled";
    case State::loaded: return "loaded";
    case State::unloaded: return "unloaded";
    case State::released: return "released";
  }
  return "?";
}

// <sha(MIL)>_<sha(weights)>_<sha(options)>, as _ANEInMemoryModelDescriptor -hexStringIdentifier: the
// weights part hashes every entry's bytes in key order, so different weights => different identifier.
std::string make_identifier(const std::string& mil, const std::vector<WeightEntry>& weights, const std::string& options) {
  Sha256 w;
  for (const auto& e : weights) w.update(e.bytes.data(), e.bytes.size());
  return sha256_hex(mil.data(), mil.size()) + "_" + w.hex_upper() + "_" + sha256_hex(options.data(), options.size());
}

Program::Program(Backend& backend, std::string mil, std::vector<WeightEntry> weights, const Profile& profile)
    : backend_(&backend), mil_(std::move(mil)), profile_(profile) {
  compile_into(std::move(weights));
  allocate_surfaces();
}

Program::~Program() {
  try {
    release();
  } catch (...) {
  }
}

namespace {
// Sorted by key (the identifier hashes them in key order); keys valid, none empty or twice (C11).
void check_weights(std::vector<WeightEntry>& weights) {
  std::sort(weights.begin(), weights.end(), [](const WeightEntry& a, const WeightEntry& b) { return a.key < b.key; });
  for (size_t i = 0; i < weights.size(); ++i) {
    weight_relative_path(weights[i].key);
    if (weights[i].bytes.empty())
      throw_compile("C11", "", "Empty weights dictionary entry for '" + weights[i].key + "'");
    if (i && weights[i].key == weights[i - 1].key)
      throw_error(ErrorKind::Input, "weight key '" + weights[i].key + "' given twice");
  }
}

std::vector<std::string> keys_of(const std::vector<WeightEntry>& weights) {
  std::vector<std::string> k;
  for (const auto& w : weights) k.push_back(w.key);
  return k;
}
}  // namespace

CompileRequest Program::request(const std::vector<WeightEntry>& weights, const std::string& id, const std::string& dir) const {
  CompileRequest req;
  req.mil = &mil_;
  req.weights = &weights;
  req.profile = profile_;
  req.identifier = id;
  req.dir = dir;
  return req;
}

void Program::compile_into(std::vector<WeightEntry> weights) {
  check_weights(weights);
  const std::string backend = backend_->name();
  check_budget(backend, profile_.compile_budget);
  std::string id = make_identifier(mil_, weights, backend + ";" + profile_key(profile_));
  std::string dir = acquire_folder(id, mil_, weights);
  std::shared_ptr<BackendModel> model = cache_find(id);
  if (model) {
    counters().cache_hits++;
  } else {
    try {
      model = backend_->compile(request(weights, id, dir));
    } catch (...) {
      release_folder(id);
      throw;
    }
    cache_put(id, model);
  }
  if (model_) check_same_io(*model);
  charge_budget(backend);
  counters().compiles++;
  if (!identifier_.empty()) release_folder(identifier_);
  identifier_ = id;
  dir_ = dir;
  model_ = std::move(model);
  weight_keys_ = keys_of(weights);
  inputs_ = model_->inputs();
  outputs_ = model_->outputs();
  in_index_.clear();
  out_index_.clear();
  for (size_t i = 0; i < inputs_.size(); ++i) in_index_[inputs_[i].name] = (int)i;
  for (size_t i = 0; i < outputs_.size(); ++i) out_index_[outputs_[i].name] = (int)i;
}

std::vector<Warning> Program::compile_warnings() const {
  std::lock_guard<std::mutex> lk(mu_);
  return model_ ? model_->compile_warnings() : std::vector<Warning>{};
}

bool Program::reads_panels(size_t slot) const {
  std::lock_guard<std::mutex> lk(mu_);
  return model_ && slot < inputs_.size() && model_->reads_panels(slot);
}

CostEstimate Program::cost() const {
  std::lock_guard<std::mutex> lk(mu_);
  return model_ ? model_->cost() : CostEstimate{};
}

void Program::check_same_io(const BackendModel& m) const {
  auto same = [](const std::vector<IOSlot>& a, const std::vector<IOSlot>& b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i)
      if (a[i].name != b[i].name || a[i].dtype != b[i].dtype || a[i].shape != b[i].shape) return false;
    return true;
  };
  if (!same(m.inputs(), model_->inputs()) || !same(m.outputs(), model_->outputs()))
    throw_error(ErrorKind::WeightUpdate, "the updated program's inputs/outputs differ from the original's");
}

// Uniform alloc per direction at max(largest tensor, minimum surface) — C02, C04, C12.
void Program::allocate_surfaces() {
  auto alloc = [&](const std::vector<IOSlot>& slots, std::vector<SurfacePtr>& out) {
    size_t size = (size_t)profile_.min_surface_bytes;
    for (const auto& s : slots) size = std::max(size, s.bytes());
    out.clear();
    for (size_t i = 0; i < slots.size(); ++i) out.push_back(backend_->make_surface(size));
  };
  alloc(model_->inputs(), in_);
  alloc(model_->outputs(), out_);
  staged_.assign(in_.size(), false);
}

std::vector<std::string> Program::weight_keys() const {
  std::lock_guard<std::mutex> lk(mu_);
  return weight_keys_;
}

State Program::state() const {
  std::lock_guard<std::mutex> lk(mu_);
  return state_;
}

void Program::require_live(const char* action) const {
  if (state_ == State::released)
    throw_error(ErrorKind::ProgramState, std::string("cannot ") + action + ": the program was released");
}

void Program::require(State s, const char* action) const {
  require_live(action);
  if (state_ != s)
    throw_error(ErrorKind::ProgramState, std::string("cannot ") + action + ": the program is " + state_name(state_) +
                                             ", it must be " + state_name(s) + (s == State::loaded ? " (call load())" : ""));
}

int Program::input_slot(const std::string& name) const {
  auto it = in_index_.find(name);
  return it == in_index_.end() ? -1 : it->second;
}

int Program::output_slot(const std::string& name) const {
  auto it = out_index_.find(name);
  return it == out_index_.end() ? -1 : it->second;
}

void Program::load() {
  std::lock_guard<std::mutex> lk(mu_);
  require_live("load");
  if (state_ == State::loaded) return;
  state_ = State::loaded;
  counters().loads++;
}

void Program::unload() {
  std::lock_guard<std::mutex> lk(mu_);
  require_live("unload");
  if (state_ != State::loaded) return;
  state_ = State::unloaded;
  counters().unloads++;
}

void Program::release() {
  std::lock_guard<std::mutex> lk(mu_);
  if (state_ == State::released) return;
  if (state_ == State::loaded) counters().unloads++;
  state_ = State::released;
  release_folder(identifier_);
  model_.reset();
  in_.clear();
  out_.clear();
  counters().releases++;
}

SurfacePtr Program::input_surface(size_t slot) const {
  std::lock_guard<std::mutex> lk(mu_);
  require_live("access a surface");
  if (slot >= in_.size()) throw_error(ErrorKind::Input, "input slot " + std::to_string(slot) + " out of range");
  return in_[slot];
}

SurfacePtr Program::output_surface(size_t slot) const {
  std::lock_guard<std::mutex> lk(mu_);
  require_live("access a surface");
  if (slot >= out_.size()) throw_error(ErrorKind::Input, "output slot " + std::to_string(slot) + " out of range");
  return out_[slot];
}

void Program::bind_input(size_t slot, SurfacePtr s) {
  std::lock_guard<std::mutex> lk(mu_);
  require_live("bind a surface");
  if (slot >= in_.size() || !s) throw_error(ErrorKind::Input, "bad input slot or surface");
  in_[slot] = std::move(s);
  staged_[slot] = false;
}

void Program::bind_output(size_t slot, SurfacePtr s) {
  std::lock_guard<std::mutex> lk(mu_);
  require_live("bind a surface");
  if (slot >= out_.size() || !s) throw_error(ErrorKind::Input, "bad output slot or surface");
  out_[slot] = std::move(s);
}

void Program::write_input(size_t slot, const void* src, DType src_dtype, size_t n, bool stage) {
  std::lock_guard<std::mutex> lk(mu_);
  require_live("write an input");
  if (slot >= inputs_.size()) throw_error(ErrorKind::Input, "input slot out of range");
  const IOSlot& io = inputs_[slot];
  if ((int64_t)n != shape_numel(io.shape))
    throw_error(ErrorKind::Input, "input '" + io.name + "' takes " + std::to_string(shape_numel(io.shape)) +
                                      " elements " + shape_str(io.shape) + ", got " + std::to_string(n));
  Surface& s = *in_[slot];
  if (s.alloc_size() < io.bytes())
    throw_error(ErrorKind::Input, "surface bound to '" + io.name + "' is smaller than the tensor");
  // Packed from byte 0 (C14).
  if (src_dtype == io.dtype) {
    std::memcpy(s.data(), src, io.bytes());
  } else if (src_dtype == DType::fp32 && io.dtype == DType::fp16) {
    cpu::kernels::f32_to_f16(static_cast<const float*>(src), reinterpret_cast<f16*>(s.data()), n);
  } else if (src_dtype == DType::fp16 && io.dtype == DType::fp32) {
    cpu::kernels::f16_to_f32(static_cast<const f16*>(src), reinterpret_cast<float*>(s.data()), n);
  } else {
    throw_error(ErrorKind::Input, std::string("input '") + io.name + "' is " + dtype_name(io.dtype) +
                                      "; pass float16 or float32 data, not " + dtype_name(src_dtype));
  }
  if (stage) {
    staged_[slot] = true;
    counters().weight_writes++;
  }
  counters().bytes_written += (int64_t)io.bytes();
}

SurfacePtr Program::new_surface(size_t alloc_size) const {
  check_surface_size(alloc_size);
  return backend_->make_surface(alloc_size);
}

namespace {
// A bound surface's panels are decoded into its bytes for a program that reads the bytes (Surface::set_panels).
void materialize_unread_panels(const BackendModel& model, const std::vector<Surface*>& in) {
  for (size_t s = 0; s < in.size(); ++s)
    if (in[s] && !in[s]->panels().empty() && !model.reads_panels(s)) in[s]->materialize_panels();
}
}  // namespace

std::vector<Warning> Program::eval(const std::vector<int64_t>* live) {
  std::lock_guard<std::mutex> lk(mu_);
  require(State::loaded, "evaluate");
  std::vector<Surface*> in, out;
  for (auto& s : in_) in.push_back(s.get());
  for (auto& s : out_) out.push_back(s.get());
  materialize_unread_panels(*model_, in);
  std::vector<Warning> w;
  if (live)
    model_->eval_live(in, out, &w, *live);
  else
    model_->eval(in, out, &w);
  counters().evals++;
  return w;
}

std::vector<std::string> Program::live_notes(const std::vector<int64_t>& live) const {
  std::lock_guard<std::mutex> lk(mu_);
  require_live("analyse");
  return model_->live_notes(live);
}

std::vector<Warning> Program::eval_slots(const std::vector<SurfacePtr>& in_s, const std::vector<SurfacePtr>& out_s) {
  std::lock_guard<std::mutex> lk(mu_);
  require(State::loaded, "evaluate");
  std::vector<Surface*> in, out;
  for (auto& s : in_s) in.push_back(s.get());
  for (auto& s : out_s) out.push_back(s.get());
  materialize_unread_panels(*model_, in);
  std::vector<Warning> w;
  model_->eval(in, out, &w);
  counters().evals++;
  return w;
}

// Every compile the device did or may have done is charged, unobservable loads included.
void Program::charge(UpdateReport* r) {
  r->budget_used = r->compiles + r->hidden_compiles + r->unverified_loads;
  for (int64_t i = 0; i < r->budget_used; ++i) charge_budget(backend_->name());
  counters().compiles += r->budget_used;
  counters().hidden_compiles += r->hidden_compiles;
}

UpdateReport Program::recompile(std::vector<WeightEntry> weights) {
  std::lock_guard<std::mutex> lk(mu_);
  require_live("recompile");
  compile_into(std::move(weights));
  UpdateReport r;
  r.compiles = r.budget_used = 1;  // compile_into charged it
  if (state_ == State::loaded) {
    r.loads = 1;
    counters().loads++;
  }
  return r;
}

UpdateReport Program::delta_reload(const std::vector<WeightEntry>& weights) {
  std::lock_guard<std::mutex> lk(mu_);
  require_live("reload weights");
  std::vector<std::string> new_keys = keys_of(weights);
  std::sort(new_keys.begin(), new_keys.end());
  if (weight_keys_ != new_keys)
    throw_error(ErrorKind::WeightUpdate, "delta reload rewrites the program's existing weight files; give exactly the keys it was compiled with");
  bool was_loaded = state_ == State::loaded;
  rewrite_weight_files(dir_, weights);
  UpdateReport r;
  std::shared_ptr<BackendModel> model = backend_->reload(model_, request(weights, identifier_, dir_), &r);
  check_same_io(*model);
  model_ = std::move(model);
  charge(&r);
  if (was_loaded) counters().unloads += r.unloads;
  counters().loads += r.loads;
  state_ = State::loaded;
  return r;
}

UpdateReport Program::delta_patch(std::vector<WeightEntry> weights) {
  std::lock_guard<std::mutex> lk(mu_);
  require_live("patch weights");
  check_weights(weights);
  const std::string backend = backend_->name();
  check_budget(backend, profile_.compile_budget);  // the patch may be a compile in disguise
  std::string id = make_identifier(mil_, weights, backend + ";" + profile_key(profile_));
  std::string dir = acquire_folder(id, mil_, weights);
  UpdateReport r;
  std::shared_ptr<BackendModel> model;
  try {
    model = backend_->patch(model_, request(weights, id, dir), &r);
    check_same_io(*model);
  } catch (...) {
    release_folder(id);
    throw;
  }
  cache_put(id, model);
  charge(&r);
  counters().loads += r.loads;
  release_folder(identifier_);
  identifier_ = id;
  dir_ = dir;
  model_ = std::move(model);
  weight_keys_ = keys_of(weights);
  state_ = State::loaded;
  return r;
}

}  // namespace orion::runtime
