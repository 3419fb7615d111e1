// AVX-512 GEMM microkernel (12 x 32 fp32 tile in 24 zmm accumulators) and F16C panel packing.
// GCC 12 flags _mm512_cvtph_ps/_mm512_cvtps_ph internals (undefined pass-through) as uninitialized.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#if (defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12) || (defined(__clang__) && __clang_major__ >= 15)
#define ORION_HAVE_AVX512FP16 1  // the compiler knows the AVX512-FP16 intrinsics (used behind a CPUID check)
#include <cpuid.h>
#endif

#include <algorithm>
#include <array>
#include <utility>

#include "cpu/simd/isa_decls.h"

namespace orion::cpu::simd::avx512 {
namespace {

constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;

inline __mmask16 first(int n) { return n >= 16 ? (__mmask16)0xffff : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1); }

// One finished row of the tile: fp16 (one RNE rounding) or fp32, first `cols` columns.
inline void put_row(__m512 x0, __m512 x1, float* o32, f16* o16, int cols) {
  if (o16) {
    __m256i h0 = _mm512_cvtps_ph(x0, kRound), h1 = _mm512_cvtps_ph(x1, kRound);
    if (cols == 32) {
      _mm256_storeu_si256((__m256i*)o16, h0);
      _mm256_storeu_si256((__m256i*)(o16 + 16), h1);
    } else {
      _mm256_mask_storeu_epi16(o16, first(cols), h0);
      _mm256_mask_storeu_epi16(o16 + 16, first(cols - 16), h1);
    }
  } else if (cols == 32) {
    _mm512_storeu_ps(o32, x0);
    _mm512_storeu_ps(o32 + 16, x1);
  } else {
    _mm512_mask_storeu_ps(o32, first(cols), x0);
    _mm512_mask_storeu_ps(o32 + 16, first(cols - 16), x1);
  }
}

// R rows (1..12): rows of A are read with stride lda; per k two B vectors and R broadcast-FMAs
// each. Arrays are fully unrolled into registers (24 accumulators + 2 B + 1 broadcast for R = 12).
template <int R, bool kDirect = false>
void micro(const GemmTile& t) {
  const float* ap = t.ap;
  const float* bp = t.bp;
  const f16* bh = t.bh;
  const __mmask16 m0 = first(t.bcols), m1 = first(t.bcols - 16);
  const int64_t lda = t.lda;
  __m512 c0[R], c1[R];
#pragma GCC unroll 12
  for (int r = 0; r < R; ++r) {
    c0[r] = t.cin ? _mm512_loadu_ps(t.cin + r * t.ldcin) : _mm512_setzero_ps();
    c1[r] = t.cin ? _mm512_loadu_ps(t.cin + r * t.ldcin + 16) : _mm512_setzero_ps();
  }
  for (int64_t k = 0; k < t.kc; ++k, ++ap) {
    __m512 b0, b1;
    if constexpr (kDirect) {
      b0 = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m0, bh));
      b1 = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m1, bh + 16));
      bh += t.ldbh;
    } else {
      b0 = _mm512_load_ps(bp);
      b1 = _mm512_load_ps(bp + 16);
      bp += 32;
    }
#pragma GCC unroll 12
    for (int r = 0; r < R; ++r) {
      __m512 a = _mm512_set1_ps(ap[r * lda]);
      c0[r] = _mm512_fmadd_ps(a, b0, c0[r]);
      c1[r] = _mm512_fmadd_ps(a, b1, c1[r]);
    }
  }
#pragma GCC unroll 12
  for (int r = 0; r < R; ++r)
    put_row(c0[r], c1[r], t.o32 ? t.o32 + r * t.ldo : nullptr, t.o16 ? t.o16 + r * t.ldo : nullptr, t.cols);
}

