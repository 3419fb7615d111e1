// GEMM driver: fp16 operands are packed (and widened to fp32) into MR-/NR-wide panels, an ISA
// microkernel accumulates MR x NR tiles in fp32 registers, and each output is rounded once.
//
// Blocking (Goto/BLIS style): B is packed once per column block of NCB columns for all of K (shared
// by the threads); work items are MC x NC tiles of C; each item walks K in KC steps, packing its A
// block; partial sums between k blocks live in a per-thread fp32 tile, and the last block writes C
// straight from the registers. Every C element is the same in-order fma chain over k whatever the
// blocking, thread count or ISA, so results are reproducible.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <type_traits>
#include <vector>

#include "cpu/kernels/kernels.h"
#include "cpu/kernels/gemm_panel.h"
#include "cpu/kernels/scratch.h"
#include "cpu/simd/isa.h"
#include "cpu/threadpool.h"

namespace orion::cpu::kernels {
namespace {

// Blocking. Measured on Zen 4 (1 thread, CPU time): 100-105 GFLOP/s for KC 256-512 and MC 96-240,
// i.e. the microkernel is at peak and the choice is not critical; KC 384 keeps K = 768 to two blocks.
constexpr int64_t kKC = 384;               // k block: A panel rows and B micro-panel stay in L1/L2
constexpr int64_t kMC = 144;               // rows of C per work item (A block ~200 KB fp32 in L2)
constexpr int64_t kNC = 256;               // columns of C per work item
constexpr int64_t kPackedBBytes = 4 << 20;  // bound on the shared packed-B block
constexpr double kSerialFlops = 2e6;       // below this a GEMM (or batch chunk) stays on one thread

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// C^T = op(B)^T op(A)^T as a GEMM of its own (operands swapped, flags flipped), with C^T's row stride.
GemmShape transposed_problem(const GemmShape& g, int64_t ldc) {
  GemmShape s;
  s.M = g.N;
  s.N = g.M;
  s.K = g.K;
  s.trans_a = !g.trans_b;
  s.trans_b = !g.trans_a;
  s.lda = g.ldb;
  s.ldb = g.lda;
  s.ldc = ldc;
  return s;
}

struct Plan {
  const GemmShape& g;
  const simd::IsaOps& o;
  int64_t mr, nr, mc, nc, ncb;
  bool accumulate = false;  // fp32 C holds the partial sums of earlier k: each chain continues from them
};

// Packs op(B)[0:K, j0:j0+cols] into panels of nr columns, each [K][nr].
void pack_b_panel(const Plan& p, const f16* B, int64_t j0, int64_t cols, float* dst) {
  const GemmShape& g = p.g;
  if (!g.trans_b) {
    p.o.gemm_pack_rows(B + j0, g.ldb, g.K, cols, (int)p.nr, dst);
    return;
  }
  // B stored [N][ldb]: column j of op(B) is row j of B; a widening transpose packs it.
  p.o.cvt_transpose(B + j0 * g.ldb, g.ldb, cols, p.nr, g.K, dst, p.nr);
}

// Packs op(A)[i0:i0+rows, p0:p0+kc] as a row-major fp32 block [rows][lda_p]. Non-transposed A is a
// plain per-row conversion; transposed A a widening transpose. (Microkernels take the exact row
// count, so no padding rows.)
void pack_a_block(const Plan& p, const f16* A, int64_t i0, int64_t rows, int64_t p0, int64_t kc, int64_t lda_p,
                  float* dst) {
  const GemmShape& g = p.g;
  if (!g.trans_a) {
    for (int64_t r = 0; r < rows; ++r) p.o.f16_to_f32(A + (i0 + r) * g.lda + p0, dst + r * lda_p, (size_t)kc);
  } else {  // A stored [K][lda]: row k of A holds column k of op(A)
    p.o.cvt_transpose(A + p0 * g.lda + i0, g.lda, kc, kc, rows, dst, lda_p);
  }
}

// fp32 operands (gemm_f32: the trainer's weight gradients): the same panels, copied instead of widened.
void pack_b_panel(const Plan& p, const float* B, int64_t j0, int64_t cols, float* dst) {
  const GemmShape& g = p.g;
  const int64_t nr = p.nr;
  if (!g.trans_b) {
    for (int64_t k = 0; k < g.K; ++k) {
      std::memcpy(dst + k * nr, B + k * g.ldb + j0, (size_t)cols * sizeof(float));
      std::fill(dst + k * nr + cols, dst + (k + 1) * nr, 0.0f);
    }
    return;
  }
  // B stored [N][ldb]: column j of op(B) is row j of B, read contiguously, written with stride nr; in
  // k blocks of 64 so the block's destination lines stay in L1 across the columns.
  for (int64_t k0 = 0; k0 < g.K; k0 += 64) {
    const int64_t k1 = std::min(g.K, k0 + 64);
    for (int64_t c = 0; c < cols; ++c) {
      const float* src = B + (j0 + c) * g.ldb;
      for (int64_t k = k0; k < k1; ++k) dst[k * nr + c] = src[k];
    }
  }
  for (int64_t k = 0; cols < nr && k < g.K; ++k) std::fill(dst + k * nr + cols, dst + (k + 1) * nr, 0.0f);
}

void pack_a_block(const Plan& p, const float* A, int64_t i0, int64_t rows, int64_t p0, int64_t kc, int64_t lda_p,
                  float* dst) {
  const GemmShape& g = p.g;
  if (!g.trans_a) {
    for (int64_t r = 0; r < rows; ++r) std::memcpy(dst + r * lda_p, A + (i0 + r) * g.lda + p0, (size_t)kc * sizeof(float));
  } else {  // A stored [K][lda]: rows of A read contiguously, written with stride lda_p
    for (int64_t k = 0; k < kc; ++k) {
      const float* src = A + (p0 + k) * g.lda + i0;
      for (int64_t r = 0; r < rows; ++r) dst[r * lda_p + k] = src[r];
    }
  }
}

// One C tile [i0:i0+mc, j0:j0+nc] (j relative to the packed block starting at jb). The last k block
// writes straight from the microkernel registers into C; earlier ones keep fp32 partial sums in a
// per-thread buffer (only when K > KC).
template <typename TI, typename T>
void tile(const Plan& p, const TI* A, const TI* B, const float* bp, int64_t jb, int64_t i0, int64_t mc,
          int64_t j0, int64_t nc, T* C) {
  const GemmShape& g = p.g;
  int64_t mc_pad = round_up(mc, p.mr), nc_pad = round_up(nc, p.nr);
  float* cbuf = g.K > kKC || p.accumulate ? scratch_as<float>(ScratchSlot::gemm_c, (size_t)(mc_pad * nc_pad)) : nullptr;
  if constexpr (std::is_same_v<T, float>) {
    if (p.accumulate)  // the tile's partial sums so far, padded as the microkernels read them
      for (int64_t i = 0; i < mc_pad; ++i)
        for (int64_t j = 0; j < nc_pad; ++j) cbuf[i * nc_pad + j] = i < mc && j < nc ? C[(i0 + i) * g.ldc + j0 + j] : 0.0f;
  }
  // Panel row stride: padded so the mr rows read per k do not share L1 sets (not a multiple of 1 KiB).
  int64_t lda_p = round_up(std::min(kKC, g.K), 16) + 16;
  float* ap = scratch_as<float>(ScratchSlot::gemm_a, (size_t)(mc_pad * lda_p));
  simd::GemmTile t{};
  t.lda = lda_p;
  for (int64_t p0 = 0; p0 < g.K; p0 += kKC) {
    int64_t kc = std::min(kKC, g.K - p0);
    bool last = p0 + kc == g.K;
    pack_a_block(p, A, i0, mc, p0, kc, lda_p, ap);
    t.kc = kc;
    for (int64_t jr = 0; jr < nc_pad; jr += p.nr) {
      t.bp = bp ? bp + ((j0 - jb + jr) / p.nr) * g.K * p.nr + p0 * p.nr : nullptr;
      for (int64_t ir = 0; ir < mc_pad; ir += p.mr) {
        t.ap = ap + ir * lda_p;
        if constexpr (std::is_same_v<TI, f16>) {
          if (!bp) {  // unpacked B (few rows; fp16 operands only)
            t.bh = B + p0 * g.ldb + j0 + jr;
            t.ldbh = g.ldb;
            t.bcols = (int)std::min(p.nr, nc - jr);
          }
        }
        t.cin = p0 > 0 || p.accumulate ? cbuf + ir * nc_pad + jr : nullptr;
        t.ldcin = nc_pad;
        t.rows = (int)std::min(p.mr, mc - ir);
        if (last) {
          T* dst = C + (i0 + ir) * g.ldc + j0 + jr;
          if constexpr (sizeof(T) == 2) {
            t.o16 = dst;
            t.o32 = nullptr;
          } else {
            t.o32 = dst;
            t.o16 = nullptr;
          }
          t.ldo = g.ldc;
          t.cols = (int)std::min(p.nr, nc - jr);
        } else {
          t.o32 = cbuf + ir * nc_pad + jr;
          t.o16 = nullptr;
          t.ldo = nc_pad;
          t.cols = (int)p.nr;
        }
        p.o.gemm_micro(t);
      }
    }
  }
}

template <typename TI, typename T>
void gemm_one(const Plan& p, const TI* A, const TI* B, T* C) {
  const GemmShape& g = p.g;
  if (g.K == 0) {
    for (int64_t i = 0; i < g.M; ++i) std::memset(C + i * g.ldc, 0, (size_t)g.N * sizeof(T));
    return;
  }
  double flops_per_col = 2.0 * (double)g.M * (double)g.K;
  // With a few rows of A, packing B would cost as much as the product: microkernels read it as is.
  bool direct_b = std::is_same_v<TI, f16> && !g.trans_b && g.M <= simd::kDirectBRows;
  for (int64_t jb = 0; jb < g.N; jb += p.ncb) {
    int64_t ncb = std::min(p.ncb, g.N - jb);
    int64_t npan = (ncb + p.nr - 1) / p.nr;
    float* bp = nullptr;
    if (!direct_b) {
      bp = scratch_as<float>(ScratchSlot::gemm_b, (size_t)(npan * p.nr * g.K));
      parallel_for(npan, std::max<int64_t>(1, (int64_t)(kSerialFlops / (flops_per_col * (double)p.nr))),
                   [&](int64_t b, int64_t e) {
                     for (int64_t q = b; q < e; ++q)
                       pack_b_panel(p, B, jb + q * p.nr, std::min(p.nr, ncb - q * p.nr), bp + q * p.nr * g.K);
                   });
    }
    int64_t mblocks = (g.M + p.mc - 1) / p.mc, nblocks = (ncb + p.nc - 1) / p.nc;
    double item_flops = flops_per_col * (double)std::min(p.nc, ncb) * (double)std::min(p.mc, g.M) / (double)g.M;
    parallel_for(mblocks * nblocks, std::max<int64_t>(1, (int64_t)(kSerialFlops / item_flops)),
                 [&](int64_t b, int64_t e) {
                   for (int64_t it = b; it < e; ++it) {
                     int64_t ib = it / nblocks, jq = it % nblocks;
                     int64_t i0 = ib * p.mc, j0 = jb + jq * p.nc;
                     tile(p, A, B, bp, jb, i0, std::min(p.mc, g.M - i0), j0, std::min(p.nc, jb + ncb - j0), C);
                   }
                 });
  }
}

template <typename TI, typename T>
void gemm_run(const GemmShape& g, int64_t batch, const TI* const* A, const TI* const* B, T* const* C,
              bool accumulate = false) {
  const simd::IsaOps& o = simd::ops();
  Plan p{g, o, o.gemm_mr, o.gemm_nr, 0, 0, 0, accumulate};
  p.mc = p.mr * std::max<int64_t>(1, kMC / p.mr);
  p.nc = p.nr * std::max<int64_t>(1, kNC / p.nr);
  int64_t cols_fit = kPackedBBytes / (int64_t)(sizeof(float) * std::max<int64_t>(g.K, 1));
  p.ncb = std::max(p.nc, cols_fit / p.nc * p.nc);

  double flops = 2.0 * (double)g.M * (double)g.N * (double)g.K;
  int nt = num_threads();
  // Whole batches per thread when there are enough of them (no sharing of packed B needed).
  bool by_batch = batch > 1 && (batch >= 4 * nt || batch % nt == 0 || flops < kSerialFlops);
  // Few tiles per product: rows per tile chosen so the tiles split evenly over the threads (a 768-row
  // product was five 144-row tiles and a 48-row one, 432 vs 336 rows for 2 threads; 2048 rows 15 tiles).
  int64_t nblk = (std::min(p.ncb, g.N) + p.nc - 1) / p.nc, mblk = (g.M + p.mc - 1) / p.mc;
  if (!by_batch && nt > 1 && mblk * nblk < 8 * nt && flops >= kSerialFlops) {
    while ((mblk * nblk) % nt) ++mblk;
    p.mc = std::max(p.mr, round_up((g.M + mblk - 1) / mblk, p.mr));
  }
  if (by_batch) {
    int64_t grain = std::max<int64_t>(1, (int64_t)(kSerialFlops / std::max(flops, 1.0)));
    parallel_for(batch, grain, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) gemm_one(p, A[i], B[i], C[i]);
    });
  } else {
    for (int64_t i = 0; i < batch; ++i) gemm_one(p, A[i], B[i], C[i]);
  }
}

