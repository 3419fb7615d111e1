// Internal interface between the plan builder (sim/plan.cpp) and the op families (sim/ops/*.cpp).
// Every op is one OpDef in the registry (registry.cpp): its MIL parameter names, `infer` (checks
// operand dtypes/shapes and const parameters, computes the result type — MIL semantics as in
// coremltools) and `lower` (precomputes everything it can and returns the executable step).
// ANE-specific rejections live apart in constraints.cpp (check_op / check_program).
#pragma once
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "common/fp16.h"
#include "mil/ast.h"
#include "cpu/kernels/compressed.h"
#include "cpu/kernels/kernels.h"
#include "sim/plan.h"

namespace orion::sim::ops {

// Floats live as fp16 inside a plan (C37); fp32 exists only at program I/O. Others are stored natively
// (bool as one byte).
DType storage_dtype(DType d);
size_t storage_size(DType d);

// Plan-owned snapshot of a const's data in storage dtype, row-major (C07: baked at compile).
struct ConstData {
  std::vector<uint8_t> bytes;
  std::string str;           // string consts
  std::string blob_path;     // non-empty when read from a BLOBFILE (C18 counting)
  // check_program only (no plan is kept, so nothing is copied): `view` borrows a BLOBFILE payload in
  // the caller's weight file for the duration of the check, in `view_dtype` (fp32 payloads stay fp32);
  // a folded constexpr result has no data at all. `nbytes` is what the snapshot would take.
  bool elided = false;
  const uint8_t* view = nullptr;
  DType view_dtype = DType::fp16;
  size_t nbytes = 0;
  // A constexpr op's result kept compressed (constexpr.cpp): `bytes` stays empty until a consumer that
  // cannot read it compressed needs the dense fp16 values (Env::materialize).
  std::shared_ptr<const cpu::kernels::CompressedWeight> compressed;
  bool is_compressed_only() const { return compressed && bytes.empty() && !elided; }
  size_t storage_bytes() const { return elided ? nbytes : bytes.size() + (compressed ? compressed->bytes() : 0); }
};

struct Value {
  enum class Src { Param, Const, Op };
  std::string name;
  DType dtype = DType::fp16;  // MIL dtype (fp32 stays fp32 in the type system; storage is fp16)
  Shape shape;
  Src src = Src::Op;
  int param_index = -1;       // Src::Param
  int stmt = -1;              // producing statement (index in main's stmts), -1 for params / inline literals
  std::string op;             // producing op ("const" for consts, "" for params)
  std::shared_ptr<const ConstData> cdata;  // Src::Const

