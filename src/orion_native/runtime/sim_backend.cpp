// Simulator backend: parses the MIL text, builds a checked sim::Plan (which snapshots the weights:
// C07) and evaluates it on surfaces with the hardware's binding and size rules.
#include <algorithm>
#include <string>

#include "common/error.h"
#include "mil/parser.h"
#include "runtime/backend.h"
#include "runtime/request_rules.h"

namespace orion::runtime {

namespace {

std::vector<IOSlot> sorted_slots(const std::vector<sim::IOInfo>& io, std::vector<size_t>* plan_index) {
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
  SimModel(std::unique_ptr<sim::Plan> plan, sim::Profile profile, std::vector<sim::Warning> warnings)
      : plan_(std::move(plan)), profile_(profile), warnings_(std::move(warnings)) {
    inputs_ = sorted_slots(plan_->inputs(), &in_plan_index_);
    outputs_ = sorted_slots(plan_->outputs(), &out_plan_index_);
  }
  const std::vector<IOSlot>& inputs() const override { return inputs_; }
  const std::vector<IOSlot>& outputs() const override { return outputs_; }
  std::vector<sim::Warning> compile_warnings() const override { return warnings_; }
  sim::CostEstimate cost() const override { return plan_->cost(); }

  void eval(const std::vector<Surface*>& in, const std::vector<Surface*>& out,
            std::vector<sim::Warning>* warnings) override {
    check_request(in, out, inputs_, outputs_, profile_.min_surface_bytes);
    std::vector<const void*> in_ptrs(in.size());
    std::vector<void*> out_ptrs(out.size());
    // Slot i feeds the i-th name in sorted order, whatever the caller meant (C13/C03 reproduce).
    for (size_t s = 0; s < in.size(); ++s) in_ptrs[in_plan_index_[s]] = in[s]->data();
    for (size_t s = 0; s < out.size(); ++s) out_ptrs[out_plan_index_[s]] = out[s]->data();
    plan_->execute(in_ptrs, out_ptrs, warnings);
  }

 private:
  std::unique_ptr<sim::Plan> plan_;
  sim::Profile profile_;
  std::vector<sim::Warning> warnings_;
  std::vector<IOSlot> inputs_, outputs_;
  std::vector<size_t> in_plan_index_, out_plan_index_;
};

class SimBackend : public Backend {
 public:
  std::string name() const override { return "sim"; }
  std::shared_ptr<BackendModel> compile(const CompileRequest& req) override {
    mil::Program prog = mil::parse(*req.mil);
    std::vector<sim::WeightFile> files;
    for (const auto& w : *req.weights) files.push_back({w.key, w.bytes.data(), w.bytes.size()});
    std::vector<sim::Warning> warnings;
    auto plan = sim::build_plan(prog, files, req.profile, &warnings);
    return std::make_shared<SimModel>(std::move(plan), req.profile, std::move(warnings));
  }
};

}  // namespace

Backend& sim_backend() {
  static SimBackend b;
  return b;
}

}  // namespace orion::runtime
