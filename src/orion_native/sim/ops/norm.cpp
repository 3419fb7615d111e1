// layer_norm: y = (x - mean) / sqrt(var + epsilon) * gamma + beta over `axes` (fp32 statistics, one
// fp16 rounding). Non-adjacent axes are moved to the end by a transpose and back afterwards.
#include <algorithm>
#include <cmath>

#include "cpu/kernels/kernels.h"
#include "sim/ops/op.h"
#include "cpu/threadpool.h"

namespace orion::sim::ops {

namespace {

std::vector<int> norm_axes(OpCtx& ctx, const Shape& s) {
  std::vector<int> axes;
  std::vector<int> sorted = ctx.axes_param((int)s.size(), &axes);
  if (sorted != axes && (ctx.has("gamma") || ctx.has("beta"))) ctx.fail("axes must be increasing when gamma or beta is given");
  if (axes.empty()) ctx.fail("axes must not be empty");
  return sorted;
}

// rows of [outer, L, inner]: statistics over L for every (outer, inner).
void layer_norm_rows(const f16* x, f16* y, const f16* gamma, const f16* beta, float eps, int64_t outer, int64_t L,
                     int64_t inner) {
  cpu::parallel_for(outer, 1, [&](int64_t ob, int64_t oe) {
    std::vector<float> mean((size_t)inner), var((size_t)inner);
    for (int64_t o = ob; o < oe; ++o) {
      const f16* xo = x + o * L * inner;
      f16* yo = y + o * L * inner;
      std::fill(mean.begin(), mean.end(), 0.0f);
      std::fill(var.begin(), var.end(), 0.0f);
      for (int64_t l = 0; l < L; ++l)
        for (int64_t i = 0; i < inner; ++i) mean[i] += f16_to_f32(xo[l * inner + i]);
      for (auto& m : mean) m /= (float)L;
      for (int64_t l = 0; l < L; ++l)
        for (int64_t i = 0; i < inner; ++i) {
          float d = f16_to_f32(xo[l * inner + i]) - mean[i];
          var[i] += d * d;
        }
      for (auto& v : var) v = 1.0f / std::sqrt(v / (float)L + eps);
      for (int64_t l = 0; l < L; ++l) {
        float g = gamma ? f16_to_f32(gamma[l]) : 1.0f, b = beta ? f16_to_f32(beta[l]) : 0.0f;
        for (int64_t i = 0; i < inner; ++i)
          yo[l * inner + i] = f32_to_f16((f16_to_f32(xo[l * inner + i]) - mean[i]) * var[i] * g + b);
      }
    }
  });
}

}  // namespace

void layer_norm_infer(OpCtx& ctx) {
  const Value& x = ctx.expect_float("x");
  std::vector<int> axes = norm_axes(ctx, x.shape);
  Shape gshape;
  for (int a : axes) gshape.push_back(x.shape[a]);
  for (const char* p : {"gamma", "beta"}) {
    if (!ctx.has(p)) continue;
    const Value& g = ctx.expect_float(p);
    if (g.shape != gshape) ctx.fail(std::string(p) + " must have shape " + shape_str(gshape) + " (x.shape[axes]), got " + shape_str(g.shape));
    ctx.expect_same_dtype("x", p);
  }
  ctx.f64("epsilon", 1e-5);
  ctx.out_dtype = x.dtype;
  ctx.out_shape = x.shape;
}

RunFn layer_norm_lower(OpCtx& ctx) {
  const Value& x = ctx.v("x");
  const Shape xs = x.shape;
  std::vector<int> axes = norm_axes(ctx, xs);
  float eps = f16_to_f32(f32_to_f16((float)ctx.f64("epsilon", 1e-5)));
  int ix = ctx.input("x");
  int ig = ctx.has("gamma") ? ctx.input("gamma") : -1, ib = ctx.has("beta") ? ctx.input("beta") : -1;
  int r = (int)xs.size();
  bool adjacent = axes.back() - axes.front() + 1 == (int)axes.size();
  ctx.flops = 8.0 * x.numel();
  if (adjacent) {
    int64_t outer = prod(xs, 0, axes.front()), L = prod(xs, axes.front(), axes.back() + 1), inner = prod(xs, axes.back() + 1, r);
    return [=](const RunArgs& a) {
      layer_norm_rows(a.at<f16>(ix), a.o<f16>(), ig >= 0 ? a.at<f16>(ig) : nullptr, ib >= 0 ? a.at<f16>(ib) : nullptr,
                      eps, outer, L, inner);
    };
  }
  std::vector<int64_t> perm, inv(r);
  for (int i = 0; i < r; ++i) if (!std::binary_search(axes.begin(), axes.end(), i)) perm.push_back(i);
  for (int a : axes) perm.push_back(a);
  Shape ts(r);
  for (int i = 0; i < r; ++i) { ts[i] = xs[perm[i]]; inv[perm[i]] = i; }
  int64_t L = 1;
  for (int a : axes) L *= xs[a];
  int64_t outer = x.numel() / L, n = x.numel();
  ctx.scratch_bytes = 2 * n * (int64_t)sizeof(f16);
  return [=](const RunArgs& a) {
    f16* t0 = (f16*)a.scratch;
    f16* t1 = t0 + n;
    cpu::kernels::transpose(a.at<f16>(ix), t0, sizeof(f16), xs, perm);
    layer_norm_rows(t0, t1, ig >= 0 ? a.at<f16>(ig) : nullptr, ib >= 0 ? a.at<f16>(ib) : nullptr, eps, outer, L, 1);
    cpu::kernels::transpose(t1, a.o<f16>(), sizeof(f16), ts, inv);
  };
}

}  // namespace orion::sim::ops