// Attention's keys and values stream from DRAM (16 sequences' caches, tens of MB per step): without
// software prefetch the few-rows kernels ran ~1.5x slower on them than on cached operands. Pulls the
// `rows` rows of B (row_bytes each, stride ld fp16) that lie kRowsAhead bytes ahead of `at`; addresses
// past the operand are harmless (a prefetch never faults) and are the next product's, in a cache region.
constexpr int64_t kRowsAhead = 8192;
inline void prefetch_rows(const f16* at, int64_t ld, int rows, int64_t row_bytes, int64_t min_rows_ahead = 1) {
  const int64_t stride = 2 * ld;
  const uintptr_t p = (uintptr_t)at + (uintptr_t)(std::max<int64_t>(min_rows_ahead, kRowsAhead / stride) * stride);
  for (int i = 0; i < rows; ++i)
    for (int64_t o = 0; o < row_bytes; o += 64) _mm_prefetch((const char*)(p + i * stride + o), _MM_HINT_T0);
}

// rows_pass: prefetch at least this many B rows ahead. A weight fed as a program input (shared layer
// programs: Wᵀ [IC, OC], rows of a few KB, 256 bytes of each per pass) streams from DRAM each token; 8 KB
// ahead was only 2-3 rows there (a middle stage of the SmolLM2-135M shape: 0.52 -> 0.47 ms at 24 rows).
constexpr int64_t kRowsAheadN = 24;

// Few rows (1..kDirectBRows) of op(A) times B read as stored, NV x 16 columns [j0, j0 + cols) per pass:
// R x NV independent chains per k. micro<R, true> keeps 2 R, which for one row - attention's query of one
// sequence over its cache, hundreds of such products per op - left every k waiting on the fma latency.
template <int R, int NV>
void rows_pass(const GemmTile& t, int64_t j0, int cols) {
  __m512 acc[R][NV];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
  const __mmask16 ml = first(cols - 16 * (NV - 1));
  const f16* bh = t.bh + j0;
  for (int64_t k = 0; k < t.kc; ++k, bh += t.ldbh) {
    __m512 b[NV];
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v)
      b[v] = _mm512_cvtph_ps(v + 1 < NV ? _mm256_loadu_si256((const __m256i*)(bh + 16 * v))
                                        : _mm256_maskz_loadu_epi16(ml, bh + 16 * v));
    prefetch_rows(bh, t.ldbh, 1, 2 * cols, kRowsAheadN);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const __m512 a = _mm512_set1_ps(t.ap[r * t.lda + k]);
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_fmadd_ps(a, b[v], acc[r][v]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < NV; ++v) {
      const __mmask16 m = v + 1 < NV ? (__mmask16)0xffff : ml;
      const int64_t at = r * t.ldo + j0 + 16 * v;
      if (t.o16)
        _mm256_mask_storeu_epi16(t.o16 + at, m, _mm512_cvtps_ph(acc[r][v], kRound));
      else
        _mm512_mask_storeu_ps(t.o32 + at, m, acc[r][v]);
    }
}

constexpr int64_t kRowsAheadT = 16;     // rows_all_t: prefetch the next block of 16 rows at least

// In-register 16 x 16 transpose: r[i] lane j -> r[j] lane i (unpack / shuffle network).
inline void transpose16(__m512 r[16]) {
  __m512 t[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {
    __m512d a = _mm512_castps_pd(t[4 * i]), b = _mm512_castps_pd(t[4 * i + 1]);
    __m512d c = _mm512_castps_pd(t[4 * i + 2]), d = _mm512_castps_pd(t[4 * i + 3]);
    r[4 * i + 0] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
    r[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
    r[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
    r[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
  }
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 4; ++j) {
      t[8 * i + j] = _mm512_shuffle_f32x4(r[8 * i + j], r[8 * i + 4 + j], 0x88);
      t[8 * i + 4 + j] = _mm512_shuffle_f32x4(r[8 * i + j], r[8 * i + 4 + j], 0xdd);
    }
  for (int j = 0; j < 8; ++j) {
    r[j] = _mm512_shuffle_f32x4(t[j], t[8 + j], 0x88);
    r[8 + j] = _mm512_shuffle_f32x4(t[j], t[8 + j], 0xdd);
  }
}

// The same products with B stored transposed (trans_bh: column j at bh + j * ldbh, K contiguous: attention
// keys stored position-major), 16 columns per block: per 16 k, the block's 16 fp16 rows widened and
// transposed in registers, then R in-order fma chains (no fp32 copy of the chunk; with the prefetch, q.K on
// DRAM-resident keys now runs near P.V's time for the same bytes, where it ran ~1.6x).
template <int R>
inline void rows_t_group(const GemmTile& t, const f16* base, int nr, int64_t k0, int kn, __m512 (&acc)[R]) {
  const __mmask16 mk = first(kn);
  __m512 b[16];
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i)  // rows past nr: no lanes read (the masked load does not fault)
    b[i] = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(i < nr ? mk : (__mmask16)0, base + std::min(i, nr - 1) * t.ldbh + k0));
  transpose16(b);  // b[k] lane i = column i of the block at k0 + k
  if (kn == 16) {
#pragma GCC unroll 16
    for (int k = 0; k < 16; ++k)
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(t.ap[r * t.lda + k0 + k]), b[k], acc[r]);
  } else {
    for (int k = 0; k < kn; ++k)
      for (int r = 0; r < R; ++r) acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(t.ap[r * t.lda + k0 + k]), b[k], acc[r]);
  }
}

