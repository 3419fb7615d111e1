// build_plan: resolves function "main" statement by statement (names, parameters, dtypes, shapes),
// applies the ANE constraints (constraints.cpp), snapshots consts (C07), lowers every op to an
// executable step and lays out one scratch arena from precomputed lifetimes.
// Plan::execute: an arena per call in flight (kept for reuse; thread-safe), steps in order, outputs widened
// to fp32 when declared.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <unordered_map>

#include "common/error.h"
#include "cpu/kernels/kernels.h"
#include "cpu/kernels/scratch.h"
#include "sim/compact.h"
#include "sim/first_fit.h"
#include "sim/ops/op.h"
#include "sim/ops/prefix.h"
#include "sim/step_profile.h"

namespace orion::sim {

using ops::Value;

namespace {

constexpr int64_t kAlign = 64;
int64_t align_up(int64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

struct Step {
  std::string name, op;
  std::vector<int> ins;  // value ids, in RunArgs::in order
  std::set<int> build_only;  // of ins: consumed while lowering, not read at run time
  int out = -1;
  ops::RunFn run;
  ops::ColumnRule rule;          // dead-column skipping: what a prefix of `out` reads
  ops::PrefixRunFn run_prefix;   // computes only a prefix of `out` (null: run() computes all)
  ops::CompactRunFn run_compact; // computes a prefix from and into compact forms (sim/compact.h)
  ops::CompactInputsFn compact_inputs;
  ops::OpCtx::PanelRead panel_read;  // an input it can read from a compressed weight (RunArgs::panel)
  int64_t scratch_bytes = 0, scratch_off = 0;
  double flops = 0;  // cost model
  int64_t bytes = 0;  // cost model: what it reads and writes
  ops::OpCtx::Unit unit = ops::OpCtx::Unit::other;
};

// Parameter names and attributes of a statement against its registry entry (build_plan and infer_type).
void check_signature(const mil::Stmt& st, const ops::OpDef& def) {
  auto fail = [&](const std::string& m) { throw_compile("", st.out, "InvalidMILProgram: " + st.op + ": " + m); };
  auto known = [&](const std::string& n) { return def.param(n) != nullptr; };
  std::set<std::string> seen;
  bool has_name = false;
  for (const auto& at : st.attrs) {
    if (!seen.insert("@" + at.name).second) fail("attribute '" + at.name + "' given twice");
    if (at.name == "name") { has_name = true; continue; }
    if (!def.attr_params || !known(at.name)) fail("unknown attribute '" + at.name + "'");
  }
  if (!has_name) fail("missing the name attribute (required on every op)");
  for (const auto& a : st.args) {
    if (!seen.insert(a.name).second) fail("parameter '" + a.name + "' given twice");
    if (def.attr_params) fail("takes its parameters in the attribute list, got argument '" + a.name + "'");
    if (!known(a.name)) {
      std::string list;
      for (const auto& p : def.params) list += (list.empty() ? "" : ", ") + p.spelling();
      fail("unknown parameter '" + a.name + "' (expected: " + list + ")");
    }
  }
  for (const auto& p : def.params)
    if (!p.optional && !(def.attr_params ? (bool)st.attr(p.name) : (bool)st.arg(p.name)))
      fail("missing required parameter '" + p.name + "'");
}

[[noreturn]] void undefined_name(const std::string& name, const mil::Stmt& st) {
  throw_compile("", st.out, "InvalidMILProgram: " + st.op + ": '" + name + "' is not defined before use");
}

// A literal operand as a const value (its data: set by the caller).
Value literal_value(const mil::Literal& lit, const std::string& label) {
  Value v;
  v.name = label;
  v.dtype = lit.type.dtype;
  v.shape = lit.type.shape;
  v.src = Value::Src::Const;
  v.op = "const";
  return v;
}

class PlanImpl : public Plan {
 public:
  std::deque<Value> values;
  std::vector<IOInfo> in_info, out_info;
  std::vector<int> param_ids, out_ids;
  std::vector<Step> steps;
  std::vector<int64_t> arena_off;  // per value; -1 = not in the arena
  // reshape / identity results are views of their source (same bytes): (value, source) pairs in
  // definition order, the source never itself a view. No copy, and the source lives as long as they do.
  std::vector<std::pair<int, int>> views;
  // Byte offset of a view into its source (by value id; 0 for reshapes): a contiguous slice of an fp16
  // input - a weight cut out of a packed weight surface - is its bytes at that offset, not a copy.
  std::vector<int64_t> view_off;
  int64_t arena_size = 0;
  CostEstimate cost_;
  // Panel reads (Plan::reads_panels): per value, the input index it is or views (-1: none); per input, where its
  // panel readers read it (byte offset, rows, K, width) and whether they are its only readers.
  struct PanelReader {
    int64_t offset, rows, K, width;
  };
  std::vector<int> value_input;
  std::vector<std::vector<PanelReader>> panel_readers;
  std::vector<char> panels_only;

  const std::vector<IOInfo>& inputs() const override { return in_info; }
  const std::vector<IOInfo>& outputs() const override { return out_info; }
  CostEstimate cost() const override { return cost_; }
  size_t num_ops() const override { return steps.size() + views.size(); }

  void execute(const std::vector<const void*>& inputs, const std::vector<void*>& outputs,
               std::vector<Warning>* warnings, const InputPanels* panels) const override {
    run(inputs, outputs, warnings, nullptr, nullptr, panels);
  }

  void execute_live(const std::vector<const void*>& inputs, const std::vector<void*>& outputs,
                    std::vector<Warning>* warnings, const std::vector<int64_t>& live,
                    const InputPanels* panels) const override {
    run(inputs, outputs, warnings, analysis(live).get(), &live, panels);
  }

  bool reads_panels(size_t input) const override {
    return input < panels_only.size() && panels_only[input] && !panel_readers[input].empty();
  }

  bool panels_cover(size_t input, const std::vector<cpu::kernels::PanelsAt>& parts) const override {
    if (!reads_panels(input)) return false;
    for (const PanelReader& r : panel_readers[input])
      if (!find_panels(parts, r)) return false;
    return true;
  }

  std::vector<std::string> live_notes(const std::vector<int64_t>& live) const override {
    return analysis(live)->regions.notes;
  }

 private:
  mutable std::mutex live_mu_;
  // A live hint's analysis: what each step computes, and which of it in compact form.
  struct LiveRun {
    live::Result regions;
    compact::Plan compact;
  };
  mutable std::map<std::vector<int64_t>, std::shared_ptr<const LiveRun>> live_cache_;

  // Arenas of finished calls, reused: a fresh one per call cost a page fault per 4 KiB touched (the
  // allocator maps big blocks anew each time) - a measurable share of a decode step. A call takes
  // one (or allocates one) and gives it back, so concurrent calls still get their own. Only small
  // arenas are kept (decode-sized programs, where the faults are a large share of the work): a
  // model keeps dozens of programs, and a big arena's faults are small next to its program's work.
  using Arena = std::unique_ptr<uint8_t[]>;
  mutable std::mutex arena_mu_;
  mutable std::vector<Arena> free_arenas_;
  static constexpr size_t kKeptArenas = 2;
  static constexpr int64_t kKeptArenaBytes = 4 << 20;

  Arena take_arena() const {
    {
      std::lock_guard<std::mutex> lk(arena_mu_);
      if (!free_arenas_.empty()) {
        Arena a = std::move(free_arenas_.back());
        free_arenas_.pop_back();
        return a;
      }
    }
    return Arena(new uint8_t[(size_t)arena_size + kAlign]);
  }
  void give_arena(Arena a) const {
    std::lock_guard<std::mutex> lk(arena_mu_);
    if (arena_size <= kKeptArenaBytes && free_arenas_.size() < kKeptArenas) free_arenas_.push_back(std::move(a));
  }
  struct ArenaLease {  // returns the arena on every exit, exceptions included
    const PlanImpl* plan;
    Arena mem;
    ~ArenaLease() { plan->give_arena(std::move(mem)); }
  };

  // One analysis per distinct hint, kept (a decode loop repeats a handful of them).
  std::shared_ptr<const LiveRun> analysis(const std::vector<int64_t>& live) const {
    std::lock_guard<std::mutex> lk(live_mu_);
    auto it = live_cache_.find(live);
    if (it != live_cache_.end()) return it->second;
    std::vector<live::StepInfo> info;
    std::vector<compact::StepInfo> cinfo;
    for (const Step& s : steps) {
      info.push_back({s.out, &s.ins, &s.rule});
      cinfo.push_back({s.out, &s.ins, &s.build_only, (bool)s.run_compact, &s.compact_inputs});
    }
    auto run = std::make_shared<LiveRun>();
    run->regions = live::analyse(values, info, views, out_ids, live);
    run->compact = compact::plan(values, cinfo, views, view_off, out_ids, run->regions.step, live);
    std::shared_ptr<const LiveRun> r = run;
    if (live_cache_.size() >= 256) live_cache_.clear();
    live_cache_[live] = r;
    return r;
  }

  static const cpu::kernels::PanelsAt* find_panels(const std::vector<cpu::kernels::PanelsAt>& parts,
                                                    const PanelReader& r) {
    for (const auto& p : parts)
      if (p.offset == r.offset && p.weight->M == r.rows && p.weight->K == r.K && p.width == r.width && p.ld == r.width)
        return &p;
    return nullptr;
  }

  void run(const std::vector<const void*>& inputs, const std::vector<void*>& outputs, std::vector<Warning>* warnings,
           const LiveRun* lp, const std::vector<int64_t>* live = nullptr, const InputPanels* panels = nullptr) const {
    if (panels && panels->size() != in_info.size()) throw std::logic_error("plan: panels for another input count");
    if (inputs.size() != in_info.size() || outputs.size() != out_info.size())
      throw_error(ErrorKind::Input, "plan takes " + std::to_string(in_info.size()) + " inputs and " +
                                        std::to_string(out_info.size()) + " outputs, got " + std::to_string(inputs.size()) +
                                        " and " + std::to_string(outputs.size()));
    ArenaLease lease{this, take_arena()};
    uint8_t* arena = (uint8_t*)(((uintptr_t)lease.mem.get() + kAlign - 1) / kAlign * kAlign);
    std::vector<const void*> ptr(values.size(), nullptr);
    for (size_t i = 0; i < values.size(); ++i) {
      if (arena_off[i] >= 0) ptr[i] = arena + arena_off[i];
      else if (values[i].is_const() && values[i].cdata) ptr[i] = values[i].cdata->bytes.data();
    }
    for (size_t i = 0; i < param_ids.size(); ++i) {
      int id = param_ids[i];
      if (!inputs[i]) throw_error(ErrorKind::Input, "null input '" + in_info[i].name + "'");
      if (in_info[i].dtype == DType::fp32)  // fp32 exists only at I/O: round to fp16 on read (C37)
        cpu::kernels::f32_to_f16((const float*)inputs[i], (f16*)ptr[id], (size_t)values[id].numel());
      else
        ptr[id] = inputs[i];
    }
    for (const auto& [id, src] : views) ptr[id] = (const uint8_t*)ptr[src] + view_off[(size_t)id];
    ops::WarnSink sink;
    std::vector<const void*> in;
    // compact forms (sim/compact.h): a per-thread area; `made[v]` once value v's is there
    const compact::Plan* cp = lp && lp->compact.any() && compact::enabled() ? &lp->compact : nullptr;
    f16* area = cp ? cpu::kernels::scratch_as<f16>(cpu::kernels::ScratchSlot::compact, (size_t)cp->elems) : nullptr;
    std::vector<char> made(cp ? values.size() : 0, 0);
    std::vector<const f16*> cin;
    int64_t compact_steps = 0;
    auto box = [&](int v) {
      const compact::Geometry& g = cp->geometry[(size_t)v];
      ops::PrefixBox b;
      b.outer = g.outer, b.chunk = g.chunk, b.stride = g.stride;
      return b;
    };
    for (size_t si = 0; si < steps.size(); ++si) {
      const Step& s = steps[si];
      const ops::Region* reg = lp ? &lp->regions.step[si] : nullptr;
      if (reg && reg->kind == ops::Region::Kind::none) continue;  // no live entry reads it
      in.resize(s.ins.size());
      for (size_t k = 0; k < s.ins.size(); ++k) in[k] = ptr[s.ins[k]];
      ops::RunArgs a;
      a.in = in.data();
      a.out = (void*)ptr[s.out];
      a.scratch = s.scratch_bytes ? arena + s.scratch_off : nullptr;
      a.warn = &sink;
      if (panels && s.panel_read.input >= 0) {
        const int v = s.ins[(size_t)s.panel_read.input], i = value_input[(size_t)v];
        const auto* parts = i >= 0 ? (*panels)[(size_t)i] : nullptr;
        if (parts) {
          a.panel = find_panels(*parts, {view_off[(size_t)v], s.panel_read.rows, s.panel_read.K, s.panel_read.width});
          if (!a.panel)  // panels_cover said they cover it: a caller that skipped the check
            throw std::logic_error("plan: step '" + s.name + "' reads input '" + in_info[(size_t)i].name +
                                   "' where its panels have no part");
        }
      }
      const bool timed = step_profiling();
      const auto t0 = timed ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
      if (cp && cp->step[si]) {
        cin.assign(s.ins.size(), nullptr);
        for (size_t k = 0; k < s.ins.size(); ++k) {
          const int v = cp->in[si][k];
          if (v < 0) continue;
          f16* slot = area + cp->slot[(size_t)v];
          if (!made[(size_t)v]) {  // gathered once, by its first compact reader, out of its full layout
            ops::gather_prefix(box(v), (const f16*)ptr[(size_t)v], slot);
            made[(size_t)v] = 1;
          }
          cin[k] = slot;
        }
        f16* slot = area + cp->slot[(size_t)s.out];
        s.run_compact(a, reg->axis, reg->len, cin.data(), slot);
        made[(size_t)s.out] = 1;
        ++compact_steps;
        if (cp->full[(size_t)s.out]) ops::scatter_prefix(box(s.out), slot, (f16*)ptr[(size_t)s.out]);
      } else if (reg && reg->kind == ops::Region::Kind::prefix && s.run_prefix) {
        s.run_prefix(a, reg->axis, reg->len);
      } else {
        s.run(a);  // whole (a step without a prefix runner computes dead entries too: harmless, proved)
      }
      if (timed) {  // flops and bytes of the whole step (a prefix computes a part of them)
        const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        add_step_time(s.op, s.name, sec, s.flops, (double)s.bytes);
      }
    }
    if (compact_steps) compact::count_steps_run(compact_steps);
    for (size_t j = 0; j < out_ids.size(); ++j) {
      const Value& v = values[out_ids[j]];
      if (!outputs[j]) throw_error(ErrorKind::Input, "null output '" + out_info[j].name + "'");
      const int64_t w = v.shape.empty() ? 1 : v.shape.back(), n = live ? (*live)[j] : -1;
      const int direct = cp ? cp->direct[j] : -1;
      if (direct >= 0 && out_info[j].dtype == DType::fp16 && made[(size_t)direct]) {  // its live columns, compact
        ops::scatter_prefix(box(direct), area + cp->slot[(size_t)direct], (f16*)outputs[j]);
      } else if (out_info[j].dtype == DType::fp32) {  // the fp16 value, widened
        cpu::kernels::f16_to_f32((const f16*)ptr[out_ids[j]], (float*)outputs[j], (size_t)v.numel());
      } else if (n >= 0 && n < w && ops::storage_size(v.dtype) == 2) {
        // only the live columns are read (the rest is unspecified): a decode output is 1 of 48 columns
        const uint16_t* src = (const uint16_t*)ptr[out_ids[j]];
        uint16_t* dst = (uint16_t*)outputs[j];
        for (int64_t r = 0, rows = v.numel() / w; r < rows; ++r)
          for (int64_t c = 0; c < n; ++c) dst[r * w + c] = src[r * w + c];
      } else {
        std::memcpy(outputs[j], ptr[out_ids[j]], v.bytes());
      }
    }
    if (warnings) warnings->insert(warnings->end(), sink.list.begin(), sink.list.end());
  }
};

class Builder : public ops::Env {
 public:
  Builder(const mil::Program& prog, const std::vector<WeightFile>& weights, const Profile& prof, std::vector<Warning>* w,
          bool check_only)
      : prog_(prog), prof_(prof), warnings_(w), check_only_(check_only) {
    wl_.files = &weights;
    wl_.profile = &prof;
    wl_.warnings = w;
    wl_.borrow = check_only;
  }
  bool check_only() const override { return check_only_; }

  const Value& value(int id) const override { return plan_->values[id]; }
  const Profile& profile() const override { return prof_; }
  const std::string& opset() const override { return opset_; }
  void warn(const std::string& c, const std::string& detail) override {
    if (warnings_) warnings_->push_back({c, constraints::warning_text(detail, c)});
  }

  int lookup(const std::string& name, const mil::Stmt& st) override {
    auto it = by_name_.find(name);
    if (it == by_name_.end()) undefined_name(name, st);
    // Only conv reads a compressed weight as it is (packed_const_weight); every other op sees fp16 values.
    if (st.op != "conv") materialize(it->second);
    return it->second;
  }

  // A slice_by_size of an fp16 program input that is one contiguous run of its bytes (the axes inside the
  // sliced one whole, those outside it of size 1): *off = its byte offset. Not where C35 clamps on copy.
  bool contiguous_input_slice(ops::OpCtx& ctx, int64_t* off) {
    const Value& x = ctx.v("x");
    if (x.src != Value::Src::Param || x.dtype != DType::fp16) return false;
    const int r = x.rank();
    std::vector<int64_t> b;
    Shape sz;
    ops::slice_by_size_geometry(ctx, &b, &sz);
    if (prof_.legacy_chip() && r > 0 && b.back() != 0) return false;
    int a = r - 1;
    while (a >= 0 && b[a] == 0 && sz[a] == x.shape[a]) --a;  // whole inner axes
    for (int i = 0; i < a; ++i)
      if (sz[i] != 1) return false;
    const std::vector<int64_t> st = ops::dense_strides(x.shape);
    *off = 0;
    for (int i = 0; i < r; ++i) *off += b[i] * st[i] * (int64_t)sizeof(f16);
    return true;
  }

  void materialize(int id) override {
    Value& v = plan_->values[id];
    if (!v.cdata || !v.cdata->is_compressed_only()) return;
    auto cd = std::make_shared<ops::ConstData>(*v.cdata);
    cd->bytes.resize((size_t)v.numel() * sizeof(f16));
    cd->compressed->dense((f16*)cd->bytes.data());
    cd->compressed.reset();  // the dense copy serves every later consumer (conv included)
    v.cdata = std::move(cd);
  }

  int literal(const mil::Literal& lit, const std::string& label, const mil::Stmt& st) override {
    Value v = literal_value(lit, label);
    v.stmt = cur_stmt_;
    if (lit.kind == mil::Literal::Kind::BlobFile) {
      v.cdata = ops::const_from_blob(lit, wl_, st.out);
      facts_.blob_consts.push_back({st.out, lit.blob_path});
    } else {
      v.cdata = ops::const_from_literal(lit, st.out);
    }
    // A constexpr op's operands never reach the device as tensors (an iOS18 LUT of a conv weight has
    // rank 6): C22/C23 apply to its result only (C47: what the hardware says is unknown).
    if (st.op.rfind("constexpr_", 0) != 0) constraints::check_shape(v.shape, st.out);
    return add(std::move(v));
  }

  std::unique_ptr<Plan> build() {
    plan_ = std::make_unique<PlanImpl>();
    const mil::Function* fn = prog_.find("main");
    if (!fn) throw_compile("", "", "InvalidMILProgram: the program has no function 'main'");
    opset_ = fn->opset;
    constraints::check_dialect(prog_, prof_);
    for (const auto& f : *wl_.files)  // C11: the descriptor returns nil for an empty entry
      if (f.size == 0 || !f.data) throw_compile("C11", "", "InvalidMILProgram: weight dictionary entry '" + f.path + "' is empty");
    for (const auto& p : fn->params) add_param(p);
    for (size_t i = 0; i < fn->stmts.size(); ++i) {
      cur_stmt_ = (int)i;
      resolve(fn->stmts[i]);
    }
    cur_stmt_ = -1;
    for (size_t i = 0; i < fn->returns.size(); ++i) add_output(fn->returns[i]);
    if (fn->returns.empty()) throw_compile("C17", "", "InvalidMILProgram: function main returns nothing");
    constraints::check_program(facts_, prof_, warnings_);
    layout();
    estimate_cost();
    drop_build_only_consts();
    find_panel_reads();
    return std::move(plan_);
  }

 private:
  const mil::Program& prog_;
  const Profile& prof_;
  std::vector<Warning>* warnings_;
  bool check_only_;
  ops::WeightLookup wl_;
  std::unique_ptr<PlanImpl> plan_;
  std::unordered_map<std::string, int> by_name_;
  constraints::ProgramFacts facts_;
  int cur_stmt_ = -1;
  std::string opset_;

  int add(Value v) {
    plan_->values.push_back(std::move(v));
    return (int)plan_->values.size() - 1;
  }

  void define(const std::string& name, int id) {
    if (by_name_.count(name)) throw_compile("C40", name, "InvalidMILProgram: duplicate name '" + name + "'");
    by_name_[name] = id;
  }

  void add_param(const mil::Param& p) {
    constraints::check_io_dtype(p.type.dtype, p.name, false, prof_);
    constraints::check_shape(p.type.shape, p.name);
    Value v;
    v.name = p.name;
    v.dtype = p.type.dtype;
    v.shape = p.type.shape;
    v.src = Value::Src::Param;
    v.param_index = (int)plan_->param_ids.size();
    int id = add(std::move(v));
    define(p.name, id);
    plan_->param_ids.push_back(id);
    plan_->in_info.push_back({p.name, p.type.dtype, p.type.shape});
  }

  void add_output(const std::string& name) {
    auto it = by_name_.find(name);
    if (it == by_name_.end())
      throw_compile("C17", name, "InvalidMILProgram: undefined return value " + name);
    materialize(it->second);  // a returned constexpr result is copied out as fp16
    const Value& v = plan_->values[it->second];
    constraints::check_io_dtype(v.dtype, name, true, prof_);
    if (v.src == Value::Src::Param)
      warn("C17", "main returns its parameter '" + name + "' directly; untested on hardware (end outputs with an op)");
    plan_->out_ids.push_back(it->second);
    plan_->out_info.push_back({name, v.dtype, v.shape});
  }

  void resolve(const mil::Stmt& st) {
    if (by_name_.count(st.out)) throw_compile("C40", st.out, "InvalidMILProgram: duplicate name '" + st.out + "'");
    const ops::OpDef* def = ops::find_op(st.op);
    if (!def) throw_compile("", st.out, "InvalidMILProgram: unknown op '" + st.op + "'");
    check_signature(st, *def);
    ops::OpCtx ctx(*this, st, *def);
    const size_t first_new = plan_->values.size();
    def->infer(ctx);
    if (st.type.dtype != ctx.out_dtype || st.type.shape != ctx.out_shape)
      throw_compile("", st.out, "InvalidMILProgram: " + st.op + ": declared type " + ops::type_str(st.type.dtype, st.type.shape) +
                                    " but op produces " + ops::type_str(ctx.out_dtype, ctx.out_shape));
    constraints::check_shape(ctx.out_shape, st.out);
    constraints::check_op(ctx);
    note_facts(ctx);

    Value v;
    v.name = st.out;
    v.dtype = ctx.out_dtype;
    v.shape = ctx.out_shape;
    v.stmt = cur_stmt_;
    v.op = st.op;
    if (ctx.folded) {
      v.src = Value::Src::Const;
      v.cdata = ctx.folded;
      define(st.out, add(std::move(v)));
      // A constexpr op's operands are literals of its own attribute list, read by nobody else: once its
      // result exists they are dropped (a compressed weight is not kept twice).
      if (def->attr_params && st.op != "const")
        for (size_t id = first_new; id + 1 < plan_->values.size(); ++id) plan_->values[id].cdata.reset();
      return;
    }
    int64_t slice_off = 0;
    const bool is_reshape = st.op == "reshape" || st.op == "identity";  // a view: same bytes, new shape
    if (is_reshape || (st.op == "slice_by_size" && contiguous_input_slice(ctx, &slice_off))) {
      int src = ctx.vid("x");
      int64_t off = slice_off;
      for (const auto& [id, root] : plan_->views)
        if (id == src) {
          src = root;
          off += plan_->view_off[(size_t)id];
        }
      v.src = Value::Src::Op;
      int id = add(std::move(v));
      define(st.out, id);
      plan_->views.push_back({id, src});
      plan_->view_off.resize(plan_->values.size(), 0);
      plan_->view_off[(size_t)id] = off;
      return;
    }
    Step s;
    s.run = def->lower(ctx);
    s.rule = ops::column_rule(ctx);
    s.run_prefix = ctx.run_prefix;
    s.run_compact = ctx.run_compact;
    s.compact_inputs = ctx.compact_inputs;
    s.panel_read = ctx.panel_read;
    for (int id : ctx.inputs)  // inputs read as fp16 at run time must be dense
      if (!ctx.compressed_inputs.count(id)) materialize(id);
    s.name = st.out;
    s.op = st.op;
    s.ins = ctx.inputs;
    s.build_only = ctx.build_only_inputs;
    s.scratch_bytes = ctx.scratch_bytes;
    s.flops = ctx.flops;
    s.unit = ctx.unit;
    v.src = Value::Src::Op;
    s.out = add(std::move(v));
    define(st.out, s.out);
    plan_->steps.push_back(std::move(s));
  }

  void note_facts(ops::OpCtx& ctx) {
    const std::string& op = ctx.st.op;
    if (op == "pow") facts_.has_pow = true;
    if (op == "reduce_sum") facts_.has_reduce_sum = true;
    if (op == "conv") facts_.has_conv = true;
    if (op == "add")  // C19: add against a scalar const costs a weight slot
      for (const char* p : {"x", "y"})
        if (ctx.v(p).is_const() && ctx.v(p).numel() == 1) facts_.has_add_scalar_const = true;
    if (op == "slice_by_index" && ctx.v("x").src == Value::Src::Param) facts_.sliced_inputs.push_back(ctx.st.out);
  }

  // Which inputs only panel GEMMs read (Plan::reads_panels) and where: an fp16 input read by no other step, not
  // returned, directly or through views.
  void find_panel_reads() {
    PlanImpl& P = *plan_;
    P.view_off.resize(P.values.size(), 0);
    P.value_input.assign(P.values.size(), -1);
    for (size_t i = 0; i < P.param_ids.size(); ++i) P.value_input[(size_t)P.param_ids[i]] = (int)i;
    for (const auto& [id, src] : P.views) P.value_input[(size_t)id] = P.value_input[(size_t)src];
    P.panel_readers.assign(P.param_ids.size(), {});
    P.panels_only.assign(P.param_ids.size(), 0);
    for (size_t i = 0; i < P.param_ids.size(); ++i) P.panels_only[i] = P.in_info[i].dtype == DType::fp16;
    for (int id : P.out_ids)
      if (P.value_input[(size_t)id] >= 0) P.panels_only[(size_t)P.value_input[(size_t)id]] = 0;
    for (const Step& s : P.steps)
      for (size_t k = 0; k < s.ins.size(); ++k) {
        const int v = s.ins[k], i = v >= 0 ? P.value_input[(size_t)v] : -1;
        if (i < 0) continue;
        if ((int)k != s.panel_read.input) {
          P.panels_only[(size_t)i] = 0;
          continue;
        }
        P.panel_readers[(size_t)i].push_back({P.view_off[(size_t)v], s.panel_read.rows, s.panel_read.K,
                                              s.panel_read.width});
      }
  }

  // Lifetimes -> arena offsets (first fit). A value lives from its defining step to its last use;
  // outputs to the end. fp32 parameters get an fp16 copy from step 0. Step scratch lives one step.
  void layout() {
    PlanImpl& P = *plan_;
    const int n = (int)P.values.size(), ns = (int)P.steps.size();
    std::vector<int> def(n, -1), last(n, -2);
    for (int i = 0; i < ns; ++i) {
      def[P.steps[i].out] = i;
      last[P.steps[i].out] = std::max(last[P.steps[i].out], i);
      for (int id : P.steps[i].ins) last[id] = std::max(last[id], i);
    }
    for (int id : P.out_ids) last[id] = ns;
    for (auto it = P.views.rbegin(); it != P.views.rend(); ++it)  // a source outlives its views
      last[it->second] = std::max(last[it->second], last[it->first]);
    P.arena_off.assign(n, -1);
    FirstFit arena;
    auto alloc = [&](int start, int end, int64_t bytes) { return arena.place(start, end, align_up(std::max<int64_t>(bytes, 1))); };
    for (int id : P.param_ids)
      if (P.values[id].dtype == DType::fp32 && last[id] >= 0) P.arena_off[id] = alloc(-1, last[id], P.values[id].bytes());
    for (int i = 0; i < ns; ++i) {
      Step& s = P.steps[i];
      if (s.scratch_bytes) s.scratch_off = alloc(i, i, s.scratch_bytes);
      P.arena_off[s.out] = alloc(i, std::max(last[s.out], i), P.values[s.out].bytes());
    }
    // fp32 parameters that are returned directly (or unused) still need their fp16 copy.
    for (int id : P.param_ids)
      if (P.values[id].dtype == DType::fp32 && P.arena_off[id] < 0) P.arena_off[id] = alloc(-1, ns, P.values[id].bytes());
    P.arena_size = arena.peak();
  }

  // Constants that every consumer packed while lowering (the weights of the linears' convs) are never
  // read at run time: their snapshot would be a second copy of each linear beside the packed panels.
  // Run after the cost estimate, which counts the weights the program holds.
  void drop_build_only_consts() {
    PlanImpl& P = *plan_;
    std::vector<char> runtime(P.values.size(), 0);
    for (const Step& s : P.steps)
      for (int id : s.ins)
        if (id >= 0 && !s.build_only.count(id)) runtime[(size_t)id] = 1;
    for (int id : P.out_ids) runtime[(size_t)id] = 1;
    for (const auto& view : P.views) runtime[(size_t)view.second] = 1;
    for (size_t id = 0; id < P.values.size(); ++id)
      if (P.values[id].is_const() && P.values[id].cdata && !runtime[id]) P.values[id].cdata.reset();
  }

  void estimate_cost() {
    PlanImpl& P = *plan_;
    std::set<const ops::ConstData*> seen;
    int64_t wbytes = 0, io = 0;
    for (const auto& v : P.values)
      if (v.is_const() && v.cdata && seen.insert(v.cdata.get()).second) wbytes += (int64_t)v.cdata->storage_bytes();
    for (const auto& i : P.in_info) io += i.bytes();
    for (const auto& o : P.out_info) io += o.bytes();
    std::vector<cost::StepCost> sc;
    for (Step& s : P.steps) {
      int64_t bytes = (int64_t)P.values[s.out].bytes();
      for (int id : s.ins)
        if (id >= 0) bytes += (int64_t)P.values[id].bytes();
      s.bytes = bytes;
      sc.push_back({s.flops, s.unit, s.name, s.op, bytes});
    }
    P.cost_ = cost::estimate(sc, wbytes, P.arena_size, io);
    double ws = (double)(wbytes + P.arena_size + io);
    if (ws > cost::kSramBytes)
      warn("C26", "working set " + std::to_string((int64_t)(ws / (1024 * 1024))) +
                      " MB (weights + activations + I/O) exceeds the ~32 MB ANE SRAM; expect a throughput cliff");
  }
};

}  // namespace

std::unique_ptr<Plan> build_plan(const mil::Program& prog, const std::vector<WeightFile>& weights, const Profile& profile,
                                 std::vector<Warning>* warnings) {
  Builder b(prog, weights, profile, warnings, false);
  return b.build();
}

ProgramInfo check_program(const mil::Program& prog, const std::vector<WeightFile>& weights, const Profile& profile,
                          std::vector<Warning>* warnings) {
  Builder b(prog, weights, profile, warnings, true);
  std::unique_ptr<Plan> checked = b.build();  // holds views into `weights` only: dropped here
  return {checked->inputs(), checked->outputs(), checked->cost()};
}

namespace {

// The Env of infer_type: the statement's operands as typed values. A const operand (and a BLOBFILE
// attribute) has no data: an infer that read it would fail loudly instead of inferring from values.
class TypeEnv : public ops::Env {
 public:
  explicit TypeEnv(const std::string& opset) : opset_(opset) {}
  std::deque<Value> values;
  std::vector<std::pair<std::string, int>> by_name;  // a handful of operands: a scan beats hashing

