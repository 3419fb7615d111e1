// Indexing and masking ops the kernels do not cover: gather, select, band_part (small loops).
#include <cstring>

#include "common/error.h"
#include "sim/ops/op.h"
#include "cpu/threadpool.h"

namespace orion::sim::ops {

// ---- gather: out = x[:axis] + indices.shape + x[axis+1:] ------------------------------------------

void gather_infer(OpCtx& ctx) {
  const Value& x = ctx.v("x");
  const Value& ind = ctx.v("indices");
  if (!dtype_is_int(ind.dtype)) ctx.fail("indices must be an integer tensor, got " + type_str(ind.dtype, ind.shape));
  if (x.rank() < 1) ctx.fail("x must have rank >= 1");
  int ax = ctx.norm_axis(ctx.i64("axis", 0), x.rank(), "axis");
  if (ctx.i64("batch_dims", 0) != 0) ctx.fail("batch_dims != 0 is not supported by the simulator");
  ctx.flag("validate_indices", false);
  Shape out(x.shape.begin(), x.shape.begin() + ax);
  out.insert(out.end(), ind.shape.begin(), ind.shape.end());
  out.insert(out.end(), x.shape.begin() + ax + 1, x.shape.end());
  ctx.out_dtype = x.dtype;
  ctx.out_shape = out;
}

RunFn gather_lower(OpCtx& ctx) {
  const Value& x = ctx.v("x");
  const Value& ind = ctx.v("indices");
  int ax = ctx.norm_axis(ctx.i64("axis", 0), x.rank(), "axis");
  int64_t outer = prod(x.shape, 0, ax), A = x.shape[ax];
  size_t chunk = (size_t)prod(x.shape, ax + 1, x.rank()) * storage_size(x.dtype);
  int64_t ni = ind.numel();
  DType idt = ind.dtype;
  int ix = ctx.input("x"), ii = ctx.input("indices");
  std::string name = ctx.st.out;
  return [=](const RunArgs& a) {
    const uint8_t* src = (const uint8_t*)a.in[ix];
    uint8_t* dst = (uint8_t*)a.out;
    for (int64_t t = 0; t < ni; ++t) {
      int64_t idx = load_int(a.in[ii], idt, t);
      if (idx < 0) idx += A;
      if (idx < 0 || idx >= A)
        throw_eval(0x1d, "", "gather '" + name + "': index " + std::to_string(load_int(a.in[ii], idt, t)) + " out of range for axis of size " + std::to_string(A));
    }
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t t = 0; t < ni; ++t) {
        int64_t idx = load_int(a.in[ii], idt, t);
        if (idx < 0) idx += A;
        std::memcpy(dst + (o * ni + t) * chunk, src + (o * A + idx) * chunk, chunk);
      }
  };
}

// ---- select: cond ? a : b with three-way broadcasting ---------------------------------------------

void select_infer(OpCtx& ctx) {
  const Value& c = ctx.v("cond");
  const Value& a = ctx.v("a");
  const Value& b = ctx.v("b");
  if (c.dtype != DType::bool_) ctx.fail("cond must be bool, got " + type_str(c.dtype, c.shape));
  ctx.expect_same_dtype("a", "b");
  Shape ab = ctx.broadcast(a.shape, b.shape, "a", "b");
  ctx.out_dtype = a.dtype;
  ctx.out_shape = ctx.broadcast(c.shape, ab, "cond", "a/b");
}

RunFn select_lower(OpCtx& ctx) {
  Shape out = at_least_1d(ctx.out_shape);
  auto cs = broadcast_strides(ctx.v("cond").shape, out), as = broadcast_strides(ctx.v("a").shape, out),
       bs = broadcast_strides(ctx.v("b").shape, out);
  size_t es = storage_size(ctx.out_dtype);
  int ic = ctx.input("cond"), ia = ctx.input("a"), ib = ctx.input("b");
  int64_t n = shape_numel(out);
  int r = (int)out.size();
  return [=](const RunArgs& args) {
    const uint8_t* c = (const uint8_t*)args.in[ic];
    const uint8_t* a = (const uint8_t*)args.in[ia];
    const uint8_t* b = (const uint8_t*)args.in[ib];
    uint8_t* y = (uint8_t*)args.out;
    std::vector<int64_t> idx(r, 0);
    int64_t oc = 0, oa = 0, ob = 0;
    for (int64_t i = 0; i < n; ++i) {
      std::memcpy(y + i * es, c[oc] ? a + oa * es : b + ob * es, es);
      for (int d = r - 1; d >= 0; --d) {
        oc += cs[d]; oa += as[d]; ob += bs[d];
        if (++idx[d] < out[d]) break;
        oc -= cs[d] * out[d]; oa -= as[d] * out[d]; ob -= bs[d] * out[d];
        idx[d] = 0;
      }
    }
  };
}

// ---- band_part: keep the band of the last two axes (lower/upper < 0 = unbounded), zero elsewhere --

void band_part_infer(OpCtx& ctx) {
  const Value& x = ctx.expect_rank_ge("x", 2);
  ctx.i64("lower", -1);
  ctx.i64("upper", -1);
  ctx.out_dtype = x.dtype;
  ctx.out_shape = x.shape;
}

RunFn band_part_lower(OpCtx& ctx) {
  const Value& x = ctx.v("x");
  int64_t lo = ctx.i64("lower", -1), up = ctx.i64("upper", -1);
  int64_t M = x.shape[x.rank() - 2], N = x.shape[x.rank() - 1], batch = x.numel() / (M * N);
  size_t es = storage_size(x.dtype);
  int ix = ctx.input("x");
  return [=](const RunArgs& a) {
    const uint8_t* src = (const uint8_t*)a.in[ix];
    uint8_t* y = (uint8_t*)a.out;
    cpu::parallel_for(batch * M, 64, [&](int64_t rb, int64_t re) {
      for (int64_t r = rb; r < re; ++r) {
        int64_t i = r % M;
        for (int64_t j = 0; j < N; ++j) {
          bool keep = (lo < 0 || i - j <= lo) && (up < 0 || j - i <= up);
          size_t off = (size_t)(r * N + j) * es;
          if (keep) std::memcpy(y + off, src + off, es);
          else std::memset(y + off, 0, es);
        }
      }
    });
  };
}

}  // namespace orion::sim::ops