// Tiny products (RoPE's pair swap: a 2x2 matrix times [2, S] for every head and pair, hundreds per
// op): packing and tiling cost far more than the arithmetic, so each product goes straight to the
// microkernel (B as stored, few rows) or is computed element by element (libm's fma: this file is
// built for the baseline ISA) - the same in-order fma chain over k from +0 and one rounding as every
// other route.
constexpr int64_t kTinyMacs = 64;  // M * N * K of one product

// A tile of all M rows over all of K, op(A) widened into `at` ([M][K]), B read as stored (row stride ldb).
simd::GemmTile whole_k_tile(const GemmShape& g, float* at) {
  simd::GemmTile t{};
  t.kc = g.K;
  t.lda = g.K;
  t.ap = at;
  t.ldbh = g.ldb;
  t.rows = (int)g.M;
  t.ldo = g.ldc;
  return t;
}

template <typename T>
void gemm_tiny(const GemmShape& g, int64_t batch, const f16* const* A, const f16* const* B, T* const* C) {
  auto a_at = [&](const f16* a, int64_t i, int64_t k) { return orion::f16_to_f32(g.trans_a ? a[k * g.lda + i] : a[i * g.lda + k]); };
  auto b_at = [&](const f16* b, int64_t k, int64_t j) { return orion::f16_to_f32(g.trans_b ? b[j * g.ldb + k] : b[k * g.ldb + j]); };
  int64_t grain = std::max<int64_t>(1, (int64_t)(kSerialFlops / (2.0 * (double)(g.M * g.N * g.K))));
  // B as stored and few rows of A: one microkernel call per product, B read in place (its fp16 rows).
  const simd::IsaOps& o = simd::ops();
  const bool micro = !g.trans_b && g.M <= simd::kDirectBRows && g.N <= o.gemm_nr;
  parallel_for(batch, grain, [&](int64_t b0, int64_t b1) {
    if (micro) {
      float at[kTinyMacs];  // op(A) widened, [M][K]
      simd::GemmTile t = whole_k_tile(g, at);
      t.bcols = (int)g.N;
      t.cols = (int)g.N;
      for (int64_t b = b0; b < b1; ++b) {
        for (int64_t i = 0; i < g.M; ++i)
          for (int64_t k = 0; k < g.K; ++k) at[i * g.K + k] = a_at(A[b], i, k);
        t.bh = B[b];
        if constexpr (sizeof(T) == 2) t.o16 = C[b];
        else t.o32 = C[b];
        o.gemm_micro(t);
      }
      return;
    }
    float bt[kTinyMacs];  // op(B) widened, k-major
    for (int64_t b = b0; b < b1; ++b) {
      for (int64_t k = 0; k < g.K; ++k)
        for (int64_t j = 0; j < g.N; ++j) bt[k * g.N + j] = b_at(B[b], k, j);
      for (int64_t i = 0; i < g.M; ++i) {
        float ai[kTinyMacs];
        for (int64_t k = 0; k < g.K; ++k) ai[k] = a_at(A[b], i, k);
        for (int64_t j = 0; j < g.N; ++j) {
          float acc = 0.0f;
          for (int64_t k = 0; k < g.K; ++k) acc = std::fma(ai[k], bt[k * g.N + j], acc);
          if constexpr (sizeof(T) == 2) C[b][i * g.ldc + j] = orion::f32_to_f16(acc);
          else C[b][i * g.ldc + j] = acc;
        }
      }
    }
  });
}