template <int R>
void rows_all_t(const GemmTile& t) {
  for (int64_t j = 0; j < t.cols; j += 16) {
    const int nr = (int)std::min<int64_t>(16, t.cols - j);
    const f16* base = t.bh + j * t.ldbh;
    // at least the next blocks' rows: a weight read in place (rows of a few KB: 8 KB is under one block of
    // 16) streams from DRAM each token
    prefetch_rows(base, t.ldbh, 16, 2 * t.kc, kRowsAheadT);
    __m512 acc[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
    for (int64_t k0 = 0; k0 < t.kc; k0 += 16) rows_t_group<R>(t, base, nr, k0, (int)std::min<int64_t>(16, t.kc - k0), acc);
    const __mmask16 m = first(nr);
    for (int r = 0; r < R; ++r) {
      if (t.o16)
        _mm256_mask_storeu_epi16(t.o16 + r * t.ldo + j, m, _mm512_cvtps_ph(acc[r], kRound));
      else
        _mm512_mask_storeu_ps(t.o32 + r * t.ldo + j, m, acc[r]);
    }
  }
}

template <int R, size_t... I>
constexpr auto rows_passes(std::index_sequence<I...>) {
  return std::array<void (*)(const GemmTile&, int64_t, int), sizeof...(I)>{&rows_pass<R, (int)I + 1>...};
}

// All t.cols columns, in passes of up to NVMAX vectors (accumulators + B vectors stay in the 32 registers).
template <int R, int NVMAX = (R <= 2 ? 8 : 4)>
void rows_all(const GemmTile& t) {
  static constexpr auto passes = rows_passes<R>(std::make_index_sequence<NVMAX>());
  for (int64_t j0 = 0; j0 < t.cols; j0 += 16 * NVMAX) {
    const int cols = (int)std::min<int64_t>(16 * NVMAX, t.cols - j0);
    passes[(size_t)(cols + 15) / 16 - 1](t, j0, cols);
  }
}

}  // namespace

void gemm_rows(const GemmTile& t) {
  if (t.trans_bh) {
    switch (t.rows) {
      case 1: return rows_all_t<1>(t);
      case 2: return rows_all_t<2>(t);
      case 3: return rows_all_t<3>(t);
      default: return rows_all_t<4>(t);
    }
  }
  switch (t.rows) {
    case 1: return rows_all<1>(t);
    case 2: return rows_all<2>(t);
    case 3: return rows_all<3>(t);
    default: return rows_all<4>(t);
  }
}

void gemm_micro(const GemmTile& t) {
  if (t.bh) {
    switch (t.rows) {
      case 1: return micro<1, true>(t);
      case 2: return micro<2, true>(t);
      case 3: return micro<3, true>(t);
      default: return micro<4, true>(t);
    }
  }
  switch (t.rows) {
    case 1: return micro<1>(t);
    case 2: return micro<2>(t);
    case 3: return micro<3>(t);
    case 4: return micro<4>(t);
    case 5: return micro<5>(t);
    case 6: return micro<6>(t);
    case 7: return micro<7>(t);
    case 8: return micro<8>(t);
    case 9: return micro<9>(t);
    case 10: return micro<10>(t);
    case 11: return micro<11>(t);
    default: return micro<12>(t);
  }
}

