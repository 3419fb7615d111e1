// conv: 1-D ([N, C, W]) and 2-D ([N, C, H, W]) convolution with strides, pad_type valid/same/
// same_lower/custom, dilations and groups. 1x1/stride-1/unpadded convs (linear layers, the ANE's
// workhorse) are one batched GEMM per call: y_n[O, S] = W[O, I] x_n[I, S]; everything else goes
// through im2col + GEMM per batch element.
#include <algorithm>
#include <cstring>
#include <memory>

#include "cpu/kernels/kernels.h"
#include "sim/ops/op.h"
#include "cpu/threadpool.h"

namespace orion::sim::ops {

namespace {

struct ConvGeom {
  int64_t N, C, H, W, O, G, KH, KW, SH, SW, DH, DW, PT, PL, HO, WO;
  bool one_by_one() const { return KH == 1 && KW == 1 && SH == 1 && SW == 1 && PT == 0 && PL == 0 && HO == H && WO == W; }
};

int64_t out_len(int64_t in, int64_t k, int64_t s, int64_t d, int64_t pb, int64_t pa) {
  int64_t eff = d * (k - 1) + 1;
  int64_t num = in + pb + pa - eff;
  return num < 0 ? 0 : num / s + 1;
}

// Resolves the geometry from the statement (shared by infer and lower).
ConvGeom geometry(OpCtx& ctx) {
  const Value& x = ctx.expect_float("x");
  const Value& w = ctx.expect_float("weight");
  ctx.expect_same_dtype("x", "weight");
  int r = x.rank();
  if (r != 3 && r != 4) ctx.fail("x must be rank 3 [N, C, W] or rank 4 [N, C, H, W], got " + shape_str(x.shape) + " (3-D conv is not supported)");
  if (w.rank() != r) ctx.fail("weight " + shape_str(w.shape) + " must have the rank of x " + shape_str(x.shape));
  int nsp = r - 2;
  ConvGeom g{};
  g.N = x.shape[0];
  g.C = x.shape[1];
  g.H = r == 4 ? x.shape[2] : 1;
  g.W = x.shape[r - 1];
  g.O = w.shape[0];
  g.KH = r == 4 ? w.shape[2] : 1;
  g.KW = w.shape[r - 1];
  g.G = ctx.i64("groups", 1);
  if (g.G < 1 || g.C % g.G || g.O % g.G) ctx.fail("groups = " + std::to_string(g.G) + " must divide the input channels (" + std::to_string(g.C) + ") and output channels (" + std::to_string(g.O) + ")");
  if (w.shape[1] * g.G != g.C)
    ctx.fail("weight " + shape_str(w.shape) + " expects " + std::to_string(w.shape[1] * g.G) + " input channels (weight.shape[1] x groups), x " + shape_str(x.shape) + " has " + std::to_string(g.C));
  std::vector<int64_t> ones(nsp, 1), zeros(2 * nsp, 0);
  auto st = ctx.ivec("strides", ones), dl = ctx.ivec("dilations", ones);
  if ((int)st.size() != nsp || (int)dl.size() != nsp) ctx.fail("strides and dilations need " + std::to_string(nsp) + " values");
  for (auto v : st) if (v < 1) ctx.fail("strides must be >= 1");
  for (auto v : dl) if (v < 1) ctx.fail("dilations must be >= 1");
  g.SH = nsp == 2 ? st[0] : 1;
  g.SW = st[nsp - 1];
  g.DH = nsp == 2 ? dl[0] : 1;
  g.DW = dl[nsp - 1];
  std::string pt = ctx.str("pad_type", "valid");
  auto pad = ctx.ivec("pad", zeros);
  if ((int)pad.size() != 2 * nsp) ctx.fail("pad needs " + std::to_string(2 * nsp) + " values ([before, after] per spatial axis)");
  int64_t pb_h = 0, pa_h = 0, pb_w = 0, pa_w = 0;
  auto same = [&](int64_t in, int64_t k, int64_t s, int64_t d, bool lower, int64_t* pb, int64_t* pa) {
    int64_t out = (in + s - 1) / s;
    int64_t total = std::max<int64_t>((out - 1) * s + d * (k - 1) + 1 - in, 0);
    *pb = lower ? (total + 1) / 2 : total / 2;
    *pa = total - *pb;
  };
  if (pt == "valid") {
  } else if (pt == "custom") {
    if (nsp == 2) { pb_h = pad[0]; pa_h = pad[1]; }
    pb_w = pad[2 * nsp - 2];
    pa_w = pad[2 * nsp - 1];
    for (auto v : pad) if (v < 0) ctx.fail("pad values must be >= 0");
  } else if (pt == "same" || pt == "same_lower") {
    bool lower = pt == "same_lower";
    if (nsp == 2) same(g.H, g.KH, g.SH, g.DH, lower, &pb_h, &pa_h);
    same(g.W, g.KW, g.SW, g.DW, lower, &pb_w, &pa_w);
  } else {
    ctx.fail("pad_type must be 'valid', 'same', 'same_lower' or 'custom', got '" + pt + "'");
  }
  g.PT = pb_h;
  g.PL = pb_w;
  g.HO = out_len(g.H, g.KH, g.SH, g.DH, pb_h, pa_h);
  g.WO = out_len(g.W, g.KW, g.SW, g.DW, pb_w, pa_w);
  if (g.HO < 1 || g.WO < 1) ctx.fail("the kernel does not fit the padded input (x " + shape_str(x.shape) + ", weight " + shape_str(w.shape) + ")");
  if (ctx.has("bias")) {
    const Value& b = ctx.expect_float("bias");
    if (b.numel() != g.O || b.rank() != 1) ctx.fail("bias must be [" + std::to_string(g.O) + "], got " + shape_str(b.shape));
  }
  return g;
}

// col[(c*KH + i)*KW + j, oh*WO + ow] = x[c, oh*SH - PT + i*DH, ow*SW - PL + j*DW] (0 outside).
void im2col(const ConvGeom& g, const f16* x, f16* col) {
  const int64_t kk = g.KH * g.KW, S = g.HO * g.WO;
  cpu::parallel_for(g.C * kk, 16, [&](int64_t rb, int64_t re) {
    for (int64_t r = rb; r < re; ++r) {
      int64_t c = r / kk, i = (r % kk) / g.KW, j = r % g.KW;
      const f16* xc = x + c * g.H * g.W;
      f16* dst = col + r * S;
      for (int64_t oh = 0; oh < g.HO; ++oh) {
        int64_t ih = oh * g.SH - g.PT + i * g.DH;
        f16* d = dst + oh * g.WO;
        if (ih < 0 || ih >= g.H) { std::memset(d, 0, g.WO * sizeof(f16)); continue; }
        const f16* xr = xc + ih * g.W;
        for (int64_t ow = 0; ow < g.WO; ++ow) {
          int64_t iw = ow * g.SW - g.PL + j * g.DW;
          d[ow] = (iw >= 0 && iw < g.W) ? xr[iw] : (f16)0;
        }
      }
    }
  });
}

// y[n, o, s] += b[o] for the first `cols` of the S columns.
void add_bias(const f16* b, f16* y, int64_t N, int64_t O, int64_t S, int64_t cols) {
  cpu::parallel_for(N * O, 4, [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      float bv = f16_to_f32(b[r % O]);
      f16* yr = y + r * S;
      for (int64_t s = 0; s < cols; ++s) yr[s] = f32_to_f16(f16_to_f32(yr[s]) + bv);
    }
  });
}

}  // namespace

