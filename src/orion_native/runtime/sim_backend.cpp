// Simulator backend: parses the MIL text, builds a checked sim::Plan (which snapshots the weights:
// C07) and evaluates it on surfaces with the hardware's binding and size rules.
#include <algorithm>
#include <string>

#include "common/error.h"
#include "mil/parser.h"
#include "runtime/backend.h"

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
    check_request(in, out);
    check_sizes(in, inputs_, "input", "C12");
    check_sizes(out, outputs_, "output", "C02");
    std::vector<const void*> in_ptrs(in.size());
    std::vector<void*> out_ptrs(out.size());
    // Slot i feeds the i-th name in sorted order, whatever the caller meant (C13/C03 reproduce).
    for (size_t s = 0; s < in.size(); ++s) in_ptrs[in_plan_index_[s]] = in[s]->data();
    for (size_t s = 0; s < out.size(); ++s) out_ptrs[out_plan_index_[s]] = out[s]->data();
    plan_->execute(in_ptrs, out_ptrs, warnings);
  }

 private:
  // _ANERequest -validate (C42): evaluate returns NO without an NSError.
  void check_request(const std::vector<Surface*>& in, const std::vector<Surface*>& out) const {
    if (in.empty() || out.empty())
      throw_eval(0, "C42", "request rejected by -validate: a request needs at least one input and one output surface");
    if (in.size() > 255 || out.size() > 255)
      throw_eval(0, "C42", "request rejected by -validate: more than 255 buffers");
    if (in.size() != inputs_.size() || out.size() != outputs_.size())
      throw_eval(0x1d, "", "program has " + std::to_string(inputs_.size()) + " inputs and " +
                               std::to_string(outputs_.size()) + " outputs but the request binds " +
                               std::to_string(in.size()) + " and " + std::to_string(out.size()));
    for (auto* s : in) if (!s) throw_error(ErrorKind::Input, "null input surface");
    for (auto* s : out) if (!s) throw_error(ErrorKind::Input, "null output surface");
  }

  // C04 minimum size, C02/C12 uniform alloc sizes per direction; a surface smaller than its packed
  // tensor cannot be read at all.
  void check_sizes(const std::vector<Surface*>& ss, const std::vector<IOSlot>& slots, const char* dir,
                   const char* uniform_id) const {
    for (size_t i = 0; i < ss.size(); ++i) {
      if ((int64_t)ss[i]->alloc_size() < profile_.min_surface_bytes)
        throw_eval(0x1d, "C04", std::string(dir) + " surface for '" + slots[i].name + "' is " +
                                    std::to_string(ss[i]->alloc_size()) + " bytes; every surface must be >= " +
                                    std::to_string(profile_.min_surface_bytes) + " bytes");
      if (ss[i]->alloc_size() != ss[0]->alloc_size())
        throw_eval(0x1d, uniform_id, std::string("all ") + dir + " surfaces of a program must have the same alloc size ('" +
                                         slots[0].name + "' " + std::to_string(ss[0]->alloc_size()) + " B, '" +
                                         slots[i].name + "' " + std::to_string(ss[i]->alloc_size()) + " B)");
      if (ss[i]->alloc_size() < slots[i].bytes())
        throw_eval(0x1d, "", std::string(dir) + " surface bound to slot " + std::to_string(i) + " ('" + slots[i].name +
                                 "') holds " + std::to_string(ss[i]->alloc_size()) + " bytes, the tensor needs " +
                                 std::to_string(slots[i].bytes()));
    }
  }

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