void gemm_pack_rows(const f16* src, int64_t ld, int64_t kc, int64_t cols, int nr, float* dst) {
  for (int64_t k = 0; k < kc; ++k, src += ld, dst += nr) {
    for (int j = 0; j < nr; j += 16) {
      __m512 f = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(first((int)(cols - j)), src + j));
      _mm512_mask_storeu_ps(dst + j, first(nr - j), f);
    }
  }
}

}  // namespace orion::cpu::simd::avx512

namespace orion::cpu::simd::avx512 {

namespace {

// Software prefetch of A rows ahead (2 KB of a packed panel): weights stream from DRAM each token and
// the hardware prefetcher alone left cold convs ~10% slower than cached ones.
constexpr int kPrefetchRows = 64;

// NC columns of one 16-row panel: acc[j] holds column j (lane = row). Per k one fp16 row of the
// panel widened in-register and NC FMAs with B broadcast from memory; FMA-bound for NC >= 4.
template <int NC>
void panel(const PanelTile& t) {
  __m512 acc[16];
#pragma GCC unroll 16
  for (int j = 0; j < 16; ++j) acc[j] = _mm512_setzero_ps();
  const f16* a = t.ap;
  const float* b = t.bp;
  for (int64_t k = 0; k < t.K; ++k, a += t.lda, b += t.ldb) {
    _mm_prefetch((const char*)(a + kPrefetchRows * t.lda), _MM_HINT_T0);
    __m512 av = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)a));
#pragma GCC unroll 16
    for (int j = 0; j < NC; ++j) acc[j] = _mm512_fmadd_ps(av, _mm512_set1_ps(b[j]), acc[j]);
  }
  if (t.trans_c) {  // acc[j] is already a contiguous run of C
    const __mmask16 m = first(t.rows);
    for (int j = 0; j < NC; ++j) {
      if (t.o16)
        _mm256_mask_storeu_epi16(t.o16 + j * t.ldo, m, _mm512_cvtps_ph(acc[j], kRound));
      else
        _mm512_mask_storeu_ps(t.o32 + j * t.ldo, m, acc[j]);
    }
    return;
  }
  transpose16(acc);  // acc[r] = row r of the tile
  const __mmask16 m = first(t.cols);
  for (int r = 0; r < t.rows; ++r) {
    if (t.o16)
      _mm256_mask_storeu_epi16(t.o16 + r * t.ldo, m, _mm512_cvtps_ph(acc[r], kRound));
    else
      _mm512_mask_storeu_ps(t.o32 + r * t.ldo, m, acc[r]);
  }
}

// Stores the finished accumulators of panels<> / panels_q8<>: acc[q][j] is column j of panel q.
template <int NC, int P>
void store_panels(const PanelTile& t, __m512 (&acc)[P][NC]) {
  for (int q = 0; q < P; ++q) {
    const int rows = std::min(16, t.rows - 16 * q);
    if (rows <= 0) break;
    const __mmask16 m = first(rows);
    if (t.trans_c) {
      for (int j = 0; j < NC; ++j) {
        if (t.o16)
          _mm256_mask_storeu_epi16(t.o16 + j * t.ldo + 16 * q, m, _mm512_cvtps_ph(acc[q][j], kRound));
        else
          _mm512_mask_storeu_ps(t.o32 + j * t.ldo + 16 * q, m, acc[q][j]);
      }
      continue;
    }
    if (NC == 1 && t.cols == 1 && t.ldo == 1) {  // one column into a dense one (decode's compact GEMV): lanes = rows
      if (t.o16)
        _mm256_mask_storeu_epi16(t.o16 + 16 * q, m, _mm512_cvtps_ph(acc[q][0], kRound));
      else
        _mm512_mask_storeu_ps(t.o32 + 16 * q, m, acc[q][0]);
      continue;
    }
    __m512 r[16];
    for (int j = 0; j < 16; ++j) r[j] = j < NC ? acc[q][j] : _mm512_setzero_ps();
    transpose16(r);
    const __mmask16 mc = first(t.cols);
    for (int i = 0; i < rows; ++i) {
      int64_t at = (int64_t)(16 * q + i) * t.ldo;
      if (t.o16)
        _mm256_mask_storeu_epi16(t.o16 + at, mc, _mm512_cvtps_ph(r[i], kRound));
      else
        _mm512_mask_storeu_ps(t.o32 + at, mc, r[i]);
    }
  }
}