  bool is_const() const { return src == Src::Const; }
  int rank() const { return (int)shape.size(); }
  int64_t numel() const { return shape_numel(shape); }
  size_t bytes() const { return (size_t)numel() * storage_size(dtype); }
  // Const element access (any int/bool dtype -> int64; float consts -> their fp16 value).
  std::vector<int64_t> ints() const;
  std::vector<double> floats() const;
};

std::string type_str(DType d, const Shape& s);  // "tensor<fp16, [1, 2]>" ("fp16" for rank 0)

// ---- execution ----------------------------------------------------------------------------------
// Collects reproduce-class warnings during one execute; each constraint is reported once per call.
class WarnSink {
 public:
  void warn(const std::string& constraint, const std::string& detail);
  std::vector<Warning> list;
 private:
  std::set<std::string> seen_;
};

struct RunArgs {
  const void* const* in = nullptr;  // step inputs, in the order OpCtx::input() registered them
  void* out = nullptr;              // result, storage dtype, dense
  void* scratch = nullptr;          // OpCtx::scratch_bytes of per-call scratch (64-byte aligned)
  WarnSink* warn = nullptr;
  // The step's panel input (OpCtx::panel_read) read from a compressed weight instead of its bytes, or null.
  const cpu::kernels::PanelsAt* panel = nullptr;
  template <class T> const T* at(int k) const { return static_cast<const T*>(in[k]); }
  template <class T> T* o() const { return static_cast<T*>(out); }
};
using RunFn = std::function<void(const RunArgs&)>;

// ---- live columns (dead-column skipping: sim/ops/columns.cpp, sim/plan.cpp) -----------------------
// A part of a value: nothing, all of it, or its first `len` entries along `axis` (other axes whole).
struct Region {
  enum class Kind : uint8_t { none, all, prefix };
  Kind kind = Kind::none;
  int axis = -1;
  int64_t len = 0;
  static Region all() { return {Kind::all, -1, 0}; }
  static Region prefix(int axis, int64_t len) { return {Kind::prefix, axis, len}; }
};
// The parts of a step's inputs (by value id) that the prefix [0, len) of its output along `axis` reads;
// inputs not listed are read whole. False, with `why`, when the op mixes entries along that axis.
// A rule also promises that running the whole op on inputs that are garbage outside those parts is
// harmless (no value-dependent addressing or warnings) and leaves the output prefix exact.
using ColumnRule = std::function<bool(int axis, int64_t len, std::vector<std::pair<int, Region>>* in, std::string* why)>;
// Computes at least the output prefix [0, len) along `axis`, reading only what the rule named.
using PrefixRunFn = std::function<void(const RunArgs&, int axis, int64_t len)>;
// Computes the output prefix [0, len) along `axis` into `out`, dense [outer][chunk] (its prefix box,
// sim/ops/prefix.h), reading input k from in[k] in that same dense form where in[k] is set (an input of
// the output's shape), else from RunArgs as stored (sim/compact.h: element-wise chains of a live run).
using CompactRunFn = std::function<void(const RunArgs&, int axis, int64_t len, const f16* const* in, f16* out)>;
// The inputs a CompactRunFn can take compact for the output prefix [0, len) along `axis`: (input index, the
// part of that input it reads); the input's compact form is its prefix box over that part.
using CompactInputsFn = std::function<void(int axis, int64_t len, std::vector<std::pair<int, Region>>* in)>;

// ---- build ----------------------------------------------------------------------------------------
// Services the builder offers to an op while it is resolved.
class Env {
 public:
  virtual ~Env() = default;
  virtual const Value& value(int id) const = 0;
  virtual int lookup(const std::string& name, const mil::Stmt& st) = 0;  // undefined -> CompileError
  virtual int literal(const mil::Literal& lit, const std::string& label, const mil::Stmt& st) = 0;
  virtual const Profile& profile() const = 0;
  virtual const std::string& opset() const = 0;  // of function main: "ios16", "ios17", "ios18"
  virtual void warn(const std::string& constraint, const std::string& detail) = 0;
  // check_program: types, shapes and constraints only; lowerings skip work that copies const data.
  virtual bool check_only() const { return false; }
  // A compressed const (constexpr result) gets its dense fp16 bytes (for consumers that read them).
  virtual void materialize(int id) = 0;
};

struct OpDef;

// The statement being resolved: operand access, const-parameter readers, error helpers and the
// results infer/lower fill in.
class OpCtx {
 public:
  OpCtx(Env& env, const mil::Stmt& st, const OpDef& def);
  Env& env;
  const mil::Stmt& st;
  const OpDef& def;
  const Profile& profile() const { return env.profile(); }

  // operands (args; attrs for constexpr ops)
  bool has(const std::string& p) const;
  bool is_inline(const std::string& p) const;     // given as a literal in the statement text
  bool is_named_const(const std::string& p) const;  // a reference to a const statement
  const Value& v(const std::string& p);            // required (infer checks presence first)
  int vid(const std::string& p);
  std::vector<int> tuple(const std::string& p);    // `values = (a, b, c)`
  // const parameters: the operand must be a const; defaults apply when absent
  const Value& c(const std::string& p);
  int64_t i64(const std::string& p, int64_t def);
  int64_t i64(const std::string& p);
  std::vector<int64_t> ivec(const std::string& p);
  std::vector<int64_t> ivec(const std::string& p, const std::vector<int64_t>& def);
  bool flag(const std::string& p, bool def);
  std::string str(const std::string& p, const std::string& def);
  double f64(const std::string& p, double def);

  // checks
  [[noreturn]] void fail(const std::string& detail) const;  // "InvalidMILProgram: <op>: detail"
  const Value& expect_float(const std::string& p);
  const Value& expect_rank_ge(const std::string& p, int r);
  void expect_same_dtype(const std::string& a, const std::string& b);
  int norm_axis(int64_t axis, int rank, const std::string& what) const;  // negative -> +rank
  // The "axes" parameter normalised (every axis when absent), sorted; duplicates are an error.
  // `given` (optional) receives them in the order written.
  std::vector<int> axes_param(int rank, std::vector<int>* given = nullptr);
  Shape broadcast(const Shape& a, const Shape& b, const std::string& an, const std::string& bn) const;

  // registers a value as an input of the executable step; returns its index in RunArgs::in
  int input(const std::string& p);
  int input_id(int value_id);
  std::vector<int> inputs;  // value ids, in registration order

