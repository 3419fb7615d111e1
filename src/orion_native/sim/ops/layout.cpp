// Shape and layout ops: reshape, transpose, cast, slice_by_index, slice_by_size, concat, split,
// identity. Data movement only (cast converts), dtype-agnostic where MIL allows any dtype.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "cpu/kernels/kernels.h"
#include "sim/ops/op.h"

namespace orion::sim::ops {

namespace {

RunFn copy_step(OpCtx& ctx, const std::string& p) {
  size_t bytes = ctx.v(p).bytes();
  int ix = ctx.input(p);
  return [=](const RunArgs& a) { std::memcpy(a.out, a.in[ix], bytes); };
}

}  // namespace

// ---- identity / reshape -----------------------------------------------------------------------------

void identity_infer(OpCtx& ctx) {
  const Value& x = ctx.v("x");
  ctx.out_dtype = x.dtype;
  ctx.out_shape = x.shape;
}
RunFn identity_lower(OpCtx& ctx) { return copy_step(ctx, "x"); }

// coremltools semantics: at most one -1 (inferred); 0 copies a dimension of x — iOS17+: aligned from
// the right, 1 where x has no such dimension; iOS15/16: same position, and then len(shape) == rank(x).
void reshape_infer(OpCtx& ctx) {
  const Value& x = ctx.v("x");
  std::vector<int64_t> sh = ctx.ivec("shape");
  const int K = (int)sh.size(), r = x.rank();
  bool right_aligned = ctx.env.opset() != "ios16";
  if (!right_aligned && std::count(sh.begin(), sh.end(), 0) && K != r)
    ctx.fail("shape " + shape_str(sh) + " contains 0, so it needs rank(x) = " + std::to_string(r) + " entries (ios16)");
  int infer_at = -1;
  int64_t known = 1;
  for (int i = 0; i < K; ++i) {
    if (sh[i] == -1) {
      if (infer_at >= 0) ctx.fail("shape has more than one -1");
      infer_at = i;
      continue;
    }
    if (sh[i] == 0) {
      int j = right_aligned ? r - (K - i) : i;
      sh[i] = j >= 0 && j < r ? x.shape[j] : 1;
    }
    if (sh[i] < 0) ctx.fail("shape has a negative dimension " + std::to_string(sh[i]));
    known *= sh[i];
  }
  if (infer_at >= 0) {
    if (known == 0 || x.numel() % known) ctx.fail("cannot infer -1: " + std::to_string(x.numel()) + " elements into " + shape_str(ctx.ivec("shape")));
    sh[infer_at] = x.numel() / known;
  } else if (known != x.numel()) {
    ctx.fail("cannot reshape " + shape_str(x.shape) + " (" + std::to_string(x.numel()) + " elements) to " + shape_str(sh));
  }
  ctx.out_dtype = x.dtype;
  ctx.out_shape = sh;
}
RunFn reshape_lower(OpCtx& ctx) { return copy_step(ctx, "x"); }

// ---- transpose --------------------------------------------------------------------------------------

void transpose_infer(OpCtx& ctx) {
  const Value& x = ctx.v("x");
  std::vector<int64_t> perm = ctx.ivec("perm");
  if ((int)perm.size() != x.rank()) ctx.fail("perm has " + std::to_string(perm.size()) + " entries for rank " + std::to_string(x.rank()));
  std::vector<bool> seen(perm.size(), false);
  Shape out;
  for (auto& p : perm) {
    int a = ctx.norm_axis(p, x.rank(), "perm entry");
    if (seen[a]) ctx.fail("perm " + shape_str(ctx.ivec("perm")) + " is not a permutation");
    seen[a] = true;
    out.push_back(x.shape[a]);
  }
  ctx.out_dtype = x.dtype;
  ctx.out_shape = out;
}

RunFn transpose_lower(OpCtx& ctx) {
  const Value& x = ctx.v("x");
  if (x.rank() == 0) return copy_step(ctx, "x");
  std::vector<int64_t> perm = ctx.ivec("perm");
  for (auto& p : perm) p = ctx.norm_axis(p, x.rank(), "perm entry");
  Shape xs = x.shape;
  size_t es = storage_size(x.dtype);
  int ix = ctx.input("x");
  return [=](const RunArgs& a) { cpu::kernels::transpose(a.in[ix], a.out, es, xs, perm); };
}

// ---- cast -------------------------------------------------------------------------------------------

void cast_infer(OpCtx& ctx) {
  const Value& x = ctx.v("x");
  std::string d = ctx.str("dtype", "");
  DType to;
  static const char* allowed[] = {"fp16", "fp32", "int32", "int16", "uint16", "int8", "uint8", "bool"};
  bool ok = dtype_from_name(d, &to) && std::find_if(std::begin(allowed), std::end(allowed), [&](const char* s) { return d == s; }) != std::end(allowed);
  if (!ok) ctx.fail("dtype must be one of fp16, fp32, int32, int16, uint16, int8, uint8, bool; got '" + d + "'");
  if (x.dtype == DType::string) ctx.fail("cannot cast a string");
  ctx.out_dtype = to;
  ctx.out_shape = x.shape;
}

RunFn cast_lower(OpCtx& ctx) {
  const Value& x = ctx.v("x");
  DType from = storage_dtype(x.dtype), to = storage_dtype(ctx.out_dtype);
  int64_t n = x.numel();
  int ix = ctx.input("x");
  if (from == to) return copy_step(ctx, "x");  // fp16 <-> fp32: the value is already fp16 inside
  return [=](const RunArgs& a) {
    const void* src = a.in[ix];
    for (int64_t i = 0; i < n; ++i) {
      if (to == DType::fp16) {
        a.o<f16>()[i] = f32_to_f16((float)load_int(src, from, i));
      } else if (from == DType::fp16) {  // float -> int: truncation toward zero, saturating; NaN -> 0
        float v = f16_to_f32(((const f16*)src)[i]);
        int64_t q = std::isnan(v) ? 0 : std::isinf(v) ? (v > 0 ? INT64_MAX / 2 : INT64_MIN / 2) : (int64_t)v;
        if (to == DType::bool_) q = v != 0.0f;
        int64_t lo = to == DType::int8 ? -128 : to == DType::int16 ? -32768 : to == DType::int32 ? INT32_MIN : 0;
        int64_t hi = to == DType::int8 ? 127 : to == DType::uint8 ? 255 : to == DType::int16 ? 32767
                   : to == DType::uint16 ? 65535 : to == DType::int32 ? INT32_MAX : 1;
        store_int(a.out, to, i, std::min(std::max(q, lo), hi));
      } else {
        store_int(a.out, to, i, load_int(src, from, i));
      }
    }
  };
}

// ---- slice_by_index -----------------------------------------------------------------------------------

namespace {
struct SliceGeom {
  Shape out;
  int64_t offset = 0;
  std::vector<int64_t> strides, copy_shape;
  std::vector<int64_t> in_axis, begin, step;  // per output axis: the axis of x it reads, first index, stride
};

// numpy slice semantics per axis (Python slice.indices), masks as in coremltools.
SliceGeom slice_index_geom(OpCtx& ctx) {
  const Value& x = ctx.v("x");
  int r = x.rank();
  if (r == 0) ctx.fail("x must have rank >= 1");
  auto begin = ctx.ivec("begin"), end = ctx.ivec("end");
  auto stride = ctx.ivec("stride", std::vector<int64_t>(r, 1));
  auto bm = ctx.ivec("begin_mask", std::vector<int64_t>(r, 0)), em = ctx.ivec("end_mask", std::vector<int64_t>(r, 0));
  auto sq = ctx.ivec("squeeze_mask", std::vector<int64_t>(r, 0));
  for (auto* v : {&begin, &end, &stride, &bm, &em, &sq})
    if ((int)v->size() != r) ctx.fail("begin/end/stride/masks need " + std::to_string(r) + " entries (rank of x)");
  SliceGeom g;
  std::vector<int64_t> xs = dense_strides(x.shape);
  for (int i = 0; i < r; ++i) {
    int64_t d = x.shape[i], s = stride[i];
    if (s == 0) ctx.fail("stride must not be 0");
    int64_t b, e;
    if (bm[i]) b = s > 0 ? 0 : d - 1;
    else { b = begin[i] < 0 ? begin[i] + d : begin[i]; b = s > 0 ? std::clamp<int64_t>(b, 0, d) : std::clamp<int64_t>(b, -1, d - 1); }
    if (em[i]) e = s > 0 ? d : -1;
    else { e = end[i] < 0 ? end[i] + d : end[i]; e = s > 0 ? std::clamp<int64_t>(e, 0, d) : std::clamp<int64_t>(e, -1, d - 1); }
    int64_t len = s > 0 ? (e > b ? (e - b + s - 1) / s : 0) : (b > e ? (b - e + (-s) - 1) / (-s) : 0);
    if (sq[i]) {
      int64_t idx = begin[i] < 0 ? begin[i] + d : begin[i];
      if (bm[i]) idx = 0;
      if (idx < 0 || idx >= d) ctx.fail("squeezed axis " + std::to_string(i) + " index " + std::to_string(begin[i]) + " is out of range");
      g.offset += idx * xs[i];
      continue;
    }
    if (len < 1) ctx.fail("slice of axis " + std::to_string(i) + " (dim " + std::to_string(d) + ") is empty");
    g.offset += (len ? b : 0) * xs[i];
    g.out.push_back(len);
    g.strides.push_back(s * xs[i]);
    g.in_axis.push_back(i);
    g.begin.push_back(b);
    g.step.push_back(s);
  }
  g.copy_shape = g.out;
  if (g.copy_shape.empty()) { g.copy_shape = {1}; g.strides = {0}; }
  return g;
}
}  // namespace

void slice_by_index_infer(OpCtx& ctx) {
  SliceGeom g = slice_index_geom(ctx);
  ctx.out_dtype = ctx.v("x").dtype;
  ctx.out_shape = g.out;
}

RunFn slice_by_index_lower(OpCtx& ctx) {
  const SliceGeom g = slice_index_geom(ctx);
  size_t es = storage_size(ctx.v("x").dtype);
  int ix = ctx.input("x"), id = ctx.vid("x");
  // dead-column skipping: a forward slice reads a prefix of its axis of x; a reversed one, all of it
  ctx.column_rule = [g, id](int axis, int64_t len, std::vector<std::pair<int, Region>>* in, std::string* why) {
    if (g.step[axis] < 0) {
      *why = "slice_by_index reverses axis " + std::to_string(g.in_axis[axis]);
      return false;
    }
    in->push_back({id, Region::prefix((int)g.in_axis[axis], g.begin[axis] + (len - 1) * g.step[axis] + 1)});
    return true;
  };
  return [=](const RunArgs& a) { cpu::kernels::strided_copy(a.in[ix], a.out, es, g.offset, g.strides, g.copy_shape); };
}

// ---- slice_by_size --------------------------------------------------------------------------------------

void slice_by_size_geometry(OpCtx& ctx, std::vector<int64_t>* begin, Shape* out) {
  const Value& x = ctx.v("x");
  int r = x.rank();
  auto b = ctx.ivec("begin"), sz = ctx.ivec("size");
  if ((int)b.size() != r || (int)sz.size() != r) ctx.fail("begin and size need " + std::to_string(r) + " entries (rank of x)");
  out->clear();
  for (int i = 0; i < r; ++i) {
    int64_t d = x.shape[i];
    if (b[i] < 0) b[i] += d;
    if (b[i] < 0 || b[i] >= d) ctx.fail("begin[" + std::to_string(i) + "] is out of range for dim " + std::to_string(d));
    int64_t s = sz[i] == -1 ? d - b[i] : sz[i];
    if (s < 1 || b[i] + s > d)
      ctx.fail("size[" + std::to_string(i) + "] = " + std::to_string(sz[i]) + " from begin " + std::to_string(b[i]) + " exceeds dim " + std::to_string(d));
    out->push_back(s);
  }
  *begin = b;
}

void slice_by_size_infer(OpCtx& ctx) {
  std::vector<int64_t> b;
  slice_by_size_geometry(ctx, &b, &ctx.out_shape);
  ctx.out_dtype = ctx.v("x").dtype;
}

RunFn slice_by_size_lower(OpCtx& ctx) {
  const Value& x = ctx.v("x");
  std::vector<int64_t> b;
  Shape out;
  slice_by_size_geometry(ctx, &b, &out);
  std::vector<int64_t> xs = dense_strides(x.shape);
  int64_t off = 0;
  for (size_t i = 0; i < b.size(); ++i) off += b[i] * xs[i];
  size_t es = storage_size(x.dtype);
  int ix = ctx.input("x");
  // C35: on pre-A16 chips a width-axis (last axis) slice with begin != 0 takes a crop-DMA path that
  // saturates |x| > 4094.
  bool clamp = ctx.profile().legacy_chip() && !b.empty() && b.back() != 0 && dtype_is_float(x.dtype);
  int64_t n = shape_numel(out);
  std::string name = ctx.st.out;
  // A prefix of the result straight into its compact form (sim/compact.h): decode's live column of an
  // input unpadded from C04's width.
  if (!clamp && es == 2)
    ctx.run_compact = [=](const RunArgs& a, int axis, int64_t len, const f16* const*, f16* dst) {
      Shape sub = out;
      sub[(size_t)axis] = len;
      cpu::kernels::strided_copy(a.in[ix], dst, es, off, xs, sub);
    };
  return [=](const RunArgs& a) {
    cpu::kernels::strided_copy(a.in[ix], a.out, es, off, xs, out);
    if (!clamp) return;
    f16* y = a.o<f16>();
    const f16 lim = f32_to_f16(4094.0f);
    int64_t changed = 0;
    for (int64_t i = 0; i < n; ++i) {
      uint16_t m = y[i] & 0x7fffu;
      if (m > lim && m <= 0x7c00u) { y[i] = (f16)((y[i] & 0x8000u) | lim); ++changed; }
    }
    if (changed && a.warn)
      a.warn->warn("C35", "slice_by_size '" + name + "' on the width axis with begin != 0 saturated " +
                              std::to_string(changed) + " values to +-4094 (pre-A16 crop-DMA path)");
  };
}

// ---- concat -------------------------------------------------------------------------------------------

void concat_infer(OpCtx& ctx) {
  std::vector<int> ids = ctx.tuple("values");
  const Value& v0 = ctx.env.value(ids[0]);
  int r = v0.rank();
  if (r == 0) ctx.fail("values must have rank >= 1");
  int ax = ctx.norm_axis(ctx.i64("axis"), r, "axis");
  bool inter = ctx.flag("interleave", false);
  Shape out = v0.shape;
  out[ax] = 0;
  for (int id : ids) {
    const Value& v = ctx.env.value(id);
    if (v.dtype != v0.dtype) ctx.fail("values '" + v0.name + "' (" + dtype_name(v0.dtype) + ") and '" + v.name + "' (" + dtype_name(v.dtype) + ") differ in dtype");
    bool same = v.rank() == r;
    for (int i = 0; same && i < r; ++i) if (i != ax && v.shape[i] != v0.shape[i]) same = false;
    if (!same || (inter && v.shape != v0.shape))
      ctx.fail("values '" + v0.name + "' " + shape_str(v0.shape) + " and '" + v.name + "' " + shape_str(v.shape) +
               (inter ? " must have equal shapes (interleave)" : " differ outside axis " + std::to_string(ax)));
    out[ax] += v.shape[ax];
  }
  ctx.out_dtype = v0.dtype;
  ctx.out_shape = out;
}

RunFn concat_lower(OpCtx& ctx) {
  std::vector<int> ids = ctx.tuple("values");
  const Value& v0 = ctx.env.value(ids[0]);
  int ax = ctx.norm_axis(ctx.i64("axis"), v0.rank(), "axis");
  bool inter = ctx.flag("interleave", false);
  size_t es = storage_size(v0.dtype);
  int64_t outer = prod(v0.shape, 0, ax), inner = prod(v0.shape, ax + 1, v0.rank()) * (int64_t)es;
  std::vector<int> slots;
  std::vector<int64_t> lens;
  for (int id : ids) {
    slots.push_back(ctx.input_id(id));  // a value listed twice maps to one slot: fine
    lens.push_back(ctx.env.value(id).shape[ax]);
  }
  int64_t total = 0;
  for (auto l : lens) total += l;
  return [=](const RunArgs& a) {
    uint8_t* y = (uint8_t*)a.out;
    size_t k = slots.size();
    for (int64_t o = 0; o < outer; ++o) {
      if (inter) {  // y[o, j*k + i] = values[i][o, j]
        for (int64_t j = 0; j < lens[0]; ++j)
          for (size_t i = 0; i < k; ++i)
            std::memcpy(y + ((o * total) + j * (int64_t)k + (int64_t)i) * inner,
                        (const uint8_t*)a.in[slots[i]] + (o * lens[0] + j) * inner, (size_t)inner);
      } else {
        int64_t at = 0;
        for (size_t i = 0; i < k; ++i) {
          std::memcpy(y + (o * total + at) * inner, (const uint8_t*)a.in[slots[i]] + o * lens[i] * inner, (size_t)(lens[i] * inner));
          at += lens[i];
        }
      }
    }
  };
}

// ---- split --------------------------------------------------------------------------------------------
// MIL split has one result per part; mil::Stmt carries a single result, so only a one-part split
// (a copy) can be expressed. The parts are still validated as coremltools does.

void split_infer(OpCtx& ctx) {
  const Value& x = ctx.v("x");
  if (x.rank() == 0) ctx.fail("x must have rank >= 1");
  int ax = ctx.norm_axis(ctx.i64("axis"), x.rank(), "axis");
  int64_t d = x.shape[ax], parts;
  if (ctx.has("split_sizes")) {
    auto ss = ctx.ivec("split_sizes");
    int64_t sum = 0;
    for (auto s : ss) sum += s;
    if (sum != d) ctx.fail("split_sizes sum to " + std::to_string(sum) + ", axis has " + std::to_string(d));
    parts = (int64_t)ss.size();
  } else if (ctx.has("num_splits")) {
    parts = ctx.i64("num_splits");
    if (parts < 1 || d % parts) ctx.fail("num_splits " + std::to_string(parts) + " does not divide dim " + std::to_string(d));
  } else {
    ctx.fail("needs num_splits or split_sizes");
  }
  if (parts != 1)
    ctx.fail("split into " + std::to_string(parts) + " parts needs a multi-result statement, which this MIL front end does not represent; use slice_by_size");
  ctx.out_dtype = x.dtype;
  ctx.out_shape = x.shape;
}
RunFn split_lower(OpCtx& ctx) { return copy_step(ctx, "x"); }

}  // namespace orion::sim::ops