// Few rows of op(A) (attention's query rows of each sequence over its own cache: hundreds of 1 x K by K x T
// products per op) where the ISA has gemm_rows: items are (product, column chunk); each widens its rows of
// op(A); the kernel reads B in place, as stored or transposed (K stored position-major, [T][K]: it
// transposes 16 x 16 blocks in registers). Same fma chain per element as every route.
constexpr int64_t kRowsChunk = 256;  // columns per item: parallelism for one wide product
// Longest K it takes: op(A)'s widened rows (<= 4 x K fp32, 1 MB) stay small; longer products take the
// blocked route, which packs in k blocks.
constexpr int64_t kRowsMaxK = 1 << 16;
// Elements of op(A) from which a few-column product reads A in place rather than packing it (weights:
// 10^5-10^7). A single column (decode's P.V: each head's V [head_dim, T] times one probability row, 9-36
// products per op) reads A in place at any size: packing A's panels cost 8x the product there.
constexpr int64_t kInPlaceMinA = 1 << 16;
// Bytes of B below which a few-rows product stays on one thread: waking the pool costs a few us, a
// core streams ~128 KB in about that time.
constexpr double kSerialRowsBytes = 128 << 10;

// One-row products in a row that share B and write C at a constant stride (grouped-query attention in
// decode: the query heads of one KV head, each one row against that head's keys, or each head's V against
// one probability row): up to kDirectBRows of them form one product of as many rows, so B is read (and,
// stored transposed, transposed in registers) once for the group - where that saves something: a B stored
// as read that fits in L1 is re-read for free, and the group's shorter passes cost more (q.K over 128
// positions: 2.9 vs 2.3 us for 9 heads; over 1024: 20 vs 41; P.V over 128: 3.7 vs 7.6). Returns the group
// starting at b.
constexpr int64_t kL1Bytes = 32 << 10;

