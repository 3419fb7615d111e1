// OpCtx (operand resolution, const-parameter readers, error helpers) and helpers shared by the op families.
#include <algorithm>
#include <cstring>

#include "common/error.h"
#include "sim/ops/op.h"

namespace orion::sim::ops {

DType storage_dtype(DType d) { return d == DType::fp32 ? DType::fp16 : d; }
size_t storage_size(DType d) { return d == DType::string ? 0 : dtype_size(storage_dtype(d)); }

std::string type_str(DType d, const Shape& s) {
  if (s.empty()) return dtype_name(d);
  return std::string("tensor<") + dtype_name(d) + ", " + shape_str(s) + ">";
}

int64_t load_int(const void* p, DType d, int64_t i) {
  switch (d) {
    case DType::int8: case DType::int4: return ((const int8_t*)p)[i];
    case DType::uint8: case DType::bool_: case DType::uint1: case DType::uint2: case DType::uint3: case DType::uint4:
    case DType::uint6:
      return ((const uint8_t*)p)[i];
    case DType::int16: return ((const int16_t*)p)[i];
    case DType::uint16: return ((const uint16_t*)p)[i];
    case DType::int32: return ((const int32_t*)p)[i];
    case DType::uint32: return ((const uint32_t*)p)[i];
    case DType::uint64: return (int64_t)((const uint64_t*)p)[i];
    case DType::fp16: case DType::fp32: return (int64_t)f16_to_f32(((const f16*)p)[i]);
    default: return 0;
  }
}

void store_int(void* p, DType d, int64_t i, int64_t v) {
  switch (d) {
    case DType::int8: case DType::int4: ((int8_t*)p)[i] = (int8_t)v; break;
    case DType::uint8: case DType::uint1: case DType::uint2: case DType::uint3: case DType::uint4: case DType::uint6:
      ((uint8_t*)p)[i] = (uint8_t)v; break;
    case DType::bool_: ((uint8_t*)p)[i] = v != 0; break;
    case DType::int16: ((int16_t*)p)[i] = (int16_t)v; break;
    case DType::uint16: ((uint16_t*)p)[i] = (uint16_t)v; break;
    case DType::int32: ((int32_t*)p)[i] = (int32_t)v; break;
    case DType::uint32: ((uint32_t*)p)[i] = (uint32_t)v; break;
    case DType::uint64: ((uint64_t*)p)[i] = (uint64_t)v; break;
    default: break;
  }
}

namespace {
// A check-only const's data, read in place (see ConstData): a borrowed BLOBFILE payload.
const uint8_t* const_bytes(const ConstData& c, const std::string& name) {
  if (!c.elided) return c.bytes.data();
  if (!c.view)
    throw_compile("", name, "InvalidMILProgram: the value of '" + name + "' (a folded constexpr result) is needed "
                            "at compile time; pass it as a plain const");
  return c.view;
}
}  // namespace

std::vector<int64_t> Value::ints() const {
  std::vector<int64_t> r;
  if (!cdata || dtype == DType::string) return r;
  int64_t n = numel();
  r.resize(n);
  const uint8_t* p = const_bytes(*cdata, name);
  bool f32_view = cdata->view && cdata->view_dtype == DType::fp32;
  for (int64_t i = 0; i < n; ++i)
    r[i] = f32_view ? (int64_t)f16_to_f32(f32_to_f16(((const float*)p)[i])) : load_int(p, storage_dtype(dtype), i);
  return r;
}

std::vector<double> Value::floats() const {
  std::vector<double> r;
  if (!cdata || dtype == DType::string) return r;
  int64_t n = numel();
  r.resize(n);
  bool fl = dtype_is_float(dtype);
  const uint8_t* p = const_bytes(*cdata, name);
  bool f32_view = cdata->view && cdata->view_dtype == DType::fp32;  // rounded as the snapshot would be (C37)
  for (int64_t i = 0; i < n; ++i)
    r[i] = f32_view ? (double)f16_to_f32(f32_to_f16(((const float*)p)[i]))
           : fl     ? (double)f16_to_f32(((const f16*)p)[i])
                    : (double)load_int(p, dtype, i);
  return r;
}

std::vector<int64_t> dense_strides(const Shape& s) {
  std::vector<int64_t> st(s.size());
  int64_t acc = 1;
  for (int i = (int)s.size() - 1; i >= 0; --i) { st[i] = acc; acc *= s[i]; }
  return st;
}

bool broadcast_shapes(const Shape& a, const Shape& b, Shape* out) {
  size_t r = std::max(a.size(), b.size());
  Shape o(r);
  for (size_t i = 0; i < r; ++i) {
    int64_t da = i < r - a.size() ? 1 : a[i - (r - a.size())];
    int64_t db = i < r - b.size() ? 1 : b[i - (r - b.size())];
    if (da != db && da != 1 && db != 1) return false;
    o[i] = da == 1 ? db : da;
  }
  *out = o;
  return true;
}

std::vector<int64_t> broadcast_strides(const Shape& x, const Shape& out) {
  std::vector<int64_t> st(out.size(), 0), xs = dense_strides(x);
  size_t off = out.size() - x.size();
  for (size_t i = 0; i < x.size(); ++i) st[off + i] = x[i] == 1 ? 0 : xs[i];
  return st;
}

Shape at_least_1d(const Shape& s) { return s.empty() ? Shape{1} : s; }

int64_t prod(const Shape& s, int from, int to) {
  int64_t p = 1;
  for (int i = std::max(from, 0); i < to && i < (int)s.size(); ++i) p *= s[i];
  return p;
}

void WarnSink::warn(const std::string& constraint, const std::string& detail) {
  std::string key = constraint.empty() ? detail : constraint;
  if (!seen_.insert(key).second) return;  // once per execute, not per element
  list.push_back({constraint, constraints::warning_text(detail, constraint)});
}

// ---- OpCtx ----------------------------------------------------------------------------------------

OpCtx::OpCtx(Env& e, const mil::Stmt& s, const OpDef& d) : env(e), st(s), def(d) {}

const mil::Arg* OpCtx::arg(const std::string& p) const { return def.attr_params ? nullptr : st.arg(p); }
const mil::Attr* OpCtx::attr(const std::string& p) const { return def.attr_params ? st.attr(p) : nullptr; }

bool OpCtx::has(const std::string& p) const { return arg(p) || attr(p); }

bool OpCtx::is_inline(const std::string& p) const {
  const mil::Arg* a = arg(p);
  return attr(p) || (a && a->kind == mil::Arg::Kind::Literal);
}

bool OpCtx::is_named_const(const std::string& p) const {
  const mil::Arg* a = arg(p);
  if (!a || a->kind != mil::Arg::Kind::Ref) return false;
  return const_cast<OpCtx*>(this)->v(p).is_const();
}

void OpCtx::fail(const std::string& detail) const {
  throw_compile("", st.out, "InvalidMILProgram: " + st.op + ": " + detail);
}

int OpCtx::vid(const std::string& p) {
  auto it = cache_.find(p);
  if (it != cache_.end()) return it->second;
  int id = resolve(p);
  cache_[p] = id;
  return id;
}

int OpCtx::resolve(const std::string& p) {
  if (const mil::Attr* at = attr(p)) return env.literal(at->value, st.out + "." + p, st);
  const mil::Arg* a = arg(p);
  if (!a) fail("missing required parameter '" + p + "'");
  switch (a->kind) {
    case mil::Arg::Kind::Ref: return env.lookup(a->ref, st);
    case mil::Arg::Kind::Literal: return env.literal(a->literal, st.out + "." + p, st);
    case mil::Arg::Kind::Tuple: fail("parameter '" + p + "' takes one value, not a tuple");
  }
  fail("bad parameter '" + p + "'");
}

const Value& OpCtx::v(const std::string& p) { return env.value(vid(p)); }

std::vector<int> OpCtx::tuple(const std::string& p) {
  const mil::Arg* a = arg(p);
  if (!a) fail("missing required parameter '" + p + "'");
  if (a->kind != mil::Arg::Kind::Tuple) return {vid(p)};
  std::vector<int> ids;
  for (const auto& n : a->tuple) ids.push_back(env.lookup(n, st));
  if (ids.empty()) fail("parameter '" + p + "' is an empty tuple");
  return ids;
}

const Value& OpCtx::c(const std::string& p) {
  const Value& x = v(p);
  if (!x.is_const()) fail("parameter '" + p + "' must be a const (got the computed value '" + x.name + "')");
  return x;
}

int64_t OpCtx::i64(const std::string& p) {
  const Value& x = c(p);
  if (!dtype_is_int(x.dtype) || x.numel() != 1)
    fail("parameter '" + p + "' must be an integer scalar, got " + type_str(x.dtype, x.shape));
  return x.ints()[0];
}
int64_t OpCtx::i64(const std::string& p, int64_t d) { return has(p) ? i64(p) : d; }

std::vector<int64_t> OpCtx::ivec(const std::string& p) {
  const Value& x = c(p);
  if (!(dtype_is_int(x.dtype) || x.dtype == DType::bool_) || x.rank() > 1)
    fail("parameter '" + p + "' must be a rank-1 integer/bool tensor, got " + type_str(x.dtype, x.shape));
  return x.ints();
}
std::vector<int64_t> OpCtx::ivec(const std::string& p, const std::vector<int64_t>& d) {
  return has(p) ? ivec(p) : d;
}

bool OpCtx::flag(const std::string& p, bool d) {
  if (!has(p)) return d;
  const Value& x = c(p);
  if (x.dtype != DType::bool_ || x.numel() != 1) fail("parameter '" + p + "' must be a bool scalar, got " + type_str(x.dtype, x.shape));
  return x.ints()[0] != 0;
}

std::string OpCtx::str(const std::string& p, const std::string& d) {
  if (!has(p)) return d;
  const Value& x = c(p);
  if (x.dtype != DType::string) fail("parameter '" + p + "' must be a string, got " + type_str(x.dtype, x.shape));
  return x.cdata->str;
}

double OpCtx::f64(const std::string& p, double d) {
  if (!has(p)) return d;
  const Value& x = c(p);
  if (!dtype_is_float(x.dtype) || x.numel() != 1)
    fail("parameter '" + p + "' must be a float scalar, got " + type_str(x.dtype, x.shape));
  return x.floats()[0];
}

const Value& OpCtx::expect_float(const std::string& p) {
  const Value& x = v(p);
  if (!dtype_is_float(x.dtype)) fail("parameter '" + p + "' must be fp16 or fp32, got " + type_str(x.dtype, x.shape));
  return x;
}

const Value& OpCtx::expect_rank_ge(const std::string& p, int r) {
  const Value& x = v(p);
  if (x.rank() < r) fail("parameter '" + p + "' must have rank >= " + std::to_string(r) + ", got " + type_str(x.dtype, x.shape));
  return x;
}

void OpCtx::expect_same_dtype(const std::string& a, const std::string& b) {
  const Value& x = v(a);
  const Value& y = v(b);
  if (x.dtype != y.dtype)
    fail("parameters '" + a + "' (" + dtype_name(x.dtype) + ") and '" + b + "' (" + dtype_name(y.dtype) + ") must have the same dtype (insert a cast)");
}

std::vector<int> OpCtx::axes_param(int rank, std::vector<int>* given) {
  std::vector<int> axes;
  if (!has("axes")) {
    for (int i = 0; i < rank; ++i) axes.push_back(i);
  } else {
    for (int64_t a : ivec("axes")) axes.push_back(norm_axis(a, rank, "axis"));
  }
  if (given) *given = axes;
  std::sort(axes.begin(), axes.end());
  if (std::adjacent_find(axes.begin(), axes.end()) != axes.end()) fail("axes contain duplicates");
  return axes;
}

int OpCtx::norm_axis(int64_t axis, int rank, const std::string& what) const {
  int64_t a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a >= rank) fail(what + " " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank));
  return (int)a;
}

Shape OpCtx::broadcast(const Shape& a, const Shape& b, const std::string& an, const std::string& bn) const {
  Shape o;
  if (broadcast_shapes(a, b, &o)) return o;
  const size_t r = std::max(a.size(), b.size());
  size_t k = 1;  // the first mismatching axis, counted from the right
  while (k <= std::min(a.size(), b.size()) &&
         (a[a.size() - k] == b[b.size() - k] || a[a.size() - k] == 1 || b[b.size() - k] == 1))
    ++k;
  fail("shapes " + shape_str(a) + " ('" + an + "') and " + shape_str(b) + " ('" + bn + "') are not broadcastable: axis " +
       std::to_string(r - k) + " (" + std::to_string(k) + " from the right) has " + std::to_string(a[a.size() - k]) +
       " vs " + std::to_string(b[b.size() - k]) + "; each axis must match or be 1");
}

int OpCtx::input_id(int id) {
  for (size_t i = 0; i < inputs.size(); ++i) if (inputs[i] == id) return (int)i;
  inputs.push_back(id);
  return (int)inputs.size() - 1;
}
int OpCtx::input(const std::string& p) { return input_id(vid(p)); }

}  // namespace orion::sim::ops