void conv_infer(OpCtx& ctx) {
  ConvGeom g = geometry(ctx);
  const Value& x = ctx.v("x");
  ctx.out_dtype = x.dtype;
  ctx.out_shape = x.rank() == 4 ? Shape{g.N, g.O, g.HO, g.WO} : Shape{g.N, g.O, g.WO};
}

RunFn conv_lower(OpCtx& ctx) {
  const ConvGeom g = geometry(ctx);
  int ix = ctx.input("x"), iw = ctx.input("weight"), ib = ctx.has("bias") ? ctx.input("bias") : -1;
  const int64_t Cg = g.C / g.G, Og = g.O / g.G, kk = g.KH * g.KW, S = g.HO * g.WO, HW = g.H * g.W;
  ctx.flops = 2.0 * g.N * g.O * S * Cg * kk;
  ctx.unit = OpCtx::Unit::conv;
  cpu::kernels::GemmShape gs;
  gs.M = Og;
  gs.N = S;
  gs.K = Cg * kk;
  gs.lda = Cg * kk;
  gs.ldb = S;
  gs.ldc = S;
  // Dead-column skipping: a pointwise conv maps every spatial column (and batch entry) on its own;
  // the channel axis contracts x whole. A prefix of the last axis (one row of columns) is a narrower GEMM.
  const std::string name = ctx.st.out;
  const int xid = ctx.vid("x"), last = ctx.v("x").rank() - 1;
  const bool pointwise = g.one_by_one();
  ctx.column_rule = [=](int axis, int64_t len, std::vector<std::pair<int, Region>>* in, std::string* why) {
    if (axis == 1) return true;
    if (axis >= 2 && !pointwise) {
      *why = "conv '" + name + "' has a kernel window, stride or padding along axis " + std::to_string(axis);
      return false;
    }
    in->push_back({xid, Region::prefix(axis, len)});
    return true;
  };
  auto cols_of = [=](int axis, int64_t len) { return axis == last && g.H == 1 ? len : S; };
  if (g.one_by_one() && g.G == 1 && ctx.v("weight").is_const()) {
    if (ctx.env.check_only()) return nullptr;  // nothing runs: no packed copy of the weight
    // A constant weight (every linear layer): packed once here into the panel kernel's fp16 layout,
    // so each call streams it as stored, with no per-call widening or packing of W. Faster than the
    // blocked GEMM at every width (decode's 16 columns most of all).
    // A compressed weight (constexpr op) stays compressed: each panel is decoded in the kernel.
    auto pw = packed_const_weight(ctx, "weight", g.O, g.C);
    auto run = [=](const RunArgs& a, int64_t cols) {
      const f16* x = a.at<f16>(ix);
      f16* y = a.o<f16>();
      std::vector<const f16*> B(g.N);
      std::vector<f16*> C(g.N);
      for (int64_t n = 0; n < g.N; ++n) {
        B[n] = x + n * g.C * HW;
        C[n] = y + n * g.O * S;
      }
      cpu::kernels::GemmShape gc = gs;
      gc.N = cols;
      cpu::kernels::gemm_packed_f16(*pw, gc, g.N, B.data(), C.data());
      if (ib >= 0) add_bias(a.at<f16>(ib), y, g.N, g.O, S, cols);
    };
    ctx.run_prefix = [=](const RunArgs& a, int axis, int64_t len) { run(a, cols_of(axis, len)); };
    return [=](const RunArgs& a) { run(a, S); };
  }
  if (g.one_by_one()) {
    // One GEMM batch of N x G: A = weight rows of group gi, B = x_n channels of group gi.
    auto run = [=](const RunArgs& a, int64_t cols) {
      const f16* x = a.at<f16>(ix);
      const f16* w = a.at<f16>(iw);
      f16* y = a.o<f16>();
      int64_t nb = g.N * g.G;
      std::vector<const f16*> A(nb), B(nb);
      std::vector<f16*> C(nb);
      for (int64_t n = 0; n < g.N; ++n)
        for (int64_t gi = 0; gi < g.G; ++gi) {
          int64_t b = n * g.G + gi;
          A[b] = w + gi * Og * Cg;
          B[b] = x + (n * g.C + gi * Cg) * HW;
          C[b] = y + (n * g.O + gi * Og) * S;
        }
      cpu::kernels::GemmShape gc = gs;
      gc.N = cols;
      cpu::kernels::gemm_f16(gc, nb, A.data(), B.data(), C.data());
      if (ib >= 0) add_bias(a.at<f16>(ib), y, g.N, g.O, S, cols);
    };
    ctx.run_prefix = [=](const RunArgs& a, int axis, int64_t len) { run(a, cols_of(axis, len)); };
    return [=](const RunArgs& a) { run(a, S); };
  }
  ctx.scratch_bytes = g.C * kk * S * (int64_t)sizeof(f16);  // im2col of one batch element
  return [=](const RunArgs& a) {
    const f16* x = a.at<f16>(ix);
    const f16* w = a.at<f16>(iw);
    f16* y = a.o<f16>();
    f16* col = (f16*)a.scratch;
    std::vector<const f16*> A(g.G), B(g.G);
    std::vector<f16*> C(g.G);
    for (int64_t n = 0; n < g.N; ++n) {
      im2col(g, x + n * g.C * HW, col);
      for (int64_t gi = 0; gi < g.G; ++gi) {
        A[gi] = w + gi * Og * Cg * kk;
        B[gi] = col + gi * Cg * kk * S;
        C[gi] = y + (n * g.O + gi * Og) * S;
      }
      cpu::kernels::gemm_f16(gs, g.G, A.data(), B.data(), C.data());
    }
    if (ib >= 0) add_bias(a.at<f16>(ib), y, g.N, g.O, S, S);
  };
}

}  // namespace orion::sim::ops
