// reduce_sum/mean/max/min/prod (axes, keep_dims) and softmax. Reductions over several axes run as
// one kernel call: directly when the reduced axes are adjacent in memory (size-1 axes ignored),
// else after a transpose that moves them to the end — so there is exactly one fp16 rounding (C37).
#include <algorithm>

#include "cpu/kernels/kernels.h"
#include "sim/ops/op.h"

namespace orion::sim::ops {

namespace {

struct ReducePlan {
  std::vector<int> axes;  // sorted, unique
  bool transpose = false;
  std::vector<int64_t> perm;
  int64_t outer = 1, len = 1, inner = 1;
};

std::vector<int> reduce_axes(OpCtx& ctx, const Shape& s) {
  return ctx.axes_param((int)s.size());
}

ReducePlan plan_reduce(const Shape& s, const std::vector<int>& axes) {
  ReducePlan p;
  p.axes = axes;
  int r = (int)s.size();
  std::vector<bool> red(r, false);
  for (int a : axes) red[a] = true;
  // Position of each non-trivial axis; the reduced ones must be one run.
  int first = -1, last = -1;
  bool run_ok = true;
  for (int i = 0; i < r; ++i) {
    if (s[i] == 1 || !red[i]) continue;
    if (first < 0) first = i;
    last = i;
  }
  for (int i = first; first >= 0 && i <= last; ++i)
    if (!red[i] && s[i] != 1) run_ok = false;
  if (run_ok) {
    if (first < 0) { p.outer = shape_numel(s); return p; }  // only size-1 axes reduced
    p.outer = prod(s, 0, first);
    p.len = prod(s, first, last + 1);
    p.inner = prod(s, last + 1, r);
    return p;
  }
  p.transpose = true;
  for (int i = 0; i < r; ++i) if (!red[i]) p.perm.push_back(i);
  for (int a : axes) p.perm.push_back(a);
  p.len = 1;
  for (int a : axes) p.len *= s[a];
  p.outer = shape_numel(s) / p.len;
  p.inner = 1;
  return p;
}

cpu::kernels::Reduce reduce_kind(const std::string& op) {
  if (op == "reduce_sum") return cpu::kernels::Reduce::sum;
  if (op == "reduce_mean") return cpu::kernels::Reduce::mean;
  if (op == "reduce_max") return cpu::kernels::Reduce::max;
  if (op == "reduce_min") return cpu::kernels::Reduce::min;
  return cpu::kernels::Reduce::prod;
}

}  // namespace

void reduce_infer(OpCtx& ctx) {
  const Value& x = ctx.expect_float("x");
  std::vector<int> axes = reduce_axes(ctx, x.shape);
  bool keep = ctx.flag("keep_dims", false);
  Shape out;
  for (int i = 0; i < x.rank(); ++i) {
    bool red = std::binary_search(axes.begin(), axes.end(), i);
    if (!red) out.push_back(x.shape[i]);
    else if (keep) out.push_back(1);
  }
  ctx.out_dtype = x.dtype;
  ctx.out_shape = out;
}

RunFn reduce_lower(OpCtx& ctx) {
  const Value& x = ctx.v("x");
  const ReducePlan p = plan_reduce(x.shape, reduce_axes(ctx, x.shape));
  const Shape xs = x.shape;
  cpu::kernels::Reduce op = reduce_kind(ctx.st.op);
  int ix = ctx.input("x");
  ctx.flops = (double)x.numel();
  if (p.transpose) ctx.scratch_bytes = x.numel() * (int64_t)sizeof(f16);
  return [=](const RunArgs& a) {
    const f16* src = a.at<f16>(ix);
    if (p.transpose) {
      cpu::kernels::transpose(src, a.scratch, sizeof(f16), xs, p.perm);
      src = (const f16*)a.scratch;
    }
    cpu::kernels::reduce(op, src, a.o<f16>(), p.outer, p.len, p.inner);
  };
}

// ---- softmax --------------------------------------------------------------------------------------

void softmax_infer(OpCtx& ctx) {
  const Value& x = ctx.expect_float("x");
  if (x.rank() < 1) ctx.fail("x must have rank >= 1");
  ctx.norm_axis(ctx.i64("axis", -1), x.rank(), "axis");
  ctx.out_dtype = x.dtype;
  ctx.out_shape = x.shape;
}

RunFn softmax_lower(OpCtx& ctx) {
  const Value& x = ctx.v("x");
  int ax = ctx.norm_axis(ctx.i64("axis", -1), x.rank(), "axis");
  int64_t outer = prod(x.shape, 0, ax), len = x.shape[ax], inner = prod(x.shape, ax + 1, x.rank());
  int ix = ctx.input("x");
  ctx.flops = 5.0 * x.numel();
  // A prefix along an axis before the softmax axis is a run of whole rows in each block of the axes
  // before it; after it (strided rows), the whole tensor is computed.
  const Shape xs = x.shape;
  ctx.run_prefix = [=](const RunArgs& a, int p, int64_t n) {
    if (p > ax) return cpu::kernels::softmax(a.at<f16>(ix), a.o<f16>(), outer, len, inner);
    int64_t blocks = prod(xs, 0, p), rows = n * prod(xs, p + 1, ax), step = prod(xs, p, ax) * len * inner;
    for (int64_t b = 0; b < blocks; ++b)
      cpu::kernels::softmax(a.at<f16>(ix) + b * step, a.o<f16>() + b * step, rows, len, inner);
  };
  return [=](const RunArgs& a) { cpu::kernels::softmax(a.at<f16>(ix), a.o<f16>(), outer, len, inner); };
}

}  // namespace orion::sim::ops