  // results: set by infer
  DType out_dtype = DType::fp16;
  Shape out_shape;
  std::shared_ptr<const ConstData> folded;  // constexpr ops: the result is a const computed at build time
  // set by lower
  std::set<int> compressed_inputs;  // compressed const inputs the step reads compressed (no dense copy)
  std::set<int> build_only_inputs;  // inputs used only while lowering (packed into the step): never read at run time
  int64_t scratch_bytes = 0;
  // An input the step can read from a compressed weight standing for its bytes (RunArgs::panel): a weight
  // read as `rows` rows of K in column panels of `width` rows (the panel idiom's matmul). input: its index.
  struct PanelRead {
    int input = -1;
    int64_t rows = 0, K = 0, width = 0;
  } panel_read;
  double flops = 0;
  enum class Unit { other, conv, matmul } unit = Unit::other;
  // dead-column skipping, optional (set by lower): the op's own rule (else columns.cpp's, by op
  // name) and a runner that computes only an output prefix (else the whole op runs)
  ColumnRule column_rule;
  PrefixRunFn run_prefix;
  CompactRunFn run_compact;          // optional (element-wise ops, matmul, slice_by_size)
  CompactInputsFn compact_inputs;    // optional: the inputs run_compact takes compact (else none)

 private:
  const mil::Arg* arg(const std::string& p) const;
  const mil::Attr* attr(const std::string& p) const;
  int resolve(const std::string& p);
  std::map<std::string, int> cache_;  // parameter -> value id (inline literals become one const each)
};

// One MIL parameter: name, type as the simulator accepts it ("tensor" = any runtime or const tensor,
// "tensor<int>" / "tensor<bool>" restrict the dtype, "const ..." must be a const: "const int32",
// "const int32[]", "const bool", "const fp", "const string", "const tensor<fp>"; "tuple<tensor>").
struct Param {
  std::string name;
  std::string type;
  bool optional = false;
  std::string spelling() const { return optional ? name + "?" : name; }  // "bias?" = optional
};

// ANE facts about an op: the evidence for it on the in-memory path, the constraints that concern it, and
// the lowering the compiler applies instead of emitting it (empty: the compiler may emit it).
struct AneInfo {
  // "[C]", "[S]", "[X]" (as ConstraintInfo::confidence, sim/plan.h), "unverified", "rejected"
  std::string evidence;
  std::vector<std::string> constraints;  // constraint IDs, the one explaining a lowering first
  std::string lowering;
};

// The op schema: one row per op (registry.cpp). Everything else about an op — the Python builders,
// the compiler's validation and legalisation lists, the ANE test programs — is derived from it.
struct OpDef {
  std::string name;
  std::string family;                    // coremltools-style group: elementwise, activation, contraction, ... (= the Python module in orion/ir/ops/)
  std::vector<Param> params;             // required first
  std::string output;                    // output rule: "broadcast(x, y)", "elementwise(x)", "like(x)", ...
  AneInfo ane;
  bool attr_params = false;              // constexpr ops: parameters sit in the attribute list
  void (*infer)(OpCtx&) = nullptr;
  RunFn (*lower)(OpCtx&) = nullptr;      // null for const / constexpr (folded at build)
  const Param* param(const std::string& n) const {
    for (const auto& p : params) if (p.name == n) return &p;
    return nullptr;
  }
};

const std::vector<OpDef>& registry();
const OpDef* find_op(const std::string& name);

// ---- helpers shared by the op families ----------------------------------------------------------
std::vector<int64_t> dense_strides(const Shape& s);
bool broadcast_shapes(const Shape& a, const Shape& b, Shape* out);
// Element strides of `x` read as `out`-shaped (0 on broadcast axes); right-aligned, rank = out.size().
std::vector<int64_t> broadcast_strides(const Shape& x, const Shape& out);
// Kernels take rank >= 1 shapes: rank-0 becomes [1].
Shape at_least_1d(const Shape& s);
int64_t load_int(const void* p, DType d, int64_t i);
void store_int(void* p, DType d, int64_t i, int64_t v);
int64_t prod(const Shape& s, int from, int to);  // product of s[from, to)

// Dead-column skipping (columns.cpp): the step's column rule (the op's own or the generic one by op
// name; one that always refuses for ops without a rule), and region `r` of a value of shape `of` as a
// region of the same bytes viewed with shape `as` (reshape views), widened to one that covers it.
ColumnRule column_rule(OpCtx& ctx);
Region reshape_region(const Shape& of, const Region& r, const Shape& as);

// Const construction (const.cpp): literals and BLOBFILE weights into plan-owned storage.
std::shared_ptr<ConstData> const_from_literal(const mil::Literal& lit, const std::string& stmt);
struct WeightLookup {
  const std::vector<WeightFile>* files = nullptr;
  const Profile* profile = nullptr;
  std::vector<Warning>* warnings = nullptr;
  bool borrow = false;  // check_program: validate the blob, keep a view instead of a copy
};
std::shared_ptr<ConstData> const_from_blob(const mil::Literal& lit, const WeightLookup& w, const std::string& stmt);
// n sub-byte values packed as MILBlob stores them -> one byte each (signed: sign-extended int8).
void unpack_bits(const uint8_t* packed, unsigned bits, bool is_signed, size_t n, uint8_t* out);

// Op family entry points (one file each), referenced by registry.cpp.
#define ORION_OP(fn) void fn##_infer(OpCtx&); RunFn fn##_lower(OpCtx&);
ORION_OP(binary) ORION_OP(unary) ORION_OP(clip) ORION_OP(gelu)
ORION_OP(conv) ORION_OP(matmul) ORION_OP(sdpa)
ORION_OP(reduce) ORION_OP(softmax) ORION_OP(layer_norm)
ORION_OP(reshape) ORION_OP(transpose) ORION_OP(cast) ORION_OP(slice_by_index) ORION_OP(slice_by_size)
ORION_OP(concat) ORION_OP(split) ORION_OP(identity)
ORION_OP(gather) ORION_OP(select) ORION_OP(band_part)
ORION_OP(quantize) ORION_OP(dequantize)
#undef ORION_OP
void const_infer(OpCtx&);
void constexpr_affine_dequantize_infer(OpCtx&);
void constexpr_lut_to_dense_infer(OpCtx&);
void constexpr_blockwise_shift_scale_infer(OpCtx&);
// The panel-GEMM form of a constant [M, K] weight: its compressed form when it is one (decoded per
// panel in the kernel; the step then reads the value compressed), else its fp16 values packed once.
// slice_by_size's begin (negative ones resolved) and size (-1 resolved) against x; fails on bad ones.
void slice_by_size_geometry(OpCtx& ctx, std::vector<int64_t>* begin, Shape* size);
// A constant weight in the panel kernel's layout: its compressed codes decoded per panel, or its fp16 values
// packed (shared with every plan holding the same weight: sim/shared_weights.h).
std::shared_ptr<const cpu::kernels::PackedA> packed_const_weight(OpCtx& ctx, const std::string& p, int64_t M,
                                                                 int64_t K);

}  // namespace orion::sim::ops