template <typename T>
int64_t rows_group(const GemmShape& g, int64_t batch, int64_t b, const f16* const* B, T* const* C) {
  if (g.M != 1 || b + 1 >= batch || B[b + 1] != B[b]) return 1;
  if (!g.trans_b && 2 * g.K * g.N <= kL1Bytes) return 1;
  const std::ptrdiff_t cs = C[b + 1] - C[b];
  if (cs < g.N) return 1;  // rows must not overlap
  int64_t n = 2;
  while (n < simd::kDirectBRows && b + n < batch && B[b + n] == B[b] && C[b + n] - C[b + n - 1] == cs) ++n;
  return n;
}

template <typename T>
void gemm_rows(const GemmShape& g, int64_t batch, const f16* const* A, const f16* const* B, T* const* C) {
  const simd::IsaOps& o = simd::ops();
  // groups of products (see rows_group): [first batch, count]
  std::vector<std::pair<int64_t, int64_t>> groups;
  groups.reserve((size_t)batch);
  for (int64_t b = 0; b < batch;) {
    const int64_t n = rows_group(g, batch, b, B, C);
    groups.push_back({b, n});
    b += n;
  }
  const int64_t rows_max = g.M == 1 ? simd::kDirectBRows : g.M;
  const int64_t chunk = kRowsChunk;
  const int64_t chunks = (g.N + chunk - 1) / chunk, items = (int64_t)groups.size() * chunks;
  const double item_flops = 2.0 * (double)(g.M * g.K) * (double)std::min(g.N, chunk);
  // A few rows stream B once at 1-2 flops per byte: bandwidth, not flops, sets the time (a decode GEMV of
  // 0.5 MB is ~20 us on one core), so an item counts by the bytes of B it reads as well.
  const double item_bytes = 2.0 * (double)g.K * (double)std::min(g.N, chunk);
  const int64_t grain = std::max<int64_t>(1, std::min((int64_t)(kSerialFlops / item_flops),
                                                      (int64_t)(kSerialRowsBytes / item_bytes)));
  parallel_for(items, grain, [&](int64_t lo, int64_t hi) {
    float* at = scratch_as<float>(ScratchSlot::gemm_a, (size_t)(rows_max * g.K));
    int64_t widened = -1;
    simd::GemmTile t = whole_k_tile(g, at);
    t.trans_bh = g.trans_b;
    for (int64_t it = lo; it < hi; ++it) {
      const auto [b, n] = groups[(size_t)(it / chunks)];
      const int64_t j0 = (it % chunks) * chunk;
      if (b != widened) {
        if (n > 1) {  // one row of each product of the group (g.M == 1)
          for (int64_t r = 0; r < n; ++r) {
            if (!g.trans_a) o.f16_to_f32(A[b + r], at + r * g.K, (size_t)g.K);
            else o.cvt_transpose(A[b + r], g.lda, g.K, g.K, 1, at + r * g.K, g.K);
          }
        } else if (!g.trans_a) {
          for (int64_t i = 0; i < g.M; ++i) o.f16_to_f32(A[b] + i * g.lda, at + i * g.K, (size_t)g.K);
        } else {  // A stored [K][lda]: a widening transpose of its first M columns
          o.cvt_transpose(A[b], g.lda, g.K, g.K, g.M, at, g.K);
        }
        widened = b;
      }
      t.rows = (int)(n > 1 ? n : g.M);
      t.ldo = n > 1 ? (int64_t)(C[b + 1] - C[b]) : g.ldc;
      t.cols = t.bcols = (int)std::min(chunk, g.N - j0);
      t.bh = g.trans_b ? B[b] + j0 * g.ldb : B[b] + j0;  // op(B)[:, j0:] = rows j0.. of a transposed B
      if constexpr (sizeof(T) == 2) t.o16 = C[b] + j0;
      else t.o32 = C[b] + j0;
      o.gemm_rows(t);
    }
  });
}

