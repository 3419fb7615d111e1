// Simulator backend: parses the MIL text, builds a checked Plan (which snapshots the weights: C07)
// and evaluates it on surfaces with the hardware's binding and size rules; the delta recipes follow
// the profile. validate(): the same checks for other backends, without a plan.
#include "sim/backend.h"

#include <algorithm>
#include <string>

#include "common/error.h"
#include "mil/parser.h"
#include "runtime/backends.h"
#include "runtime/folders.h"
#include "runtime/request_rules.h"
#include "sim/plan.h"

namespace orion::sim {

namespace {

using runtime::Backend;
using runtime::BackendModel;
using runtime::CompileRequest;
using runtime::IOSlot;
using runtime::Surface;
using runtime::UpdateReport;

std::vector<IOSlot> sorted_slots(const std::vector<IOInfo>& io, std::vector<size_t>* plan_index) {
  std::vector<size_t> order(io.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  // Byte-wise order of MIL names: the documented binding order (C03, C13).
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return io[a].name < io[b].name; });
  std::vector<IOSlot> slots;
  for (size_t i : order) slots.push_back({io[i].name, io[i].dtype, io[i].shape});
  *plan_index = order;
  return slots;
}

class SimModel : public BackendModel {
 public:
  SimModel(std::unique_ptr<Plan> plan, Profile profile, std::vector<Warning> warnings)
      : plan_(std::move(plan)), profile_(profile), warnings_(std::move(warnings)) {
    inputs_ = sorted_slots(plan_->inputs(), &in_plan_index_);
    outputs_ = sorted_slots(plan_->outputs(), &out_plan_index_);
  }
  const std::vector<IOSlot>& inputs() const override { return inputs_; }
  const std::vector<IOSlot>& outputs() const override { return outputs_; }
  std::vector<Warning> compile_warnings() const override { return warnings_; }
  CostEstimate cost() const override { return plan_->cost(); }

  void eval(const std::vector<Surface*>& in, const std::vector<Surface*>& out,
            std::vector<Warning>* warnings) override {
    runtime::check_request(in, out, inputs_, outputs_, profile_.min_surface_bytes);
    std::vector<const void*> in_ptrs(in.size());
    std::vector<void*> out_ptrs(out.size());
    // Slot i feeds the i-th name in sorted order, whatever the caller meant (C13/C03 reproduce).
    for (size_t s = 0; s < in.size(); ++s) in_ptrs[in_plan_index_[s]] = in[s]->data();
    for (size_t s = 0; s < out.size(); ++s) out_ptrs[out_plan_index_[s]] = out[s]->data();
    InputPanels panels;
    plan_->execute(in_ptrs, out_ptrs, warnings, input_panels(in, &panels));
  }

  bool reads_panels(size_t slot) const override {
    return slot < in_plan_index_.size() && plan_->reads_panels(in_plan_index_[slot]);
  }

  void eval_live(const std::vector<Surface*>& in, const std::vector<Surface*>& out, std::vector<Warning>* warnings,
                 const std::vector<int64_t>& live) override {
    runtime::check_request(in, out, inputs_, outputs_, profile_.min_surface_bytes);
    std::vector<const void*> in_ptrs(in.size());
    std::vector<void*> out_ptrs(out.size());
    for (size_t s = 0; s < in.size(); ++s) in_ptrs[in_plan_index_[s]] = in[s]->data();
    for (size_t s = 0; s < out.size(); ++s) out_ptrs[out_plan_index_[s]] = out[s]->data();
    InputPanels panels;
    plan_->execute_live(in_ptrs, out_ptrs, warnings, plan_order(live), input_panels(in, &panels));
  }

  std::vector<std::string> live_notes(const std::vector<int64_t>& live) const override {
    return plan_->live_notes(plan_order(live));
  }

 private:
  std::unique_ptr<Plan> plan_;
  Profile profile_;
  std::vector<Warning> warnings_;
  std::vector<IOSlot> inputs_, outputs_;
  std::vector<size_t> in_plan_index_, out_plan_index_;

