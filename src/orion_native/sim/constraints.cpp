// ANE constraints the simulator reproduces at plan build: the catalog C01–C47 (collected from public
// ANE projects and a decompilation of the framework; nothing checked on a Mac by us) with each profile's
// reaction, per-statement and program-level compile checks, I/O dtype and shape limits. Messages use the
// hardware's texts ("InvalidMILProgram: ", "ANECCompile() FAILED: ..."); throw_compile appends " [Cnn]".
#include <algorithm>
#include <set>

#include "common/error.h"
#include "sim/ops/op.h"

namespace orion::sim::constraints {

namespace {

const std::string kInvalid = "InvalidMILProgram: ";
const std::string kAnec = "ANECCompile() FAILED: err=(CompilationFailure) ";

bool pow2(int64_t n) { return n > 0 && (n & (n - 1)) == 0; }

// The numeric limits, defined once: used by the checks below and published in the catalog
// (orion.sim.constraints()[...]["limits"]) for the compiler's own validation.
constexpr int64_t kMaxRank = 5;              // C23
constexpr int64_t kMaxAxis = 65536;          // C22
constexpr int64_t kConvRejectCin = 32000;    // C25
constexpr int64_t kConvWarnCin = 8192;       // C25
constexpr int64_t kMaxWeightTensors = 16;    // C18
int64_t conv_max_kernel_width(const Profile& p) { return p.chip == Chip::m1 ? 13 : 15; }  // C24

}  // namespace

std::string warning_text(const std::string& detail, const std::string& constraint) {
  return "AneSimWarning: " + detail + (constraint.empty() ? "" : " [" + constraint + "]");
}

void check_dialect(const mil::Program& prog, const Profile& p) {
  // C29: M1/M2 need the legacy program(1.0)/ios16 spelling (maderix PR #6); disputed, so strict only.
  if (p.legacy_chip() && p.strict() && prog.dialect == mil::Dialect::ios18)
    throw_compile("C29", "", kInvalid + "program(" + prog.version + ") uses the iOS18 short literal forms; " +
                                 chip_name(p.chip) + " needs the legacy program(1.0)/ios16 dialect");
}

void check_shape(const Shape& s, const std::string& stmt) {
  if ((int64_t)s.size() > kMaxRank) throw_compile("C23", stmt, kAnec + "rank " + std::to_string(s.size()) + " exceeds 5 (" + shape_str(s) + ")");
  for (int64_t d : s)
    if (d > kMaxAxis || d < 1)
      throw_compile("C22", stmt, kAnec + "dimension " + std::to_string(d) + (d < 1 ? " is below 1" : " exceeds " + std::to_string(kMaxAxis)) + " in " + shape_str(s));
}

void check_io_dtype(DType d, const std::string& name, bool is_output, const Profile& p) {
  const char* what = is_output ? "output" : "input";
  if (d == DType::bool_)
    throw_compile("C39", name, kInvalid + "bool tensors cannot be program " + what + "s");
  if (d != DType::fp16 && d != DType::fp32)
    throw_compile("C39", name, kInvalid + std::string("program ") + what + "s must be fp16 or fp32, got " + dtype_name(d));
  if (d == DType::fp32 && p.legacy_chip())
    throw_compile("C28", name, kAnec + "fp32 program " + what + " not supported on " + chip_name(p.chip) + " (use fp16 I/O)");
}

void check_op(ops::OpCtx& ctx) {
  const std::string& op = ctx.st.op;
  const std::string& s = ctx.st.out;
  const Profile& p = ctx.profile();
  const ops::AneInfo& ane = ctx.def.ane;
  if (ane.evidence == "rejected")  // the schema row says so, under every profile (rsqrt, C20)
    throw_compile(ane.constraints.front(), s, kAnec + op + " not supported (use " + ane.lowering + ")");
  if (op == "concat") {
    // C01: Orion's short form failed, maderix's full form (named axis + interleave consts) runs.
    if (p.strict()) throw_compile("C01", s, kAnec + "concat not supported (strict profile rejects every concat)");
    if (!(ctx.is_named_const("axis") && ctx.has("interleave") && ctx.is_named_const("interleave")))
      throw_compile("C01", s, kAnec + "concat requires named axis and interleave");
  } else if (op == "gelu") {
    if (p.strict()) throw_compile("C10", s, kAnec + "gelu not supported");
    if (!ctx.has("mode")) throw_compile("C10", s, kAnec + "gelu not supported without an explicit mode");
  } else if (op == "matmul") {
    if (ctx.is_inline("transpose_x") || ctx.is_inline("transpose_y"))
      throw_compile("C15", s, kInvalid + "transpose flags must be named consts");
    if (p.legacy_chip() && p.strict()) throw_compile("C30", s, kAnec + "matmul not supported on " + chip_name(p.chip));
  } else if (op == "scaled_dot_product_attention") {
    if (p.legacy_chip() && p.strict())
      throw_compile("C30", s, kAnec + "scaled_dot_product_attention not supported on " + chip_name(p.chip));
    if (ctx.has("attn_mask")) {
      if (p.strict()) throw_compile("C06", s, kAnec + "scaled_dot_product_attention with attn_mask: the ANE ignores the mask");
      ctx.env.warn("C06", "scaled_dot_product_attention '" + s + "': attn_mask will be ignored, as on the ANE");
    }
  } else if (op == "conv") {
    if (ctx.has("bias")) throw_compile("C16", s, kInvalid + "conv bias not supported");
    const ops::Value& w = ctx.v("weight");
    int64_t kw = w.shape.back(), lim = conv_max_kernel_width(p);
    if (kw > lim)
      throw_compile("C24", s, kAnec + "conv kernel width " + std::to_string(kw) + " exceeds " + std::to_string(lim) + " on " + chip_name(p.chip));
    int64_t cin = ctx.v("x").shape[1];
    if (cin >= kConvRejectCin)
      throw_compile("C25", s, kAnec + "conv with " + std::to_string(cin) + " input channels (>= " + std::to_string(kConvRejectCin) + ") rejected");
    if (cin > kConvWarnCin)
      ctx.env.warn("C25", "conv '" + s + "' has " + std::to_string(cin) + " input channels (> " + std::to_string(kConvWarnCin) +
                              " untested on hardware; " + std::to_string(kConvRejectCin) + " is rejected)");
  } else if (op == "softmax") {
    const ops::Value& x = ctx.v("x");
    int ax = ctx.norm_axis(ctx.i64("axis", -1), x.rank(), "axis");
    if (p.strict() && ax == x.rank() - 1 && !pow2(x.shape[ax]))
      throw_compile("C21", s, kInvalid + "softmax over a non-power-of-two length " + std::to_string(x.shape[ax]) + " on the last axis");
  } else if (op == "mul") {
    // C33: a reduction multiplied by a const that is (or rounds to) fp16 zero fails ANECCompile.
    for (auto [r, c] : {std::pair<const char*, const char*>{"x", "y"}, {"y", "x"}}) {
      const ops::Value& a = ctx.v(r);
      const ops::Value& b = ctx.v(c);
      if (a.op.rfind("reduce_", 0) != 0 || !b.is_const()) continue;
      std::vector<double> f = b.floats();
      if (!f.empty() && std::all_of(f.begin(), f.end(), [](double v) { return v == 0.0; }))
        throw_compile("C33", s, kAnec + "mul of the " + a.op + " result '" + a.name + "' by zero const '" + b.name + "'");
    }
  } else if (op == "cast") {
    DType from = ctx.v("x").dtype, to = ctx.out_dtype;
    bool f16f32 = (from == DType::fp32 && to == DType::fp16) || (from == DType::fp16 && to == DType::fp32);
    if (f16f32 && p.legacy_chip())
      throw_compile("C28", s, kAnec + "cast between fp32 and fp16 not supported on " + chip_name(p.chip));
  } else if (op == "layer_norm") {
    if (ctx.has("epsilon") && ctx.has("gamma") && ctx.v("epsilon").dtype != ctx.v("gamma").dtype)
      throw_compile("C38", s, kInvalid + "layer_norm epsilon dtype (" + dtype_name(ctx.v("epsilon").dtype) +
                                  ") must equal gamma dtype (" + dtype_name(ctx.v("gamma").dtype) + ")");
  }
}

void check_program(const ProgramFacts& f, const Profile& p, std::vector<Warning>* warnings) {
  // C18/C19: at most 16 weight tensors — best reading: distinct files; strict also counts tensors.
  // pow or add(x, scalar const) anywhere lowers the ceiling to 15 (no stacking).
  int limit = (int)kMaxWeightTensors - ((f.has_pow || f.has_add_scalar_const) ? 1 : 0);
  std::set<std::string> paths;
  int n = 0;
  std::string at;
  for (const auto& [stmt, path] : f.blob_consts) {
    bool counted = paths.insert(path).second || p.strict();
    if (!counted) continue;
    ++n;
    if (n == limit + 1) at = stmt;
  }
  if (n > limit) {
    std::string what = p.strict() ? "weight tensors" : "weight files";
    std::string msg = kInvalid + "too many weight tensors (" + std::to_string(n) + " > " + std::to_string(limit) + ")" +
                      (limit == 15 ? "; the program has pow or add with a scalar const, which costs one slot" : "") +
                      " (counted " + what + ")";
    throw_compile(n > kMaxWeightTensors ? "C18" : "C19", at, msg);
  }
  // C34: slice_by_index of a function input + RMSNorm (pow + reduce_sum) + conv: Espresso saw
  // InvalidMILProgram, Orion's ffn_bwd compiles — disputed, so strict warns only.
  if (p.strict() && f.has_pow && f.has_reduce_sum && f.has_conv && warnings)
    for (const auto& s : f.sliced_inputs)
      warnings->push_back({"C34", warning_text("slice_by_index '" + s + "' slices a function input in a program with "
                                               "RMSNorm and conv (reported InvalidMILProgram); prefer slice_by_size", "C34")});
}

std::string op_status(const std::string& op, const Profile& p) {
  bool legacy_strict = p.legacy_chip() && p.strict();
  const ops::OpDef* def = ops::find_op(op);
  if (def && def->ane.evidence == "rejected") return "rejected (" + def->ane.constraints.front() + ")";
  if (op == "gelu") return p.strict() ? "rejected (C10)" : "permissive only, needs mode (C10)";
  if (op == "concat") return p.strict() ? "rejected (C01)" : "full form only: named axis + interleave (C01)";
  if (op == "matmul") return legacy_strict ? "rejected on m1/m2 (C30)" : "supported; named transpose flags (C15), saturates at +-32752 (C36)";
  if (op == "scaled_dot_product_attention")
    return legacy_strict ? "rejected on m1/m2 (C30)" : p.strict() ? "supported without attn_mask (C06)" : "supported; attn_mask ignored (C06)";
  if (op == "conv")
    return "supported; no bias (C16), kernel width <= " + std::to_string(conv_max_kernel_width(p)) + " (C24), input channels < " +
           std::to_string(kConvRejectCin) + " (C25)";
  if (op == "cast") return p.legacy_chip() ? "supported except fp16<->fp32 (C28)" : "supported";
  if (op == "softmax") return p.strict() ? "supported; last-axis length must be a power of two (C21)" : "supported";
  if (op == "reduce_mean") return "supported (disputed on hardware, C27)";
  if (op == "layer_norm") return "supported; epsilon dtype must equal gamma dtype (C38)";
  if (op == "slice_by_size" && p.legacy_chip()) return "supported; width-axis begin != 0 saturates at +-4094 (C35)";
  if (op == "split") return "one-part form only (multi-result statements not representable)";
  if (op == "pow") return "supported; costs one weight slot (C19)";
  return "supported";
}

std::vector<ConstraintInfo> catalog(const Profile& p) {
  bool S = p.strict(), L = p.legacy_chip();
  struct Row { const char* id; const char* rule; const char* kind; const char* conf; std::string reaction; const char* where; bool active; };
  std::vector<Row> rows = {
      {"C01", "no concat (conditional)", "compile", "[X]", S ? "compile-reject (every concat)" : "compile-reject (short form only)", "plan", true},
      {"C02", "all output surfaces of a program: same alloc size", "eval", "[S]", "eval-fail", "runtime", true},
      {"C03", "output slots follow alphabetical order of output names", "silent", "[S]", "reproduce", "runtime", true},
      {"C04", "every surface >= ~49,152 bytes; seq >= 16", "eval", "[S]/[X]", "eval-fail", "runtime", true},
      {"C05", "~119 compiles per process", "process", "[C]", "count", "runtime", true},
      {"C06", "SDPA attn_mask ignored", "silent", "[C]", S ? "compile-reject" : "reproduce", "plan", true},
      {"C07", "weights baked at compile; file rewrite + reload has no effect", "silent", "[C]", "reproduce", "runtime", true},
      {"C08", "BLOBFILE offset = metadata record offset (64 for first blob)", "silent", "[C]", S ? "compile-reject" : "reproduce", "plan", true},
      {"C09", "MIL text must be NSData", "api", "[C]", "api", "runtime", true},
      {"C10", "no gelu", "compile", "[S]/[X]", S ? "compile-reject" : "compile-reject without mode", "plan", true},
      {"C11", "weight dictionary non-nil, entries non-empty", "api", "[C]/[D]", "compile-reject", "runtime, plan", true},
      {"C12", "all input surfaces of a program: same alloc size", "eval", "[S]", "eval-fail", "runtime", true},
      {"C13", "input slots follow alphabetical order of parameter names", "silent", "[S]", "reproduce", "runtime", true},
      {"C14", "oversized surfaces are read/written packed from byte 0", "silent", "[S]", "reproduce", "runtime", true},
      {"C15", "matmul transpose_x/y must be named bool consts", "compile", "[S]", "compile-reject", "plan", true},
      {"C16", "conv takes no bias=", "compile", "[S]", "compile-reject", "plan", true},
      {"C17", "returned names must be live values", "compile", "[S]", "compile-reject", "plan", true},
      {"C18", "<= 16 weight tensors (files) per program", "compile", "[X]", S ? "compile-reject (counts files and tensors)" : "compile-reject (counts files)", "plan", true},
      {"C19", "pow or add(x, scalar) costs one weight slot", "compile", "[S]", "compile-reject (limit 15)", "plan", true},
      {"C20", "no rsqrt", "compile", "[S]", "compile-reject", "plan", true},
      {"C21", "softmax over non-power-of-two length rejected", "compile", "[X]", S ? "compile-reject (last axis)" : "inactive", "plan", S},
      {"C22", "every axis <= 65,536", "compile", "[C]", "compile-reject", "plan", true},
      {"C23", "rank <= 5", "compile", "[S]", "compile-reject", "plan", true},
      {"C24", "conv kernel width <= 15 (<= 13 on M1)", "compile", "[S]", "compile-reject", "plan", true},
      {"C25", "conv with 32,000 input channels rejected", "compile", "[S]", "compile-reject (>= 32000), warn (> 8192)", "plan", true},
      {"C26", "~32 MB SRAM working-set cliff", "perf", "[C]", "cost-model, warn", "cost-model", true},
      {"C27", "reduce_mean availability disputed", "compile", "[X]", "accept", "plan", true},
      {"C28", "fp32 I/O + cast rejected on M1/M2", "compile", "[S]", L ? "compile-reject" : "inactive", "plan", L},
      {"C29", "legacy program(1.0)/ios16 spelling needed on M1/M2", "compile", "[X]", L && S ? "compile-reject" : "inactive", "plan", L && S},
      {"C30", "matmul / SDPA rejected on M1/M2", "compile", "[X]", L && S ? "compile-reject" : "inactive", "plan", L && S},
      {"C31", "some M3 configs compile only 512-channel conv stacks", "compile", "[X]",
       "none: config-specific (M3 Pro/Ultra sweeps) and contradicted by 768-channel kernels on M3 Ultra; cause unknown, documented only",
       "none", false},
      {"C32", "M1 rejects non-spec multi-blob weight files", "compile", "[S]", L ? "compile-reject" : "warn", "plan", true},
      {"C33", "mul(reduce_result, 0.0) fails to compile", "compile", "[S]", "compile-reject", "plan", true},
      {"C34", "slice_by_index on inputs + RMSNorm + convs rejected", "compile", "[X]", S ? "warn" : "inactive", "plan", S},
      {"C35", "pre-A16: width-axis slice_by_size with begin != 0 saturates at +-4,094", "silent", "[S]", L ? "reproduce" : "inactive", "plan", L},
      {"C36", "matmul outputs saturate to +-inf near +-32,752", "silent", "[S]", "reproduce", "plan", true},
      {"C37", "fp16 everywhere: overflow > 65,504, gradient underflow", "numeric", "[C]", "reproduce", "plan", true},
      {"C38", "layer_norm epsilon dtype must equal gamma dtype", "compile", "[S]", "compile-reject", "plan", true},
      {"C39", "bool (and on e5rt: fp32/int32) not allowed as program I/O", "compile", "[S]", "compile-reject", "plan", true},
      {"C40", "SSA names unique", "compile", "[S]", "compile-reject", "plan", true},
      {"C41", "~0.1 ms fixed cost per eval", "perf", "[C]", "cost-model", "cost-model", true},
      {"C42", "request limits: <= 255 buffers, symbol index <= 254, procedure <= 128", "api", "[D]", "eval-fail", "runtime", true},
      {"C43", "weightsBuffer in the request is ignored", "silent", "[S]", "reproduce", "runtime", true},
      {"C44", "temp-folder protocol (pre-write files; shared folders; unload deletes)", "api", "[C]/[D]", "reproduce", "runtime", true},
      {"C45", "fused SDPA only for large shapes, unreliable for S > 2,048", "silent/perf", "[S]", "none: the compiler decomposes attention", "compiler", false},
      {"C46", "1x1 conv ~3x faster than matmul; deep programs needed for throughput", "perf", "[C]", "cost-model", "cost-model", true},      {"C47", "constexpr decompression: int8 affine is dequantised at compile (no compute speed-up) [S]; whether the "
              "in-memory path accepts constexpr_lut_to_dense / constexpr_blockwise_shift_scale, their sub-byte blobs "
              "and how their operand blobs count toward C18: unknown", "compile", "[S]/unknown",
       "accept: decoded exactly as coremltools does, operand blobs counted as weight tensors (C18)", "plan", true},
  };
  std::vector<ConstraintInfo> out;
  for (auto& r : rows) out.push_back({r.id, r.rule, r.kind, r.conf, r.reaction, r.where, r.active, {}});
  auto set = [&](const char* id, std::vector<std::pair<std::string, int64_t>> l) {
    for (auto& c : out) if (c.id == id) c.limits = std::move(l);
  };
  set("C04", {{"min_surface_bytes", p.min_surface_bytes}});
  set("C05", {{"compile_budget", p.compile_budget}});
  set("C18", {{"max_weight_tensors", kMaxWeightTensors}});
  set("C19", {{"max_weight_tensors_with_pow", kMaxWeightTensors - 1}});
  set("C22", {{"max_axis", kMaxAxis}});
  set("C23", {{"max_rank", kMaxRank}});
  set("C24", {{"max_kernel_width", conv_max_kernel_width(p)}});
  set("C25", {{"reject_input_channels", kConvRejectCin}, {"warn_input_channels", kConvWarnCin}});
  return out;
}

}  // namespace orion::sim::constraints

namespace orion::sim {

std::vector<ConstraintInfo> constraint_catalog(const Profile& profile) { return constraints::catalog(profile); }

std::vector<OpInfo> op_catalog(const Profile& profile) {
  std::vector<OpInfo> out;
  for (const auto& d : ops::registry()) {
    OpInfo o{d.name, d.family, {}, {}, d.attr_params, d.output, d.ane.evidence, d.ane.constraints, d.ane.lowering,
             constraints::op_status(d.name, profile)};
    for (const auto& p : d.params) {
      o.params.push_back(p.spelling());
      o.types.push_back({p.name, p.type});
    }
    out.push_back(std::move(o));
  }
  return out;
}

}  // namespace orion::sim