// C = op(A) op(B) computed as C^T = op(B)^T op(A)^T by `route` into a dense scratch, then written into C
// (row stride ldc): for routes that serve the transposed shape better. Same fma chain per element.
template <typename T, typename Route>
void via_transposed(const GemmShape& g, int64_t batch, const f16* const* A, const f16* const* B, T* const* C,
                    Route route) {
  GemmShape s = transposed_problem(g, g.M);
  std::vector<T> tmp((size_t)(batch * g.M * g.N));
  std::vector<T*> pt((size_t)batch);
  for (int64_t b = 0; b < batch; ++b) pt[(size_t)b] = tmp.data() + b * g.M * g.N;
  route(s, batch, B, A, pt.data());
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t j = 0; j < g.N; ++j) {
      const T* src = pt[(size_t)b] + j * g.M;
      for (int64_t i = 0; i < g.M; ++i) C[b][i * g.ldc + j] = src[i];
    }
}

template <typename T>
void gemm_any(const GemmShape& g0, int64_t batch, const f16* const* A, const f16* const* B, T* const* C);

// Many one-column products that share A, each B a column of K and each C a column of M, both back to back in
// memory (RoPE's pair swap on decode's compact live column: one 2 x 2 matrix against 288 pairs): they are one
// product C_all [batch][M] = B_all [batch][K] * op(A)^T, which the panel routes take at once instead of a
// microkernel call per pair. Same fma chain per element.
template <typename T>
bool shared_a_columns(const GemmShape& g, int64_t batch, const f16* const* A, const f16* const* B, T* const* C) {
  if (g.N != 1 || batch < 16 || g.M * g.K > 64) return false;
  for (int64_t b = 1; b < batch; ++b)
    if (A[b] != A[0] || B[b] != B[0] + b * g.K || C[b] != C[0] + b * g.M) return false;
  if (!g.trans_b && g.ldb != 1 && g.K > 1) return false;  // each column's K values contiguous (a row's are)
  if (g.ldc != 1 && g.M > 1) return false;
  GemmShape s;
  s.M = batch;
  s.N = g.M;
  s.K = g.K;
  s.trans_a = false;
  s.lda = g.K;
  s.trans_b = !g.trans_a;  // op(B') = op(A)^T: A stored [M][K] (row-major) is op(B') transposed
  s.ldb = g.lda;
  s.ldc = g.M;
  const f16* a = B[0];
  const f16* b = A[0];
  T* c = C[0];
  gemm_any(s, 1, &a, &b, &c);
  return true;
}

