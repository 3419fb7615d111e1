// Affine quantisation (iOS17+): quantize (float -> int8/uint8) and dequantize. The constexpr ops
// (compressed weights) are in constexpr.cpp.
#include <algorithm>
#include <cmath>

#include "sim/ops/op.h"
#include "cpu/threadpool.h"

namespace orion::sim::ops {

namespace {

// Per-tensor (scalar) or per-channel (rank-1 along `axis`) parameters.
struct Affine {
  std::vector<double> scale;
  std::vector<int64_t> zp;  // empty = 0
  int64_t dim = 1, inner = 1;  // element i uses channel (i / inner) % dim
  size_t ch(int64_t i) const { return scale.size() == 1 ? 0 : (size_t)((i / inner) % dim); }
  int64_t z(int64_t i) const { return zp.empty() ? 0 : zp[zp.size() == 1 ? 0 : ch(i)]; }
};

// The checks read only types and shapes (infer); `values` also reads the scale and zero point (lower).
Affine affine(OpCtx& ctx, const Value& x, const char* data_name, DType zp_dtype, bool values) {
  Affine a;
  const Value& s = ctx.c("scale");
  if (!dtype_is_float(s.dtype)) ctx.fail("scale must be fp16 or fp32, got " + type_str(s.dtype, s.shape));
  const bool has_zp = ctx.has("zero_point");
  bool per_axis = s.numel() > 1 || (has_zp && ctx.c("zero_point").numel() > 1);
  if (s.rank() > 1) ctx.fail("scale must be a scalar or rank-1, got " + shape_str(s.shape));
  if (values) a.scale = s.floats();
  if (has_zp) {
    const Value& z = ctx.c("zero_point");
    if (z.dtype != zp_dtype) ctx.fail(std::string("zero_point must be ") + dtype_name(zp_dtype) + ", got " + dtype_name(z.dtype));
    if (z.rank() > 1) ctx.fail("zero_point must be a scalar or rank-1, got " + shape_str(z.shape));
    if (values) a.zp = z.ints();
  }
  if (per_axis || ctx.has("axis")) {
    if (!ctx.has("axis")) ctx.fail("per-channel scale/zero_point needs axis");
    int ax = ctx.norm_axis(ctx.i64("axis"), x.rank(), "axis");
    a.dim = x.shape[ax];
    a.inner = prod(x.shape, ax + 1, x.rank());
    for (int64_t n : {s.numel(), has_zp ? ctx.c("zero_point").numel() : 0})
      if (n > 1 && n != a.dim)
        ctx.fail(std::string("per-channel parameters need ") + std::to_string(a.dim) + " values (dim of axis in '" + data_name + "'), got " + std::to_string(n));
  }
  return a;
}

void range_of(DType d, int64_t* lo, int64_t* hi) {
  *lo = d == DType::int8 ? -128 : 0;
  *hi = d == DType::int8 ? 127 : 255;
}

}  // namespace

// q = clamp(round_half_even(x / scale) + zero_point): coremltools' documented formula and its constant
// folding (optimize._utils.quantize_by_scale_and_zp: np.around, then + zero_point, then clip). Rounding
// after adding an odd zero point would move ties (2.5 + 1 -> 4 instead of 3). x / scale in fp32 rounds
// like the exact quotient (two fp16 values are never within half an fp32 ulp of a tie unless on it).
// NaN -> 0 (not documented; coremltools' cast of a NaN is undefined).
void quantize_infer(OpCtx& ctx) {
  const Value& x = ctx.expect_float("input");
  std::string od = ctx.str("output_dtype", "");
  if (od != "int8" && od != "uint8") ctx.fail("output_dtype must be 'int8' or 'uint8', got '" + od + "'");
  DType out = od == "int8" ? DType::int8 : DType::uint8;
  if (ctx.c("scale").dtype != x.dtype) ctx.fail("scale must have the dtype of input");
  affine(ctx, x, "input", out, false);
  ctx.out_dtype = out;
  ctx.out_shape = x.shape;
}

RunFn quantize_lower(OpCtx& ctx) {
  const Value& x = ctx.v("input");
  const Affine af = affine(ctx, x, "input", ctx.out_dtype, true);
  DType out = ctx.out_dtype;
  int64_t lo, hi, n = x.numel();
  range_of(out, &lo, &hi);
  int ix = ctx.input("input");
  ctx.flops = 2.0 * n;
  return [=](const RunArgs& a) {
    const f16* src = a.at<f16>(ix);
    cpu::parallel_for(n, 16384, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        float v = f16_to_f32(src[i]) / (float)af.scale[af.ch(i)];
        float r = std::nearbyint(v) + (float)af.z(i);
        int64_t q = std::isnan(v) ? 0 : (int64_t)std::max(std::min(r, (float)hi), (float)lo);
        store_int(a.out, out, i, q);
      }
    });
  };
}

// y = (q - zero_point) * scale
void dequantize_infer(OpCtx& ctx) {
  const Value& q = ctx.v("input");
  if (q.dtype != DType::int8 && q.dtype != DType::uint8) ctx.fail("input must be int8 or uint8, got " + type_str(q.dtype, q.shape));
  affine(ctx, q, "input", q.dtype, false);
  ctx.out_dtype = ctx.c("scale").dtype;
  ctx.out_shape = q.shape;
}

RunFn dequantize_lower(OpCtx& ctx) {
  const Value& q = ctx.v("input");
  const Affine af = affine(ctx, q, "input", q.dtype, true);
  DType qd = q.dtype;
  int64_t n = q.numel();
  int ix = ctx.input("input");
  ctx.flops = 2.0 * n;
  return [=](const RunArgs& a) {
    f16* y = a.o<f16>();
    cpu::parallel_for(n, 16384, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i)
        y[i] = f32_to_f16((float)(load_int(a.in[ix], qd, i) - af.z(i)) * (float)af.scale[af.ch(i)]);
    });
  };
}

}  // namespace orion::sim::ops