// The multi-panel GEMV of every weight form: NC (<= 4) columns of P whole panels at once, P x NC independent chains
// (one column is a single chain per panel, latency-bound at 32 bytes of A per fma latency). `Rows` (constructed from
// the tile) gives k-row k of panel q as 16 fp32 lanes - fp16 values widened, or codes decoded in registers exactly as
// decode_ss8 / decode_lut4 decode them - so every form runs the same fma chains on the same values. Rows past t.rows
// come from the panels' zero padding and are not stored.
template <int NC, int P, class Rows>
void panels_of(const PanelTile& t) {
  Rows rows(t);
  __m512 acc[P][NC];
#pragma GCC unroll 16
  for (int q = 0; q < P; ++q)
#pragma GCC unroll 4
    for (int j = 0; j < NC; ++j) acc[q][j] = _mm512_setzero_ps();
  const auto* a = rows.a;               // k-row k of panel 0; panel q's is pstride further
  const float* b = t.bp;
  for (int64_t k = 0; k < t.K; ++k, a += rows.step, b += t.ldb) {
#pragma GCC unroll 16
    for (int q = 0; q < P; ++q) {
      rows.prefetch(a, q);
      const __m512 av = rows.row(a, q);
#pragma GCC unroll 4
      for (int j = 0; j < NC; ++j) acc[q][j] = _mm512_fmadd_ps(av, _mm512_set1_ps(b[j]), acc[q][j]);
    }
  }
  store_panels<NC, P>(t, acc);
}

// fp16 panels (pstride apart), k-rows lda apart.
struct F16Rows {
  const f16* a;
  int64_t ps, step;
  explicit F16Rows(const PanelTile& t) : a(t.ap), ps(t.pstride), step(t.lda) {}
  void prefetch(const f16* k, int q) const {
    _mm_prefetch((const char*)(k + q * ps + kPrefetchRows * step), _MM_HINT_T0);
  }
  __m512 row(const f16* k, int q) const { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)(k + q * ps))); }
};

template <int NC, int P>
void panels(const PanelTile& t) {
  panels_of<NC, P, F16Rows>(t);
}

void panel_one(const PanelTile& t) {
  switch (t.cols) {
    case 1: return panel<1>(t);
    case 2: return panel<2>(t);
    case 3: return panel<3>(t);
    case 4: return panel<4>(t);
    case 5: return panel<5>(t);
    case 6: return panel<6>(t);
    case 7: return panel<7>(t);
    case 8: return panel<8>(t);
    case 9: return panel<9>(t);
    case 10: return panel<10>(t);
    case 11: return panel<11>(t);
    case 12: return panel<12>(t);
    case 13: return panel<13>(t);
    case 14: return panel<14>(t);
    case 15: return panel<15>(t);
    default: return panel<16>(t);
  }
}

}  // namespace

int panel_group(int cols) { return cols <= 1 ? 8 : cols == 2 ? 4 : cols <= 4 ? 2 : 1; }