template <typename T>
void gemm_any(const GemmShape& g0, int64_t batch, const f16* const* A, const f16* const* B, T* const* C) {
  if (g0.M < 0 || g0.N < 0 || g0.K < 0 || batch < 0) throw std::invalid_argument("gemm: negative size");
  if (batch == 0 || g0.M == 0 || g0.N == 0) return;
  GemmShape g = g0;  // leading dimensions default to the dense ones
  if (g.lda <= 0) g.lda = g.trans_a ? g.M : g.K;
  if (g.ldb <= 0) g.ldb = g.trans_b ? g.K : g.N;
  if (g.ldc <= 0) g.ldc = g.N;
  if (g.lda < (g.trans_a ? g.M : g.K) || g.ldb < (g.trans_b ? g.K : g.N) || g.ldc < g.N)
    throw std::invalid_argument("gemm: leading dimension smaller than the row length");
  if (g.M * g.N * g.K <= kTinyMacs) {
    if (shared_a_columns(g, batch, A, B, C)) return;
    gemm_tiny(g, batch, A, B, C);
    return;
  }
  if (g.M <= simd::kDirectBRows && g.K <= kRowsMaxK && simd::ops().gemm_rows) {
    gemm_rows(g, batch, A, B, C);
    return;
  }
  // A large row-major op(A) times a few columns (a matmul whose x is a weight input - shared layer
  // programs - on decode's live columns): the panel route would pack A's panels on every call, so
  // compute C^T = op(B)^T op(A)^T on the few-rows route, which reads op(A)^T in place (16 x 16 blocks
  // transposed in registers), and scatter C^T into C. The same fma chain per element.
  if (g.N <= simd::kDirectBRows && !g.trans_a && g.M >= simd::kPanelRows && (g.M * g.K >= kInPlaceMinA || g.N == 1) &&
      g.K <= kRowsMaxK && simd::ops().gemm_rows) {
    via_transposed(g, batch, A, B, C, [](const GemmShape& s, int64_t n, const f16* const* a, const f16* const* b,
                                         T* const* c) { gemm_rows(s, n, a, b, c); });
    return;
  }
  // Few columns and enough rows (a conv1x1 on the decode columns, attention's P.V): the panel kernel,
  // vectorised over rows, pads nothing and streams A once.
  if (g.N <= kPanelMaxCols && g.M >= simd::kPanelRows && g.K > 0) {
    panel_gemm(g, batch, A, nullptr, B, C);
    return;
  }
  // op(A) stored k-major in whole 16-row panels (a weight fed as a program input in the panel layout:
  // shared layer programs' prefill) up to kPanelInPlaceMaxCols columns: the panel kernel reads A in place,
  // where the blocked route would transpose all of it into packed rows on every call (prefill of 64
  // tokens at the SmolLM2-135M shape, one thread: 132 -> 85 ms; 128 tokens 210 -> 173; 256 even).
  if (g.trans_a && g.M % simd::kPanelRows == 0 && g.N <= kPanelInPlaceMaxCols && g.K > 0) {
    panel_gemm(g, batch, A, nullptr, B, C);
    return;
  }
  // Few rows and many columns (attention scores of the decode queries over the cache): the same on
  // C^T = op(B)^T op(A)^T, written straight into C; op(B) is then read in place, not packed. (Up to
  // kDirectBRows rows the microkernels read B unpacked already.)
  if (g.M <= kPanelMaxCols && g.M > simd::kDirectBRows && g.N >= simd::kPanelRows && g.K > 0) {
    panel_gemm(transposed_problem(g, g.ldc), batch, B, nullptr, A, C, true);
    return;
  }
  // Few columns with few rows (under 16: the routes above need a full 16-row panel on one side) would
  // leave most of each NR-wide B panel as padding:
  // compute C^T = op(B)^T op(A)^T instead when that pads less (microkernels take any row count, so
  // only the column side pads), then transpose the result. Every element is the same fma chain, so
  // results do not change.
  int64_t nr = simd::ops().gemm_nr;
  double fill_n = (double)g.N / (double)round_up(g.N, nr), fill_m = (double)g.M / (double)round_up(g.M, nr);
  if (fill_m > 1.25 * fill_n) {
    via_transposed(g, batch, A, B, C, [](const GemmShape& s, int64_t n, const f16* const* a, const f16* const* b,
                                         T* const* c) { gemm_run(s, n, a, b, c); });
    return;
  }
  gemm_run(g, batch, A, B, C);
}

}  // namespace