// ANE-specific checks (sim/constraints.cpp).
namespace orion::sim::constraints {
// Per-statement rejections/warnings, after the op's MIL-level inference succeeded.
void check_op(ops::OpCtx& ctx);
// Program-level facts gathered while resolving, checked once at the end.
struct ProgramFacts {
  std::vector<std::pair<std::string, std::string>> blob_consts;  // (statement, path) per BLOBFILE tensor
  bool has_pow = false, has_add_scalar_const = false;
  bool has_reduce_sum = false, has_conv = false;
  std::vector<std::string> sliced_inputs;  // slice_by_index statements whose x is a function input
};
void check_program(const ProgramFacts& f, const Profile& p, std::vector<Warning>* warnings);
void check_io_dtype(DType d, const std::string& name, bool is_output, const Profile& p);  // C39, C28
void check_shape(const Shape& s, const std::string& stmt);  // C22, C23
void check_dialect(const mil::Program& prog, const Profile& p);  // C29
std::string op_status(const std::string& op, const Profile& p);
std::string warning_text(const std::string& detail, const std::string& constraint);  // "AneSimWarning: ... [Cnn]"
}  // namespace orion::sim::constraints

// Cost model (sim/cost.cpp).
namespace orion::sim::cost {
struct StepCost {
  double flops;
  ops::OpCtx::Unit unit;
  std::string name, op;  // for the per-op rows (CostEstimate::ops)
  int64_t bytes = 0;
};
CostEstimate estimate(const std::vector<StepCost>& steps, int64_t weight_bytes, int64_t activation_bytes,
                      int64_t io_bytes);
constexpr double kSramBytes = 32.0 * 1024 * 1024;  // C26
}  // namespace orion::sim::cost

// Dead-column skipping analysis (sim/live.cpp): from the live prefixes of the outputs back to every
// value, the region of each step's output that must be computed (none, all or a prefix).
namespace orion::sim::live {
struct StepInfo {
  int out;
  const std::vector<int>* ins;
  const ops::ColumnRule* rule;
};
struct Result {
  std::vector<ops::Region> step;   // per step: what to compute
  std::vector<std::string> notes;  // why steps compute all of their output; last, a "summary: ..." line
};
// `views`: (view, source) value pairs (reshapes sharing their source's bytes), in definition order.
Result analyse(const std::deque<ops::Value>& values, const std::vector<StepInfo>& steps,
               const std::vector<std::pair<int, int>>& views, const std::vector<int>& out_ids,
               const std::vector<int64_t>& live);
}  // namespace orion::sim::live