namespace {

// 8-bit code panels with a scale / offset per row: each k-row (16 codes) decoded exactly as decode_ss8 does (fp32
// (code - of) * sc, rounded to fp16 and widened back).
template <int P, bool S>
struct Q8Rows {
  const uint8_t* a;
  int64_t ps;
  __m512 s[P], o[P];
  explicit Q8Rows(const PanelTile& t) : a(t.q8), ps(t.pstride) {
#pragma GCC unroll 16
    for (int q = 0; q < P; ++q) {
      s[q] = _mm512_loadu_ps(t.sc + 16 * q);
      o[q] = _mm512_loadu_ps(t.of + 16 * q);
    }
  }
  static constexpr int64_t step = 16;
  void prefetch(const uint8_t* k, int q) const {
    _mm_prefetch((const char*)(k + q * ps + 16 * kPrefetchRows), _MM_HINT_T0);
  }
  __m512 row(const uint8_t* k, int q) const {
    const __m128i c8 = _mm_loadu_si128((const __m128i*)(k + q * ps));
    const __m512i c = S ? _mm512_cvtepi8_epi32(c8) : _mm512_cvtepu8_epi32(c8);
    const __m512 v = _mm512_mul_ps(_mm512_sub_ps(_mm512_cvtepi32_ps(c), o[q]), s[q]);
    return _mm512_cvtph_ps(_mm512_cvtps_ph(v, kRound));
  }
};

template <int NC, int P, bool S>
void panels_q8(const PanelTile& t) {
  panels_of<NC, P, Q8Rows<P, S>>(t);
}

#if defined(ORION_HAVE_AVX512FP16)
// panels_q8 with the decode in fp16 arithmetic (AVX512-FP16), two k of a panel per 32-lane vector:
// code - of is an exact small integer in fp16 and fp16 * fp16 rounds the exact product once, as the
// fp32 path's (exact) product rounded to fp16 does - so the same values (t.q8_fp16 promises integer
// offsets and fp16 scales). About half the instructions per element: the fp32 path is bound by them.
template <int NC, int P, bool S>
__attribute__((target("avx512fp16"))) void panels_q8_fp16(const PanelTile& t) {
  __m512 acc[P][NC];
  __m512h s[P], o[P];
#pragma GCC unroll 16
  for (int q = 0; q < P; ++q) {
    __m256h s16 = _mm512_cvtxps_ph(_mm512_loadu_ps(t.sc + 16 * q));   // exact: fp16 values
    __m256h o16 = _mm512_cvtxps_ph(_mm512_loadu_ps(t.of + 16 * q));
    s[q] = _mm512_castsi512_ph(_mm512_broadcast_i64x4(_mm256_castph_si256(s16)));   // both k halves
    o[q] = _mm512_castsi512_ph(_mm512_broadcast_i64x4(_mm256_castph_si256(o16)));
#pragma GCC unroll 4
    for (int j = 0; j < NC; ++j) acc[q][j] = _mm512_setzero_ps();
  }
  const uint8_t* a = t.q8;
  const float* b = t.bp;
  const int64_t ps = t.pstride;
  int64_t k = 0;
  for (; k + 2 <= t.K; k += 2, a += 32, b += 2 * t.ldb) {
#pragma GCC unroll 16
    for (int q = 0; q < P; ++q) {
      _mm_prefetch((const char*)(a + q * ps + 16 * kPrefetchRows), _MM_HINT_T0);
      __m256i c8 = _mm256_loadu_si256((const __m256i*)(a + q * ps));
      __m512i c = S ? _mm512_cvtepi8_epi16(c8) : _mm512_cvtepu8_epi16(c8);
      __m512h v = _mm512_mul_ph(_mm512_sub_ph(_mm512_cvtepi16_ph(c), o[q]), s[q]);
      __m512i vi = _mm512_castph_si512(v);
      __m512 a0 = _mm512_cvtph_ps(_mm512_castsi512_si256(vi)), a1 = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(vi, 1));
#pragma GCC unroll 4
      for (int j = 0; j < NC; ++j) {
        acc[q][j] = _mm512_fmadd_ps(a0, _mm512_set1_ps(b[j]), acc[q][j]);
        acc[q][j] = _mm512_fmadd_ps(a1, _mm512_set1_ps(b[t.ldb + j]), acc[q][j]);
      }
    }
  }
  if (k < t.K) {  // odd K: the last k alone
    for (int q = 0; q < P; ++q) {
      __m128i c8 = _mm_loadu_si128((const __m128i*)(a + q * ps));
      __m256i c = S ? _mm256_cvtepi8_epi16(c8) : _mm256_cvtepu8_epi16(c8);
      __m256h v = _mm256_mul_ph(_mm256_sub_ph(_mm256_cvtepi16_ph(c), _mm512_castph512_ph256(o[q])),
                                _mm512_castph512_ph256(s[q]));
      __m512 a0 = _mm512_cvtph_ps(_mm256_castph_si256(v));
      for (int j = 0; j < NC; ++j) acc[q][j] = _mm512_fmadd_ps(a0, _mm512_set1_ps(b[j]), acc[q][j]);
    }
  }
  store_panels<NC, P>(t, acc);
}