  int add_operand(const OperandType& o, const std::string& name) {
    Value v;
    v.name = name;
    v.dtype = o.dtype;
    v.shape = o.shape;
    v.src = o.is_const ? Value::Src::Const : Value::Src::Op;
    v.op = o.is_const ? "const" : "";
    if (o.is_const) v.cdata = typed_only(v);
    values.push_back(std::move(v));
    by_name.emplace_back(name, (int)values.size() - 1);
    return by_name.back().second;
  }

  const Value& value(int id) const override { return values[(size_t)id]; }
  int lookup(const std::string& name, const mil::Stmt& st) override {
    for (const auto& [n, id] : by_name)
      if (n == name) return id;
    undefined_name(name, st);
  }
  int literal(const mil::Literal& lit, const std::string& label, const mil::Stmt& st) override {
    Value v = literal_value(lit, label);
    v.cdata = lit.kind == mil::Literal::Kind::BlobFile ? typed_only(v) : ops::const_from_literal(lit, st.out);
    values.push_back(std::move(v));
    return (int)values.size() - 1;
  }
  const Profile& profile() const override { return prof_; }
  const std::string& opset() const override { return opset_; }
  void warn(const std::string&, const std::string&) override {}  // ANE matters: not part of a type
  bool check_only() const override { return true; }
  void materialize(int) override {}

