// matmul: batched GEMM with numpy broadcasting over the leading dims and transpose flags; rank-1
// operands follow numpy (promoted, then the added axis is dropped). C36: outputs with |y| >= 32752
// come out as +-inf on the ANE (measured on M2 Pro and M5), reproduced on every profile.
#include "sim/ops/matmul.h"

#include <algorithm>
#include <stdexcept>

namespace orion::sim::ops {

std::vector<int64_t> batch_offsets(const Shape& part, const Shape& full, int64_t mat) {
  int64_t n = shape_numel(full);
  std::vector<int64_t> offs((size_t)n, 0);
  if (full.empty()) return offs;
  std::vector<int64_t> st = broadcast_strides(part, full);
  std::vector<int64_t> idx(full.size(), 0);
  for (int64_t b = 0; b < n; ++b) {
    int64_t o = 0;
    for (size_t i = 0; i < full.size(); ++i) o += idx[i] * st[i];
    offs[(size_t)b] = o * mat;
    for (int i = (int)full.size() - 1; i >= 0; --i) {
      if (++idx[i] < full[i]) break;
      idx[i] = 0;
    }
  }
  return offs;
}

namespace {

// C36's threshold, 32752 (exactly representable in fp16), as fp16 bits; and whether y's magnitude reaches it
// (infinities and NaN already are what they are).
constexpr uint16_t kC36Bits = 0x77ff;
inline uint16_t c36_hit(f16 y) {
  const uint16_t a = y & 0x7fffu;
  return (uint16_t)((a >= kC36Bits) & (a < 0x7c00u));
}

}  // namespace

int64_t saturate_matmul(f16* y, int64_t rows, int64_t cols, int64_t ld) {
  if (cols == ld) {  // dense: one span
    cols *= rows;
    ld = cols;
    rows = 1;
  }
  // Each block is first only checked (an OR over 16-bit lanes, which the compiler vectorises; a product reaching
  // the threshold is rare): a fused check-and-count loop did not vectorise and cost 8 % of a prefill. Decode's
  // one live column of thousands of rows goes through the same loops, with no call per row.
  constexpr int64_t kBlock = 2048;
  int64_t changed = 0;
  for (int64_t r = 0; r < rows; ++r) {
    f16* row = y + r * ld;
    for (int64_t c0 = 0; c0 < cols; c0 += kBlock) {
      const int64_t c1 = std::min(cols, c0 + kBlock);
      uint16_t any = 0;
      for (int64_t c = c0; c < c1; ++c) any |= c36_hit(row[c]);
      if (!any) continue;
      for (int64_t c = c0; c < c1; ++c) {
        if (c36_hit(row[c])) {
          row[c] = (f16)((row[c] & 0x8000u) | 0x7c00u);
          ++changed;
        }
      }
    }
  }
  return changed;
}

MatmulGeom matmul_geometry(OpCtx& ctx, const std::string& xn, const std::string& yn, bool tx, bool ty) {
  const Value& x = ctx.expect_float(xn);
  const Value& y = ctx.expect_float(yn);
  ctx.expect_same_dtype(xn, yn);
  if (x.rank() < 1 || y.rank() < 1) ctx.fail("operands must have rank >= 1");
  Shape xs = x.shape, ys = y.shape;
  MatmulGeom g;
  g.drop_m = xs.size() == 1;
  g.drop_n = ys.size() == 1;
  if (g.drop_m) { xs.insert(xs.begin(), 1); tx = false; }
  if (g.drop_n) { ys.push_back(1); ty = false; }
  int rx = (int)xs.size(), ry = (int)ys.size();
  g.M = tx ? xs[rx - 1] : xs[rx - 2];
  g.K = tx ? xs[rx - 2] : xs[rx - 1];
  int64_t k2 = ty ? ys[ry - 1] : ys[ry - 2];
  g.N = ty ? ys[ry - 2] : ys[ry - 1];
  if (g.K != k2)
    ctx.fail("inner dimensions differ: " + xn + " " + shape_str(x.shape) + (tx ? " (transposed)" : "") + " and " + yn + " " +
             shape_str(y.shape) + (ty ? " (transposed)" : "") + " give K = " + std::to_string(g.K) + " vs " + std::to_string(k2));
  Shape bx(xs.begin(), xs.end() - 2), by(ys.begin(), ys.end() - 2);
  g.batch = ctx.broadcast(bx, by, xn, yn);
  g.out = g.batch;
  if (!g.drop_m) g.out.push_back(g.M);
  if (!g.drop_n) g.out.push_back(g.N);
  g.gs.M = g.M;
  g.gs.N = g.N;
  g.gs.K = g.K;
  g.gs.trans_a = tx;
  g.gs.trans_b = ty;
  g.gs.lda = xs[rx - 1];
  g.gs.ldb = ys[ry - 1];
  g.gs.ldc = g.N;
  g.x_off = batch_offsets(bx, g.batch, g.M * g.K);
  g.y_off = batch_offsets(by, g.batch, g.K * g.N);
  return g;
}

void matmul_infer(OpCtx& ctx) {
  bool tx = ctx.flag("transpose_x", false), ty = ctx.flag("transpose_y", false);
  MatmulGeom g = matmul_geometry(ctx, "x", "y", tx, ty);
  ctx.out_dtype = ctx.v("x").dtype;
  ctx.out_shape = g.out;
}

RunFn matmul_lower(OpCtx& ctx) {
  bool tx = ctx.flag("transpose_x", false), ty = ctx.flag("transpose_y", false);
  const MatmulGeom g = matmul_geometry(ctx, "x", "y", tx, ty);
  int ix = ctx.input("x"), iy = ctx.input("y");
  const int64_t nb = (int64_t)g.x_off.size(), mn = g.M * g.N;
  ctx.flops = 2.0 * nb * g.M * g.N * g.K;
  ctx.unit = OpCtx::Unit::matmul;
  std::string name = ctx.st.out;
  // Dead-column skipping: a prefix of the rows (M) reads those rows of op(x) and all of y; of the
  // columns (N), those columns of op(y) and all of x; of the outermost batch axis (batched decode's
  // sequences), that prefix of each operand's batch axis there (all of an operand broadcast along it):
  // the first batches in order, each the same GEMM. Inner batch axes are refused (kept simple).
  const int ro = (int)g.out.size(), rx = ctx.v("x").rank(), ry = ctx.v("y").rank();
  const int m_axis = g.drop_m ? -1 : ro - (g.drop_n ? 1 : 2), n_axis = g.drop_n ? -1 : ro - 1;
  const int xid = ctx.vid("x"), yid = ctx.vid("y");
  const int nbatch = (int)g.batch.size();
  const Shape xshape = ctx.v("x").shape, yshape = ctx.v("y").shape;
  const int bx = g.drop_m ? 0 : rx - 2, by = g.drop_n ? 0 : ry - 2;  // each operand's batch axes
  ctx.column_rule = [=](int axis, int64_t len, std::vector<std::pair<int, Region>>* in, std::string* why) {
    if (axis == m_axis) {
      in->push_back({xid, Region::prefix(tx ? rx - 1 : rx - 2, len)});
      return true;
    }
    if (axis == n_axis) {
      in->push_back({yid, Region::prefix(ty ? ry - 2 : ry - 1, len)});
      return true;
    }
    if (axis == 0 && nbatch > 0) {
      if (bx == nbatch && xshape[0] > 1) in->push_back({xid, Region::prefix(0, len)});
      if (by == nbatch && yshape[0] > 1) in->push_back({yid, Region::prefix(0, len)});
      return true;
    }
    *why = "matmul '" + name + "': no column rule for its inner batch axis " + std::to_string(axis);
    return false;
  };
  // rows x cols of each of the first `batches` [M, N] results, written at `out` (row stride ldc, batch
  // stride bs: the result's own, N and M * N, or a compact form's)
  // (x, y: an operand's own layout, or its compact form - cx / cy, that operand's rows of `rows` / `cols`
  // entries - read with its leading dimension and batch offsets scaled to that width)
  // C36's warning for the n results one call saturated (none: no warning).
  auto report_c36 = [=](const RunArgs& a, int64_t n) {
    if (n && a.warn)
      a.warn->warn("C36", "matmul '" + name + "': outputs with |y| >= 32752 saturated to +-inf (" + std::to_string(n) + " elements)");
  };
  // The panel idiom (a shared program's linear: x = a weight's column panels [.., P, K, W] read transposed, y one
  // activation for every panel): the batches' rows are the weight's rows in order, so x may be read from a
  // compressed weight standing for its bytes (RunArgs::panel) - one GEMM of P W rows, no fp16 copy of x.
  const bool y_shared = std::all_of(g.y_off.begin(), g.y_off.end(), [&](int64_t o) { return o == g.y_off[0]; });
  bool x_stacked = true;
  for (int64_t b = 0; b < nb; ++b) x_stacked &= g.x_off[(size_t)b] == b * g.M * g.K;
  if (tx && !g.drop_m && !g.drop_n && g.M % 16 == 0 && y_shared && x_stacked && ctx.v("x").dtype == DType::fp16)
    ctx.panel_read = {ix, nb * g.M, g.K, g.M};
  auto run_panels = [=](const RunArgs& a, int64_t cols, int64_t batches, f16* out, int64_t ldc, int64_t bs,
                        const f16* cy) {
    if (bs != g.M * ldc)
      throw std::logic_error("matmul '" + name + "': a weight read from compressed panels into a strided result");
    const int64_t rows = batches * g.M;  // every row of each batch (a prefix of rows computes them all)
    if (rows == 0 || cols == 0) return;
    const cpu::kernels::PackedA pa = cpu::kernels::pack_a(a.panel->weight, rows, g.K);
    cpu::kernels::GemmShape gs = g.gs;
    gs.M = rows;
    gs.N = cols;
    gs.ldc = ldc;
    if (cy) gs.ldb = cols;
    const f16* B = cy ? cy + g.y_off[0] / g.N * cols : a.at<f16>(iy) + g.y_off[0];
    cpu::kernels::gemm_packed_f16(pa, gs, 1, &B, &out);
    report_c36(a, saturate_matmul(out, rows, cols, ldc));
  };
  auto run_into = [=](const RunArgs& a, int64_t rows, int64_t cols, int64_t batches, f16* out, int64_t ldc,
                      int64_t bs, const f16* cx = nullptr, const f16* cy = nullptr) {
    if (a.panel) {
      if (cx) throw std::logic_error("matmul '" + name + "': a compact form of a weight read from compressed panels");
      run_panels(a, cols, batches, out, ldc, bs, cy);
      return;
    }
    const f16* x = cx ? cx : a.at<f16>(ix);
    const f16* y = cy ? cy : a.at<f16>(iy);
    std::vector<const f16*> A(batches), B(batches);
    std::vector<f16*> C(batches);
    for (int64_t b = 0; b < batches; ++b) {
      A[b] = x + (cx ? g.x_off[b] / g.M * rows : g.x_off[b]);
      B[b] = y + (cy ? g.y_off[b] / g.N * cols : g.y_off[b]);
      C[b] = out + b * bs;
    }
    cpu::kernels::GemmShape gs = g.gs;
    gs.M = rows;
    gs.N = cols;
    gs.ldc = ldc;
    if (cx) gs.lda = rows;  // op(x) = x^T stored [K][rows]
    if (cy) gs.ldb = cols;  // y stored [K][cols]
    cpu::kernels::gemm_f16(gs, batches, A.data(), B.data(), C.data());
    int64_t n = 0;
    if (bs == rows * ldc)  // the batches' results back to back (a compact form): one pass over all of them
      n = saturate_matmul(out, batches * rows, cols, ldc);
    else
      for (int64_t b = 0; b < batches; ++b) n += saturate_matmul(C[b], rows, cols, ldc);
    report_c36(a, n);
  };
  auto run = [=](const RunArgs& a, int64_t rows, int64_t cols, int64_t batches) {
    run_into(a, rows, cols, batches, a.o<f16>(), g.N, mn);
  };
  // A prefix of the rows or columns straight into its compact form (dense [batches][rows][cols]): decode's
  // one live column of a projection, which the element-wise steps after it read compact (sim/compact.h).
  // The operand holding that prefix along its last axis is taken compact too: y (not transposed) for the
  // columns - the projection's input, the element-wise chain's last result -, x transposed for the rows -
  // attention's queries. (Batch offsets scale to the compact width: each batch of an operand is whole.)
  if (m_axis >= 0 && n_axis >= 0) {
    ctx.compact_inputs = [=](int axis, int64_t len, std::vector<std::pair<int, Region>>* in) {
      if (axis == n_axis && !ty) in->push_back({iy, Region::prefix(ry - 1, len)});
      if (axis == m_axis && tx) in->push_back({ix, Region::prefix(rx - 1, len)});
    };
    ctx.run_compact = [=](const RunArgs& a, int axis, int64_t len, const f16* const* in, f16* dst) {
      if (axis == n_axis) run_into(a, g.M, len, nb, dst, len, g.M * len, nullptr, in[iy]);
      else if (axis == m_axis) run_into(a, len, g.N, nb, dst, g.N, len * g.N, in[ix], nullptr);
      else throw std::logic_error("matmul: a compact form along a batch axis");
    };
  }
  ctx.run_prefix = [=](const RunArgs& a, int axis, int64_t len) {
    if (axis == 0 && nbatch > 0) {  // batches are in row-major order of the batch axes
      run(a, g.M, g.N, len * (nb / g.batch[0]));
      return;
    }
    run(a, axis == m_axis ? len : g.M, axis == n_axis ? len : g.N, nb);
  };
  return [=](const RunArgs& a) { run(a, g.M, g.N, nb); };
}

}  // namespace orion::sim::ops