// CPUID.(EAX=7, ECX=0):EDX bit 23 (the OS's ZMM state is covered by the AVX-512 check that chose this
// table).
bool has_avx512fp16() {
  static const bool yes = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    return __get_cpuid_count(7, 0, &a, &b, &c, &d) && (d & (1u << 23));
  }();
  return yes;
}
#endif

}  // namespace

void gemm_panel_q8(const PanelTile& t) {
  const bool s = t.q8_signed;
#if defined(ORION_HAVE_AVX512FP16)
  if (t.q8_fp16 && has_avx512fp16()) {
    switch (t.cols) {
      case 1: return s ? panels_q8_fp16<1, 8, true>(t) : panels_q8_fp16<1, 8, false>(t);
      case 2: return s ? panels_q8_fp16<2, 4, true>(t) : panels_q8_fp16<2, 4, false>(t);
      case 3: return s ? panels_q8_fp16<3, 2, true>(t) : panels_q8_fp16<3, 2, false>(t);
      default: return s ? panels_q8_fp16<4, 2, true>(t) : panels_q8_fp16<4, 2, false>(t);
    }
  }
#endif
  switch (t.cols) {
    case 1: return s ? panels_q8<1, 8, true>(t) : panels_q8<1, 8, false>(t);
    case 2: return s ? panels_q8<2, 4, true>(t) : panels_q8<2, 4, false>(t);
    case 3: return s ? panels_q8<3, 2, true>(t) : panels_q8<3, 2, false>(t);
    default: return s ? panels_q8<4, 2, true>(t) : panels_q8<4, 2, false>(t);
  }
}

namespace {

// 16 bytes of 4-bit codes (LSB-first: code 2i the low nibble of byte i, code 2i + 1 its high one) as 32 16-bit
// table indices in order: each byte widened to a 32-bit lane whose low and high halves take its two nibbles. Two
// k-rows of a panel (decode_lut4), or one in the low half when the high 8 bytes are zero (panels_lut4).
inline __m512i lut4_idx(__m128i bytes, __m512i m_lo, __m512i m_hi) {
  const __m512i b = _mm512_cvtepu8_epi32(bytes);
  return _mm512_or_si512(_mm512_and_si512(b, m_lo), _mm512_slli_epi32(_mm512_and_si512(b, m_hi), 12));
}

// 4-bit LUT code panels, one table each: each k-row (8 bytes) looked up exactly as decode_lut4 does (a 16-bit permute
// through the table: the fp16 values themselves), widened.
template <int P>
struct Lut4Rows {
  const uint8_t* a;
  int64_t ps;
  __m512i tab[P];
  __m512i m_lo = _mm512_set1_epi32(0x0F), m_hi = _mm512_set1_epi32(0xF0);
  explicit Lut4Rows(const PanelTile& t) : a(t.q4), ps(t.pstride) {
#pragma GCC unroll 16
    for (int q = 0; q < P; ++q) tab[q] = _mm512_zextsi256_si512(_mm256_loadu_si256((const __m256i*)t.tabs[q]));
  }
  static constexpr int64_t step = 8;
  void prefetch(const uint8_t* k, int q) const {
    _mm_prefetch((const char*)(k + q * ps + 8 * kPrefetchRows), _MM_HINT_T0);
  }
  __m512 row(const uint8_t* k, int q) const {
    const __m512i v =
        _mm512_permutexvar_epi16(lut4_idx(_mm_loadl_epi64((const __m128i*)(k + q * ps)), m_lo, m_hi), tab[q]);
    return _mm512_cvtph_ps(_mm512_castsi512_si256(v));
  }
};

template <int NC, int P>
void panels_lut4(const PanelTile& t) {
  panels_of<NC, P, Lut4Rows<P>>(t);
}

}  // namespace