void gemm_f32(const GemmShape& g0, const float* A, const float* B, float* C) {
  if (g0.M < 0 || g0.N < 0 || g0.K < 0) throw std::invalid_argument("gemm_f32: negative size");
  if (g0.M == 0 || g0.N == 0) return;
  GemmShape g = g0;
  if (g.lda <= 0) g.lda = g.trans_a ? g.M : g.K;
  if (g.ldb <= 0) g.ldb = g.trans_b ? g.K : g.N;
  if (g.ldc <= 0) g.ldc = g.N;
  if (g.lda < (g.trans_a ? g.M : g.K) || g.ldb < (g.trans_b ? g.K : g.N) || g.ldc < g.N)
    throw std::invalid_argument("gemm_f32: leading dimension smaller than the row length");
  // A long K (the trainer's classifier: K = 32,000 positions of the vocabulary) in chunks whose packed B stays
  // within kPackedBBytes, each continuing the fp32 partial sums the chunk before left in C (the same in-order
  // chain per element): one block of B shared by all tiles instead of a K-long one each tile streams again.
  const int64_t chunk = std::max<int64_t>(kKC, kPackedBBytes / (int64_t)(sizeof(float) * std::max<int64_t>(g.N, 1)) / kKC * kKC);
  if (g.K <= 2 * chunk) {
    gemm_run(g, 1, &A, &B, &C);
    return;
  }
  for (int64_t p0 = 0; p0 < g.K; p0 += chunk) {
    GemmShape s = g;
    s.K = std::min(chunk, g.K - p0);
    const float* a = A + (g.trans_a ? p0 * g.lda : p0);
    const float* b = B + (g.trans_b ? p0 : p0 * g.ldb);
    gemm_run(s, 1, &a, &b, &C, p0 > 0);
  }
}

void gemm_f16(const GemmShape& g, int64_t batch, const f16* const* A, const f16* const* B, f16* const* C) {
  gemm_any(g, batch, A, B, C);
}

void gemm_f16_f32out(const GemmShape& g, int64_t batch, const f16* const* A, const f16* const* B,
                     float* const* C) {
  gemm_any(g, batch, A, B, C);
}

}  // namespace orion::cpu::kernels
