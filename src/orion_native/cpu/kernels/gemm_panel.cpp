// Panel GEMM for narrow outputs (decode: a conv1x1 on 16 columns). Vectorised over 16 rows of op(A)
// instead of over columns, so no column padding is computed and A - the big operand, usually a
// constant weight - is read once as fp16 and widened in registers. B (K x N, small) is widened per call
// by each thread that uses it. Same per-element fma chain as the blocked GEMM (gemm.cpp), so results
// are identical.
#include "cpu/kernels/gemm_panel.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>

#include "cpu/kernels/compressed.h"
#include "cpu/kernels/scratch.h"
#include "cpu/simd/isa.h"
#include "cpu/threadpool.h"

namespace orion::cpu::kernels {
namespace {

constexpr int64_t kR = simd::kPanelRows, kC = simd::kPanelCols;
static_assert(kR == 16, "PackedA::panel assumes 16-row panels");
constexpr double kSerialFlops = 2e6;  // below this a GEMM stays on one thread (as in gemm.cpp)...
// ...unless it streams this much of A: a matrix-vector product (decode) is bound by memory bandwidth,
// which a second core adds to, long before it has the flops that pay for waking it.
constexpr double kSerialABytes = 512 << 10;
constexpr int64_t kBBlockBytes = 384 << 10;  // packed-B column block: fits L2 beside an A panel
constexpr int kMaxGroup = 8;                     // panels per tile at most (IsaOps::panel_group)
constexpr int64_t kGroupBufferBytes = 512 << 10;  // a tile's decoded / packed panels: stay in L2

// Rows [16p, 16p + 16) of op(A) as a panel [K][16]; rows past M are zero.
void pack_panel(const f16* A, int64_t M, int64_t K, int64_t lda, bool trans_a, int64_t p, f16* dst) {
  int64_t i0 = p * kR, rows = std::min(kR, M - i0);
  if (trans_a) {  // A stored [K][lda]: row k holds column k of op(A)
    if (rows < kR) std::memset(dst, 0, (size_t)(K * kR) * sizeof(f16));
    for (int64_t k = 0; k < K; ++k) std::memcpy(dst + k * kR, A + k * lda + i0, (size_t)rows * sizeof(f16));
    return;
  }
  // A stored [M][lda]: a transpose. The ISA's widening transpose and a narrowing pass (exact for
  // fp16 values) beat a scalar fp16 transpose several times over.
  const simd::IsaOps& o = simd::ops();
  constexpr int64_t kB = 256;  // k block: fp32 staging stays in L1
  float* tmp = scratch_as<float>(ScratchSlot::tmp2, (size_t)(kB * kR));
  for (int64_t k0 = 0; k0 < K; k0 += kB) {
    int64_t kb = std::min(kB, K - k0);
    o.cvt_transpose(A + i0 * lda + k0, lda, rows, kR, kb, tmp, kR);
    o.f32_to_f16(tmp, dst + k0 * kR, (size_t)(kb * kR));
  }
}

// Columns [j0, j0 + cols) of op(B) widened to fp32 [K][cols].
void pack_b(const simd::IsaOps& o, const GemmShape& g, const f16* B, int64_t j0, int cols, float* dst) {
  if (g.trans_b) {  // B stored [N][ldb]
    o.cvt_transpose(B + j0 * g.ldb, g.ldb, cols, cols, g.K, dst, cols);
  } else if (cols == g.ldb) {  // the whole of a dense B: one conversion
    o.f16_to_f32(B, dst, (size_t)(g.K * cols));
  } else {
    for (int64_t k = 0; k < g.K; ++k) o.f16_to_f32(B + k * g.ldb + j0, dst + k * cols, (size_t)cols);
  }
}

// Which packed-B block a thread's buffer holds. Each thread widens the blocks it uses itself: with one
// shared packed B, every call's repack had to pull the lines back from the other core's cache (~60 us
// for K = 3072, more than the conversion).
struct BBlockKey {
  uint64_t call = 0;
  int64_t b = -1, q = -1;
};
thread_local BBlockKey t_bkey;
std::atomic<uint64_t> g_calls{0};

template <typename T>
void run(const GemmShape& g, int64_t batch, const f16* const* A, const PackedA* pa, const f16* const* B,
         T* const* C, bool trans_c = false) {
  const simd::IsaOps& o = simd::ops();
  const int64_t npan = (g.M + kR - 1) / kR;
  // Column blocks: with a packed A, B of one block (K x cb, fp32) stays in L2 while the panels stream
  // past it; a per-call packed A is packed once per panel, so it keeps all columns in one block.
  int64_t cb = g.N;
  if ((pa && !pa->source) || (g.trans_a && g.M % kR == 0))
    cb = std::clamp<int64_t>(kBBlockBytes / (int64_t)(sizeof(float) * std::max<int64_t>(g.K, 1)) / kC * kC, kC, g.N);
  const int64_t nq = (g.N + cb - 1) / cb;
  // A B shared by all batches (a broadcast operand: the classifier's hidden state) is widened once.
  const bool shared_b = std::all_of(B, B + batch, [&](const f16* p) { return p == B[0]; });
  const uint64_t call = g_calls.fetch_add(1, std::memory_order_relaxed) + 1;
  // Few columns: a tile carries several panels (the ISA's choice), so that one column is not one
  // latency-bound fma chain (decode: a matrix-vector product at the memory limit).
  const int64_t want = std::clamp(o.panel_group((int)std::min(kC, g.N)), 1, kMaxGroup);
  // 8-bit codes with one scale/offset per row (the int8 / uint8 linears) decode in the GEMV's registers.
  const auto* q8 = pa && pa->source ? dynamic_cast<const CompressedWeight*>(pa->source.get()) : nullptr;
  const auto* q4 = q8;
  if (!(q8 && o.gemm_panel_q8 && want > 1 && q8->kind == CompressedWeight::Kind::shift_scale && q8->bits == 8 &&
        q8->blocks_per_row == 1))
    q8 = nullptr;
  // ... and 4-bit LUT codes with one table per panel (the lut4 linears: tables over >= 16 rows) in its registers.
  if (!(q4 && o.gemm_panel_lut4 && want > 1 && q4->kind == CompressedWeight::Kind::lut && q4->bits == 4 &&
        q4->blocks_per_row == 1 && q4->rows_per_block % kR == 0))
    q4 = nullptr;
  // Panels decoded or packed per tile into a buffer are read back at once: keep the group's buffer in L2.
  const bool buffered = (pa && pa->source && !q8 && !q4) || (!pa && !g.trans_a);
  const int64_t group = buffered ? std::clamp<int64_t>(kGroupBufferBytes / (g.K * kR * 2), 1, want) : want;
  const int64_t ngrp = (npan + group - 1) / group;
  // Items are small (a group of panels x one column block): the pool's chunking balances the
  // threads; a small GEMM stays on the calling thread.
  const int64_t items = batch * nq * ngrp;
  const double flops = 2.0 * (double)(g.M * g.N) * (double)(g.K * batch);
  const double a_bytes = 2.0 * (double)(g.M * g.K) * (double)(pa ? 1 : batch);  // as fp16
  const bool serial = flops < kSerialFlops && a_bytes < kSerialABytes;
  parallel_for(items, serial ? items : 1, [&](int64_t lo, int64_t hi) {
    for (int64_t it = lo; it < hi; ++it) {
      int64_t p = (it % ngrp) * group, q = (it / ngrp) % nq, b = it / (ngrp * nq), i0 = p * kR;
      int64_t bb = shared_b ? 0 : b, j1 = std::min(g.N, (q + 1) * cb);
      const int np = (int)std::min(group, npan - p);
      // This block of B as fp32 [K][cols] per 16-column chunk (chunk at j0 starts at (j0 - q cb) K).
      float* bp = scratch_as<float>(ScratchSlot::gemm_b, (size_t)(g.K * cb));
      if (t_bkey.call != call || t_bkey.b != bb || t_bkey.q != q) {
        for (int64_t j0 = q * cb; j0 < j1; j0 += kC)
          pack_b(o, g, B[bb], j0, (int)std::min(kC, g.N - j0), bp + (j0 - q * cb) * g.K);
        t_bkey = {call, bb, q};
      }
      simd::PanelTile t{};
      t.K = g.K;
      t.rows = (int)std::min(kR * np, g.M - i0);
      t.panels = np;
      t.lda = kR;
      t.pstride = g.K * kR;  // panels packed back to back
      float sc[kR * kMaxGroup], of[kR * kMaxGroup];  // gemm_panel_q8: per row of the group
      const f16* tabs[kMaxGroup];                     // gemm_panel_lut4: per panel of the group
      const bool fused = q8 && np == group, fused4 = q4 && np == group;
      if (fused4) {
        for (int u = 0; u < np; ++u) tabs[u] = q4->lut.data() + (((p + u) * kR / q4->rows_per_block) << 4);
        t.q4 = q4->codes.data() + p * g.K * 8;
        t.pstride = g.K * 8;  // K x 16 four-bit codes per panel
        t.tabs = tabs;
      } else if (fused) {
        t.q8_fp16 = true;
        for (int64_t r = 0; r < kR * np; ++r) {
          const int64_t blk = std::min(i0 + r, g.M - 1) / q8->rows_per_block;  // its parameter block
          sc[r] = q8->scale[blk];
          of[r] = q8->offset.empty() ? 0.0f : q8->offset[blk];
          t.q8_fp16 &= orion::f16_to_f32(orion::f32_to_f16(sc[r])) == sc[r] && std::abs(of[r]) <= 1024.0f &&
                       std::nearbyint(of[r]) == of[r];
        }
        t.q8 = q8->codes.data() + p * g.K * kR;  // pstride as set: K x 16 one-byte codes per panel
        t.q8_signed = q8->is_signed;
        t.sc = sc;
        t.of = of;
      } else if (pa && !pa->source) {
        t.ap = pa->panel(p);
      } else if (!pa && g.trans_a && t.rows == kR * np) {  // already k-major: read in place
        t.ap = A[b] + i0;
        t.lda = g.lda;
        t.pstride = kR;
      } else {  // a compressed weight decoded to fp16 here, or op(A) packed here
        f16* buf = scratch_as<f16>(ScratchSlot::gemm_a, (size_t)(g.K * kR * np));
        for (int u = 0; u < np; ++u) {
          if (pa)
            pa->source->panel(p + u, buf + u * t.pstride);
          else
            pack_panel(A[b], g.M, g.K, g.lda, g.trans_a, p + u, buf + u * t.pstride);
        }
        t.ap = buf;
      }
      for (int64_t j0 = q * cb; j0 < j1; j0 += kC) {
        t.cols = (int)std::min(kC, g.N - j0);
        t.bp = bp + (j0 - q * cb) * g.K;
        t.ldb = t.cols;
        T* dst = trans_c ? C[b] + j0 * g.ldc + i0 : C[b] + i0 * g.ldc + j0;
        if constexpr (sizeof(T) == 2) {
          t.o16 = dst;
        } else {
          t.o32 = dst;
        }
        t.ldo = g.ldc;
        t.trans_c = trans_c;
        if (fused4)
          o.gemm_panel_lut4(t);
        else if (fused)
          o.gemm_panel_q8(t);
        else
          o.gemm_panel(t);
      }
    }
  });
}

}  // namespace

PackedA pack_a(const f16* A, int64_t M, int64_t K, int64_t lda, bool trans_a) {
  PackedA pa;
  pa.M = M;
  pa.K = K;
  int64_t npan = (M + kR - 1) / kR;
  size_t bytes = ((size_t)(npan * K * kR) * sizeof(f16) + 63) / 64 * 64;
  pa.data.reset(static_cast<f16*>(std::aligned_alloc(64, std::max<size_t>(bytes, 64))));
  if (!pa.data) throw std::bad_alloc();
  if (lda <= 0) lda = trans_a ? M : K;
  parallel_for(npan, 8, [&](int64_t b, int64_t e) {
    for (int64_t p = b; p < e; ++p) pack_panel(A, M, K, lda, trans_a, p, pa.data.get() + p * K * kR);
  });
  return pa;
}

PackedA pack_a(std::shared_ptr<const PanelSource> source, int64_t M, int64_t K) {
  PackedA pa;
  pa.M = M;
  pa.K = K;
  pa.source = std::move(source);
  return pa;
}

void panel_gemm(const GemmShape& g, int64_t batch, const f16* const* A, const PackedA* pa, const f16* const* B,
                f16* const* C, bool trans_c) {
  run(g, batch, A, pa, B, C, trans_c);
}

void panel_gemm(const GemmShape& g, int64_t batch, const f16* const* A, const PackedA* pa, const f16* const* B,
                float* const* C, bool trans_c) {
  run(g, batch, A, pa, B, C, trans_c);
}

namespace {
template <typename T>
void run_packed(const PackedA& a, const GemmShape& g0, int64_t batch, const f16* const* B, T* const* C,
                bool trans_c) {
  GemmShape g = g0;
  g.M = a.M;
  g.K = a.K;
  if (g.ldb <= 0) g.ldb = g.trans_b ? g.K : g.N;
  if (g.ldc <= 0) g.ldc = trans_c ? g.M : g.N;
  if (g.ldc < (trans_c ? g.M : g.N))
    throw std::invalid_argument("gemm_packed_f16: leading dimension smaller than the row length");
  if (batch <= 0 || g.M == 0 || g.N == 0) return;
  run(g, batch, nullptr, &a, B, C, trans_c);
}
}  // namespace

void gemm_packed_f16(const PackedA& a, const GemmShape& g, int64_t batch, const f16* const* B, f16* const* C,
                     bool trans_c) {
  run_packed(a, g, batch, B, C, trans_c);
}

void gemm_packed_f16(const PackedA& a, const GemmShape& g, int64_t batch, const f16* const* B, float* const* C,
                     bool trans_c) {
  run_packed(a, g, batch, B, C, trans_c);
}

}  // namespace orion::cpu::kernels