void gemm_panel_lut4(const PanelTile& t) {
  switch (t.cols) {
    case 1: return panels_lut4<1, 8>(t);
    case 2: return panels_lut4<2, 4>(t);
    case 3: return panels_lut4<3, 2>(t);
    default: return panels_lut4<4, 2>(t);
  }
}

void decode_ss8(const uint8_t* codes, int64_t n, bool is_signed, const float* sc, const float* of, f16* dst) {
  const __m512 s = _mm512_loadu_ps(sc), o = _mm512_loadu_ps(of);
  for (int64_t k = 0; k < n; ++k, codes += 16, dst += 16) {
    __m128i b = _mm_loadu_si128((const __m128i*)codes);
    __m512i c = is_signed ? _mm512_cvtepi8_epi32(b) : _mm512_cvtepu8_epi32(b);
    __m512 v = _mm512_mul_ps(_mm512_sub_ps(_mm512_cvtepi32_ps(c), o), s);
    _mm256_storeu_si256((__m256i*)dst, _mm512_cvtps_ph(v, kRound));
  }
}

// Two k-rows (16 bytes, 32 codes) at a time: 32 indices in order (lut4_idx), then one 16-bit permute through the table.
void decode_lut4(const uint8_t* codes, int64_t n, const f16* table, f16* dst) {
  const __m512i tab = _mm512_zextsi256_si512(_mm256_loadu_si256((const __m256i*)table));
  const __m512i m_lo = _mm512_set1_epi32(0x0F), m_hi = _mm512_set1_epi32(0xF0);
  int64_t k = 0;
  for (; k + 2 <= n; k += 2) {
    const __m512i idx = lut4_idx(_mm_loadu_si128((const __m128i*)(codes + 8 * k)), m_lo, m_hi);
    _mm512_storeu_si512(dst + 16 * k, _mm512_permutexvar_epi16(idx, tab));
  }
  if (k < n) decode_lut4_ref(codes + 8 * k, n - k, table, dst + 16 * k);
}

void gemm_panel(const PanelTile& t) {
  if (t.panels > 1 && t.panels == panel_group(t.cols)) {
    switch (t.cols) {
      case 1: return panels<1, 8>(t);
      case 2: return panels<2, 4>(t);
      case 3: return panels<3, 2>(t);
      case 4: return panels<4, 2>(t);
    }
  }
  // Fewer panels than a full group (a weight input read in place, in panels of 32 or 64 rows, on decode's
  // one column): still one chain per panel in flight at once - one panel at a time would wait on the fma
  // latency at every k.
  if (t.cols == 1 && t.panels > 1 && t.panels < 8) {
    switch (t.panels) {
      case 2: return panels<1, 2>(t);
      case 3: return panels<1, 3>(t);
      case 4: return panels<1, 4>(t);
      case 5: return panels<1, 5>(t);
      case 6: return panels<1, 6>(t);
      default: return panels<1, 7>(t);
    }
  }
  if (t.cols == 2 && t.panels > 1 && t.panels < 4) return t.panels == 2 ? panels<2, 2>(t) : panels<2, 3>(t);
  for_each_panel(t, panel_one);
}

// 16 x 16 blocks: widen 16 rows, transpose in registers (unpack / shuffle network), store 16 columns.
void cvt_transpose(const f16* src, int64_t ld, int64_t rows, int64_t rows_pad, int64_t cols, float* dst,
                   int64_t ldd) {
  for (int64_t r0 = 0; r0 < rows_pad; r0 += 16) {
    int nr = (int)std::min<int64_t>(16, std::max<int64_t>(0, rows - r0));
    __mmask16 out_mask = first((int)std::min<int64_t>(16, rows_pad - r0));
    for (int64_t c0 = 0; c0 < cols; c0 += 16) {
      int nc = (int)std::min<int64_t>(16, cols - c0);
      __m512 r[16];
      for (int i = 0; i < 16; ++i)
        r[i] = i < nr ? _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(first(nc), src + (r0 + i) * ld + c0))
                      : _mm512_setzero_ps();
      transpose16(r);
      for (int j = 0; j < nc; ++j) _mm512_mask_storeu_ps(dst + (c0 + j) * ldd + r0, out_mask, r[j]);
    }
  }
}

}  // namespace orion::cpu::simd::avx512