  // The bound surfaces' panels that cover their input (by plan input index), or null when none do; panels that
  // do not cover what the plan reads are decoded into their surface's bytes instead.
  const InputPanels* input_panels(const std::vector<Surface*>& in, InputPanels* panels) const {
    bool any = false;
    for (size_t s = 0; s < in.size(); ++s) {
      if (in[s]->panels().empty()) continue;
      const size_t i = in_plan_index_[s];
      if (!plan_->panels_cover(i, in[s]->panels())) {
        in[s]->materialize_panels();
        continue;
      }
      panels->resize(in.size(), nullptr);
      (*panels)[i] = &in[s]->panels();
      any = true;
    }
    return any ? panels : nullptr;
  }

  std::vector<int64_t> plan_order(const std::vector<int64_t>& live_by_slot) const {
    std::vector<int64_t> r(out_plan_index_.size(), -1);
    for (size_t s = 0; s < live_by_slot.size() && s < r.size(); ++s) r[out_plan_index_[s]] = live_by_slot[s];
    return r;
  }
};

std::vector<WeightFile> weight_files(const CompileRequest& req) {
  std::vector<WeightFile> files;
  for (const auto& w : *req.weights) files.push_back({w.key, w.bytes.data(), w.bytes.size()});
  return files;
}

class SimBackend : public Backend {
 public:
  std::string name() const override { return "sim"; }
  std::shared_ptr<BackendModel> compile(const CompileRequest& req) override {
    mil::Program prog = mil::parse(*req.mil);
    std::vector<Warning> warnings;
    auto plan = build_plan(prog, weight_files(req), req.profile, &warnings);
    return std::make_shared<SimModel>(std::move(plan), req.profile, std::move(warnings));
  }

  // The profile decides what the device does: "hardware" = the load finds the identifier's compiled
  // program and never reads the rewritten files (C07, measured on M4/M5); "paper" = it reads them
  // (Orion's claim), without a compile.
  std::shared_ptr<BackendModel> reload(const std::shared_ptr<BackendModel>& loaded, const CompileRequest& req,
                                       UpdateReport* r) override {
    r->unloads = r->loads = 1;
    if (req.profile.delta == DeltaBehaviour::hardware) {
      r->warnings.push_back({"C07", "AneSimWarning: delta reload left the baked weights in place (the loaded program "
                                    "is the identifier's cached compile) [C07]"});
      return loaded;
    }
    std::vector<std::string> keys;
    for (const auto& w : *req.weights) keys.push_back(w.key);
    std::vector<runtime::WeightEntry> files = runtime::read_weight_files(req.dir, keys);
    CompileRequest reread = req;
    reread.weights = &files;
    return compile(reread);
  }

  // delta_patch: the new identifier is unknown to the device, so the load compiles: the evidence says it is
  // a compile in disguise, charged under the hardware profile; free under "paper".
  std::shared_ptr<BackendModel> patch(const std::shared_ptr<BackendModel>&, const CompileRequest& req,
                                      UpdateReport* r) override {
    auto model = compile(req);
    r->loads = 1;
    if (req.profile.delta == DeltaBehaviour::hardware) r->hidden_compiles = 1;
    return model;
  }
};

class SimProvider : public runtime::BackendProvider {
 public:
  std::string name() const override { return "sim"; }
  int listing_order() const override { return 0; }  // the reference every build has: listed first
  runtime::BackendStatus status() override { return {"sim", true, ""}; }
  Backend& backend() override {
    static SimBackend b;
    return b;
  }
};

const bool g_registered = [] {
  runtime::register_backend(new SimProvider());
  return true;
}();

}  // namespace

Validation validate(const CompileRequest& req) {
  mil::Program prog = mil::parse(*req.mil);
  Validation v;
  ProgramInfo info = check_program(prog, weight_files(req), req.profile, &v.warnings);
  std::vector<size_t> order;
  v.inputs = sorted_slots(info.inputs, &order);
  v.outputs = sorted_slots(info.outputs, &order);
  v.cost = info.cost;
  return v;
}

}  // namespace orion::sim
