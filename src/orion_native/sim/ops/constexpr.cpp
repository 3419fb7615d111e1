// The constexpr decompression ops (MIL puts their parameters in the attribute list): a compile-time
// constant computed from compressed operands — constexpr_affine_dequantize (iOS16: int8/uint8 data,
// per-tensor or per-axis scale/zero_point), constexpr_lut_to_dense (iOS18: uint1..uint8 indices into
// fp16 tables per block of the weight) and constexpr_blockwise_shift_scale (iOS18: int4/uint4/int8/uint8
// data, scale and optional offset per block). Each result stays compressed in the plan
// (cpu::kernels::CompressedWeight); a 1x1 conv reads it compressed, other consumers get it materialised.
// Arithmetic as coremltools' decompress: fp16(float(data - offset) * scale), exact before the one
// rounding for integer offsets (orion.quant.common.shift_scale); a LUT is a pure lookup.
#include "sim/ops/op.h"
#include "sim/shared_weights.h"

namespace orion::sim::ops {

namespace {

using cpu::kernels::CompressedWeight;

// The parameter grid of `pshape` over `dshape` (same rank, each dim dividing) as CompressedWeight's
// 2-D blocks over [dshape[0], rest]: blocks may vary along dim 0 and along one other dim, with unit
// dims before it. Other layouts have no panel form: the simulator refuses them by name.
void grid(OpCtx& ctx, const Shape& dshape, const Shape& pshape, const std::string& what, CompressedWeight* w) {
  const int r = (int)dshape.size();
  if ((int)pshape.size() != r) ctx.fail(what + " must have the rank of the data (" + std::to_string(r) + "), got " + shape_str(pshape));
  for (int i = 0; i < r; ++i)
    if (pshape[i] < 1 || dshape[i] % pshape[i])
      ctx.fail(what + " " + shape_str(pshape) + ": each dim must divide the data's " + shape_str(dshape) + " (dim " +
               std::to_string(i) + ")");
  w->M = dshape[0];
  w->K = prod(dshape, 1, r);
  w->rows_per_block = dshape[0] / pshape[0];
  int axis = -1;
  for (int i = 1; i < r; ++i)
    if (pshape[i] > 1) {
      if (axis >= 0)
        ctx.fail(what + " " + shape_str(pshape) + " varies along dims " + std::to_string(axis) + " and " + std::to_string(i) +
                 " besides dim 0; the simulator supports blocks along dim 0 and one other dim");
      axis = i;
    }
  if (axis < 0) {
    w->blocks_per_row = 1;
    w->cols_per_block = w->K;
    return;
  }
  for (int i = 1; i < axis; ++i)
    if (dshape[i] != 1)
      ctx.fail(what + " " + shape_str(pshape) + " varies along dim " + std::to_string(axis) + " after dim " + std::to_string(i) +
               " of size " + std::to_string(dshape[i]) + "; the simulator supports blocks along dim 0 and the first non-unit dim");
  w->blocks_per_row = pshape[axis];
  w->cols_per_block = w->K / pshape[axis];
}

// Shared ending: in check_program nothing is decoded (the data may be a borrowed, still packed view);
// otherwise the result is the compressed weight itself.
void finish(OpCtx& ctx, const Value& data, std::shared_ptr<CompressedWeight> w) {
  auto cd = std::make_shared<ConstData>();
  if (ctx.env.check_only()) {  // what the plan would hold: packed codes + one table / scale+offset per block
    const size_t blocks = (size_t)(w->M / w->rows_per_block * w->blocks_per_row);
    cd->elided = true;
    cd->nbytes = (size_t)((w->M + 15) / 16 * w->K * 2 * w->bits) + 8 +
                 blocks * (w->kind == CompressedWeight::Kind::lut ? sizeof(f16) << w->bits : 2 * sizeof(float));
    ctx.folded = cd;
    return;
  }
  w->set_codes(data.cdata->bytes.data());
  cd->compressed = shared_compressed(std::move(w));  // one copy for every plan baking the same weight
  ctx.folded = cd;
}

std::vector<float> float_vec(const Value& v) {
  std::vector<float> out;
  for (double d : v.floats()) out.push_back((float)d);
  return out;
}

}  // namespace

// quantized_data int8/uint8; scale (fp) and zero_point (the data's dtype) scalars or rank-1 along axis.
void constexpr_affine_dequantize_infer(OpCtx& ctx) {
  const Value& q = ctx.c("quantized_data");
  if (q.dtype != DType::int8 && q.dtype != DType::uint8)
    ctx.fail("quantized_data must be int8 or uint8, got " + type_str(q.dtype, q.shape));
  if (q.rank() < 1) ctx.fail("quantized_data must have rank >= 1, got " + type_str(q.dtype, q.shape));
  const Value& s = ctx.c("scale");
  const Value& z = ctx.c("zero_point");
  if (!dtype_is_float(s.dtype)) ctx.fail("scale must be fp16 or fp32, got " + type_str(s.dtype, s.shape));
  if (z.dtype != q.dtype) ctx.fail(std::string("zero_point must be ") + dtype_name(q.dtype) + " like quantized_data, got " + dtype_name(z.dtype));
  int ax = ctx.norm_axis(ctx.i64("axis"), q.rank(), "axis");
  const int64_t n = q.shape[ax];
  for (const Value* v : {&s, &z})
    if (v->rank() > 1 || (v->numel() != 1 && v->numel() != n))
      ctx.fail("'" + v->name + "' must be a scalar or rank-1 with " + std::to_string(n) + " values (quantized_data dim " +
               std::to_string(ax) + "), got " + shape_str(v->shape));
  ctx.out_dtype = s.dtype;
  ctx.out_shape = q.shape;
  const bool per_axis = s.numel() > 1 || z.numel() > 1;
  Shape pshape(q.rank(), 1);
  if (per_axis) pshape[ax] = n;
  auto w = std::make_shared<CompressedWeight>();
  w->kind = CompressedWeight::Kind::shift_scale;
  w->bits = 8;
  w->is_signed = q.dtype == DType::int8;
  grid(ctx, q.shape, pshape, "scale/zero_point", w.get());
  if (ctx.env.check_only()) return finish(ctx, q, w);
  std::vector<float> sv = float_vec(s);
  std::vector<int64_t> zv = z.ints();
  const int64_t blocks = per_axis ? n : 1;
  for (int64_t b = 0; b < blocks; ++b) {
    w->scale.push_back(sv[sv.size() == 1 ? 0 : b]);
    w->offset.push_back((float)zv[zv.size() == 1 ? 0 : b]);
  }
  finish(ctx, q, w);
}

// indices uint{1,2,3,4,6,8} of the output's shape; lut [G_0, ..., G_{r-1}, 2^bits, VECTOR_SIZE = 1].
void constexpr_lut_to_dense_infer(OpCtx& ctx) {
  const Value& ix = ctx.c("indices");
  const Value& lut = ctx.c("lut");
  const DType d = ix.dtype;
  if (d != DType::uint1 && d != DType::uint2 && d != DType::uint3 && d != DType::uint4 && d != DType::uint6 && d != DType::uint8)
    ctx.fail("indices must be uint1, uint2, uint3, uint4, uint6 or uint8, got " + type_str(d, ix.shape) +
             " (the iOS16 form with a packed uint8 vector and 'shape' is not supported; use the iOS18 form)");
  if (ix.rank() < 1) ctx.fail("indices must have rank >= 1");
  if (!dtype_is_float(lut.dtype)) ctx.fail("lut must be fp16 or fp32, got " + type_str(lut.dtype, lut.shape));
  const int r = ix.rank();
  const unsigned bits = dtype_bits(d);
  const int64_t entries = int64_t(1) << bits;
  if (lut.rank() != r + 2 || lut.shape[r] != entries)
    ctx.fail("lut must have rank " + std::to_string(r + 2) + " = indices rank + 2, shaped [groups per dim..., " +
             std::to_string(entries) + " (2^" + std::to_string(bits) + " entries), vector size]; got " + shape_str(lut.shape));
  if (lut.shape[r + 1] != 1 || ctx.has("vector_axis"))
    ctx.fail("vector palettization (vector size " + std::to_string(lut.shape[r + 1]) +
             ", vector_axis) is not supported by the simulator; use scalar LUTs (last lut dim 1)");
  ctx.out_dtype = lut.dtype;
  ctx.out_shape = ix.shape;
  auto w = std::make_shared<CompressedWeight>();
  w->kind = CompressedWeight::Kind::lut;
  w->bits = bits;
  grid(ctx, ix.shape, Shape(lut.shape.begin(), lut.shape.begin() + r), "lut", w.get());
  if (ctx.env.check_only()) return finish(ctx, ix, w);
  const std::vector<double> t = lut.floats();  // fp16 values (fp32 tables are stored rounded: C37)
  w->lut.resize(t.size());
  for (size_t i = 0; i < t.size(); ++i) w->lut[i] = f32_to_f16((float)t[i]);
  finish(ctx, ix, w);
}

// data int4/uint4/int8/uint8; scale (fp) of the data's rank, each dim dividing; offset? like scale, of
// the data's dtype.
void constexpr_blockwise_shift_scale_infer(OpCtx& ctx) {
  const Value& data = ctx.c("data");
  const Value& s = ctx.c("scale");
  const DType d = data.dtype;
  if (d != DType::int4 && d != DType::uint4 && d != DType::int8 && d != DType::uint8)
    ctx.fail("data must be int4, uint4, int8 or uint8 in the simulator, got " + type_str(d, data.shape) +
             " (float data is valid MIL but not a compressed weight)");
  if (data.rank() < 1) ctx.fail("data must have rank >= 1");
  if (!dtype_is_float(s.dtype)) ctx.fail("scale must be fp16 or fp32, got " + type_str(s.dtype, s.shape));
  if (ctx.has("offset")) {
    const Value& o = ctx.c("offset");
    if (o.shape != s.shape) ctx.fail("offset must have the shape of scale " + shape_str(s.shape) + ", got " + shape_str(o.shape));
    if (o.dtype != d)
      ctx.fail(std::string("offset must be ") + dtype_name(d) + " like data, got " + dtype_name(o.dtype) +
               " (float offsets are valid MIL; the simulator takes integer offsets, which keep data - offset exact)");
  }
  ctx.out_dtype = s.dtype;
  ctx.out_shape = data.shape;
  auto w = std::make_shared<CompressedWeight>();
  w->kind = CompressedWeight::Kind::shift_scale;
  w->bits = dtype_bits(d);
  w->is_signed = dtype_is_signed(d);
  grid(ctx, data.shape, s.shape, "scale", w.get());
  if (ctx.env.check_only()) return finish(ctx, data, w);
  w->scale = float_vec(s);
  if (ctx.has("offset"))
    for (int64_t v : ctx.c("offset").ints()) w->offset.push_back((float)v);
  finish(ctx, data, w);
}

std::shared_ptr<const cpu::kernels::PackedA> packed_const_weight(OpCtx& ctx, const std::string& p, int64_t M,
                                                                 int64_t K) {
  const Value& v = ctx.v(p);
  ctx.build_only_inputs.insert(ctx.vid(p));  // the step reads its packed copy (or the compressed codes)
  if (v.cdata->compressed && v.cdata->compressed->M == M && v.cdata->compressed->K == K) {
    ctx.compressed_inputs.insert(ctx.vid(p));
    return std::make_shared<const cpu::kernels::PackedA>(cpu::kernels::pack_a(v.cdata->compressed, M, K));
  }
  ctx.env.materialize(ctx.vid(p));
  return shared_packed((const f16*)ctx.v(p).cdata->bytes.data(), M, K);  // shared with plans baking it too
}

}  // namespace orion::sim::ops