 private:
  Profile prof_;
  std::string opset_;
  static std::shared_ptr<const ops::ConstData> typed_only(const Value& v) {
    auto cd = std::make_shared<ops::ConstData>();
    cd->elided = true;
    cd->nbytes = v.bytes();
    return cd;
  }
};

}  // namespace

std::pair<DType, Shape> infer_type(const std::string& op, const std::vector<OperandType>& operands,
                                   std::vector<std::pair<std::string, mil::Literal>> consts, const std::string& opset) {
  const ops::OpDef* def = ops::find_op(op);
  if (!def) throw_compile("", "", "InvalidMILProgram: unknown op '" + op + "'");
  TypeEnv env(opset);
  mil::Stmt st;
  st.op = op;  // st.out stays empty: the statement has no name yet (messages say "<op>: ...")
  mil::Attr name{"name", {}, {}};
  name.value.type.dtype = DType::string;
  name.value.type.scalar_form = true;
  name.value.s = {op};
  st.attrs.push_back(std::move(name));
  st.args.reserve(operands.size() + consts.size());
  // Operands in order: the ones of a tuple parameter ("values") form its tuple, in order.
  for (const OperandType& o : operands) {
    if (def->attr_params) {  // constexpr: a typed BLOBFILE attribute
      mil::Attr at{o.param, {}, {}};
      at.value.kind = mil::Literal::Kind::BlobFile;
      at.value.type.dtype = o.dtype;
      at.value.type.shape = o.shape;
      st.attrs.push_back(std::move(at));
      continue;
    }
    mil::Arg* a = nullptr;
    for (auto& e : st.args)
      if (e.name == o.param) a = &e;
    const ops::Param* p = def->param(o.param);
    const bool tuple = p && p->type.rfind("tuple", 0) == 0;
    // named as messages should show it: "x", "values[1]"
    const std::string name_i = tuple ? o.param + "[" + std::to_string(a ? a->tuple.size() : 0) + "]" : o.param;
    if (!tuple && a) throw_compile("", "", "InvalidMILProgram: " + op + ": parameter '" + o.param + "' given twice");
    env.add_operand(o, name_i);
    if (!a) {
      st.args.push_back({});
      a = &st.args.back();
      a->name = o.param;
      a->kind = tuple ? mil::Arg::Kind::Tuple : mil::Arg::Kind::Ref;
      if (tuple) a->tuple.push_back(name_i);
      else a->ref = name_i;
    } else {
      a->tuple.push_back(name_i);
    }
  }
  for (auto& [param, lit] : consts) {
    if (def->attr_params) {
      st.attrs.push_back({std::move(param), std::move(lit), {}});
    } else {
      st.args.emplace_back();
      mil::Arg& a = st.args.back();
      a.name = std::move(param);
      a.kind = mil::Arg::Kind::Literal;
      a.literal = std::move(lit);
    }
  }
  check_signature(st, *def);
  ops::OpCtx ctx(env, st, *def);
  def->infer(ctx);
  return {ctx.out_dtype, ctx.out_shape};
}

}  // namespace orion::sim
