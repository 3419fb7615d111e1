// AVX2 GEMM microkernel (6 x 16 fp32 tile in 12 ymm accumulators) and F16C panel packing.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "cpu/simd/isa_decls.h"

namespace orion::cpu::simd::avx2 {
namespace {

constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;

// One finished row of the tile: fp16 (one RNE rounding) or fp32, first `cols` columns.
inline void put_row(__m256 x0, __m256 x1, float* o32, f16* o16, int cols) {
  if (o16) {
    __m128i h0 = _mm256_cvtps_ph(x0, kRound), h1 = _mm256_cvtps_ph(x1, kRound);
    if (cols == 16) {
      _mm_storeu_si128((__m128i*)o16, h0);
      _mm_storeu_si128((__m128i*)(o16 + 8), h1);
    } else {
      alignas(16) f16 tmp[16];
      _mm_store_si128((__m128i*)tmp, h0);
      _mm_store_si128((__m128i*)(tmp + 8), h1);
      std::memcpy(o16, tmp, (size_t)cols * sizeof(f16));
    }
  } else if (cols == 16) {
    _mm256_storeu_ps(o32, x0);
    _mm256_storeu_ps(o32 + 8, x1);
  } else {
    alignas(32) float tmp[16];
    _mm256_store_ps(tmp, x0);
    _mm256_store_ps(tmp + 8, x1);
    std::memcpy(o32, tmp, (size_t)cols * sizeof(float));
  }
}

}  // namespace


namespace {

// R rows (1..6): per k two B vectors and R broadcast-FMAs each (12 accumulators for R = 6).
inline __m256 load_h8(const f16* p, int n) {  // n valid halves (rest zero)
  if (n >= 8) return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)p));
  alignas(16) f16 h[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  if (n > 0) std::memcpy(h, p, (size_t)n * sizeof(f16));
  return _mm256_cvtph_ps(_mm_load_si128((const __m128i*)h));
}

template <int R, bool kDirect = false>
void micro(const GemmTile& t) {
  const float* ap = t.ap;
  const float* bp = t.bp;
  const f16* bh = t.bh;
  const int64_t lda = t.lda;
  __m256 c0[R], c1[R];
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r) {
    c0[r] = t.cin ? _mm256_loadu_ps(t.cin + r * t.ldcin) : _mm256_setzero_ps();
    c1[r] = t.cin ? _mm256_loadu_ps(t.cin + r * t.ldcin + 8) : _mm256_setzero_ps();
  }
  for (int64_t k = 0; k < t.kc; ++k, ++ap) {
    __m256 b0, b1;
    if constexpr (kDirect) {
      b0 = load_h8(bh, t.bcols);
      b1 = load_h8(bh + 8, t.bcols - 8);
      bh += t.ldbh;
    } else {
      b0 = _mm256_load_ps(bp);
      b1 = _mm256_load_ps(bp + 8);
      bp += 16;
    }
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r) {
      __m256 a = _mm256_broadcast_ss(ap + r * lda);
      c0[r] = _mm256_fmadd_ps(a, b0, c0[r]);
      c1[r] = _mm256_fmadd_ps(a, b1, c1[r]);
    }
  }
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r)
    put_row(c0[r], c1[r], t.o32 ? t.o32 + r * t.ldo : nullptr, t.o16 ? t.o16 + r * t.ldo : nullptr, t.cols);
}

}  // namespace

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
    default: return micro<6>(t);
  }
}

void gemm_pack_rows(const f16* src, int64_t ld, int64_t kc, int64_t cols, int nr, float* dst) {
  for (int64_t k = 0; k < kc; ++k, src += ld, dst += nr) {
    for (int j = 0; j < nr; j += 8) {
      int64_t left = cols - j;
      __m128i h;
      if (left >= 8) {
        h = _mm_loadu_si128((const __m128i*)(src + j));
      } else {
        alignas(16) uint16_t tmp[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        if (left > 0) std::memcpy(tmp, src + j, (size_t)left * 2);
        h = _mm_load_si128((const __m128i*)tmp);
      }
      __m256 f = _mm256_cvtph_ps(h);
      if (nr - j >= 8) {
        _mm256_storeu_ps(dst + j, f);
      } else {
        alignas(32) float t[8];
        _mm256_store_ps(t, f);
        std::memcpy(dst + j, t, (size_t)(nr - j) * 4);
      }
    }
  }
}

}  // namespace orion::cpu::simd::avx2

namespace orion::cpu::simd::avx2 {

// 8 x 8 blocks: widen 8 rows, transpose in registers, store 8 columns (partial blocks via a buffer).
void cvt_transpose(const f16* src, int64_t ld, int64_t rows, int64_t rows_pad, int64_t cols, float* dst,
                   int64_t ldd) {
  for (int64_t r0 = 0; r0 < rows_pad; r0 += 8) {
    int nr = (int)std::min<int64_t>(8, std::max<int64_t>(0, rows - r0));
    int nout = (int)std::min<int64_t>(8, rows_pad - r0);
    for (int64_t c0 = 0; c0 < cols; c0 += 8) {
      int nc = (int)std::min<int64_t>(8, cols - c0);
      __m256 r[8];
      for (int i = 0; i < 8; ++i) {
        if (i >= nr) {
          r[i] = _mm256_setzero_ps();
        } else if (nc == 8) {
          r[i] = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(src + (r0 + i) * ld + c0)));
        } else {
          alignas(16) f16 h[8] = {0, 0, 0, 0, 0, 0, 0, 0};
          std::memcpy(h, src + (r0 + i) * ld + c0, (size_t)nc * sizeof(f16));
          r[i] = _mm256_cvtph_ps(_mm_load_si128((const __m128i*)h));
        }
      }
      __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
      __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
      __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
      __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
      __m256 u0 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(1, 0, 1, 0)), u1 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(3, 2, 3, 2));
      __m256 u2 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(1, 0, 1, 0)), u3 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(3, 2, 3, 2));
      __m256 u4 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(1, 0, 1, 0)), u5 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(3, 2, 3, 2));
      __m256 u6 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(1, 0, 1, 0)), u7 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(3, 2, 3, 2));
      r[0] = _mm256_permute2f128_ps(u0, u4, 0x20);
      r[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
      r[2] = _mm256_permute2f128_ps(u2, u6, 0x20);
      r[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
      r[4] = _mm256_permute2f128_ps(u0, u4, 0x31);
      r[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
      r[6] = _mm256_permute2f128_ps(u2, u6, 0x31);
      r[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
      for (int j = 0; j < nc; ++j) {
        float* o = dst + (c0 + j) * ldd + r0;
        if (nout == 8) {
          _mm256_storeu_ps(o, r[j]);
        } else {
          alignas(32) float tmp[8];
          _mm256_store_ps(tmp, r[j]);
          std::memcpy(o, tmp, (size_t)nout * sizeof(float));
        }
      }
    }
  }
}

}  // namespace orion::cpu::simd::avx2

namespace orion::cpu::simd::avx2 {
namespace {

// NC (<= 6) columns of one 16-row panel in 2 x NC ymm accumulators (lane = row); the panel is
// re-read per group of 6 columns. Results leave through a small buffer (scatter to rows).
template <int NC>
void panel_cols(const PanelTile& t, int j0) {
  __m256 lo[NC], hi[NC];
  for (int j = 0; j < NC; ++j) lo[j] = hi[j] = _mm256_setzero_ps();
  const f16* a = t.ap;
  const float* b = t.bp + j0;
  for (int64_t k = 0; k < t.K; ++k, a += t.lda, b += t.ldb) {
    _mm_prefetch((const char*)(a + 64 * t.lda), _MM_HINT_T0);  // A rows ahead (weights stream from DRAM)
    __m256 a0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)a));
    __m256 a1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(a + 8)));
#pragma GCC unroll 6
    for (int j = 0; j < NC; ++j) {
      __m256 bj = _mm256_broadcast_ss(b + j);
      lo[j] = _mm256_fmadd_ps(a0, bj, lo[j]);
      hi[j] = _mm256_fmadd_ps(a1, bj, hi[j]);
    }
  }
  if (t.o16) {
    alignas(16) f16 buf[NC][16];
    for (int j = 0; j < NC; ++j) {
      _mm_store_si128((__m128i*)buf[j], _mm256_cvtps_ph(lo[j], kRound));
      _mm_store_si128((__m128i*)(buf[j] + 8), _mm256_cvtps_ph(hi[j], kRound));
    }
    for (int r = 0; r < t.rows; ++r)
      for (int j = 0; j < NC; ++j) t.o16[t.trans_c ? (j0 + j) * t.ldo + r : r * t.ldo + j0 + j] = buf[j][r];
  } else {
    alignas(32) float buf[NC][16];
    for (int j = 0; j < NC; ++j) {
      _mm256_store_ps(buf[j], lo[j]);
      _mm256_store_ps(buf[j] + 8, hi[j]);
    }
    for (int r = 0; r < t.rows; ++r)
      for (int j = 0; j < NC; ++j) t.o32[t.trans_c ? (j0 + j) * t.ldo + r : r * t.ldo + j0 + j] = buf[j][r];
  }
}

// Stores the finished accumulators of panels_of<>: acc[q][j] is column j of panel q
// (rows 0-7, 8-15).
template <int NC, int P>
void store_panels(const PanelTile& t, __m256 (&acc)[P][NC][2]) {
  for (int q = 0; q < P; ++q) {
    const int rows = std::min(16, t.rows - 16 * q);
    if (rows <= 0) break;
    alignas(32) float buf[NC][16];
    alignas(16) f16 hbuf[NC][16];
    for (int j = 0; j < NC; ++j) {
      _mm256_store_ps(buf[j], acc[q][j][0]);
      _mm256_store_ps(buf[j] + 8, acc[q][j][1]);
      _mm_store_si128((__m128i*)hbuf[j], _mm256_cvtps_ph(acc[q][j][0], kRound));
      _mm_store_si128((__m128i*)(hbuf[j] + 8), _mm256_cvtps_ph(acc[q][j][1], kRound));
    }
    for (int r = 0; r < rows; ++r)
      for (int j = 0; j < NC; ++j) {
        int64_t at = t.trans_c ? j * t.ldo + 16 * q + r : (int64_t)(16 * q + r) * t.ldo + j;
        if (t.o16)
          t.o16[at] = hbuf[j][r];
        else
          t.o32[at] = buf[j][r];
      }
  }
}

// The fma chains of one k-row of a panel: rows 0-7 (a0) and 8-15 (a1) times NC broadcast columns.
template <int NC>
inline void fma_row(__m256 a0, __m256 a1, const float* b, __m256 (&acc)[NC][2]) {
#pragma GCC unroll 2
  for (int j = 0; j < NC; ++j) {
    __m256 bj = _mm256_broadcast_ss(b + j);
    acc[j][0] = _mm256_fmadd_ps(a0, bj, acc[j][0]);
    acc[j][1] = _mm256_fmadd_ps(a1, bj, acc[j][1]);
  }
}

// The multi-panel GEMV of every weight form: NC (<= 2) columns of P whole panels at once, 2 P NC independent chains
// (one column of one panel is only two). `Rows` (constructed from the tile) gives k-row k of panel q as fp32 rows
// 0-7 and 8-15 - fp16 values widened, or codes decoded in registers exactly as decode_ss8 / decode_lut4 decode them -
// so every form runs the same fma chains on the same values. Rows past t.rows come from the panels' zero padding
// and are not stored.
template <int NC, int P, class Rows>
void panels_of(const PanelTile& t) {
  Rows rows(t);
  __m256 acc[P][NC][2];
  for (int q = 0; q < P; ++q)
    for (int j = 0; j < NC; ++j) acc[q][j][0] = acc[q][j][1] = _mm256_setzero_ps();
  const auto* a = rows.a;               // k-row k of panel 0; panel q's is pstride further
  const float* b = t.bp;
  for (int64_t k = 0; k < t.K; ++k, a += rows.step, b += t.ldb) {
#pragma GCC unroll 4
    for (int q = 0; q < P; ++q) {
      rows.prefetch(a, q);
      __m256 v0, v1;
      rows.row(a, q, &v0, &v1);
      fma_row<NC>(v0, v1, b, acc[q]);
    }
  }
  store_panels<NC, P>(t, acc);
}

// fp16 panels (pstride apart), k-rows lda apart.
struct F16Rows {
  const f16* a;
  int64_t ps, step;
  explicit F16Rows(const PanelTile& t) : a(t.ap), ps(t.pstride), step(t.lda) {}
  void prefetch(const f16* k, int q) const { _mm_prefetch((const char*)(k + q * ps + 64 * step), _MM_HINT_T0); }
  void row(const f16* k, int q, __m256* v0, __m256* v1) const {
    *v0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(k + q * ps)));
    *v1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(k + q * ps + 8)));
  }
};

template <int NC, int P>
void panels(const PanelTile& t) {
  panels_of<NC, P, F16Rows>(t);
}

// One k-row of an 8-bit scale/offset panel (16 codes) as fp32 (code - of) * sc, rows 0-7 and 8-15, not yet
// rounded to fp16 (decode_ss8 and Q8Rows).
template <bool S>
inline void ss8_row(__m128i c8, const __m256 (&s)[2], const __m256 (&o)[2], __m256* v0, __m256* v1) {
  const __m128i c8h = _mm_srli_si128(c8, 8);
  const __m256i c0 = S ? _mm256_cvtepi8_epi32(c8) : _mm256_cvtepu8_epi32(c8);
  const __m256i c1 = S ? _mm256_cvtepi8_epi32(c8h) : _mm256_cvtepu8_epi32(c8h);
  *v0 = _mm256_mul_ps(_mm256_sub_ps(_mm256_cvtepi32_ps(c0), o[0]), s[0]);
  *v1 = _mm256_mul_ps(_mm256_sub_ps(_mm256_cvtepi32_ps(c1), o[1]), s[1]);
}

// 8-bit code panels with a scale / offset per row: each k-row decoded exactly as decode_ss8 does (fp32
// (code - of) * sc, rounded to fp16 and widened back).
template <int P, bool S>
struct Q8Rows {
  const uint8_t* a;
  int64_t ps;
  __m256 s[P][2], o[P][2];
  explicit Q8Rows(const PanelTile& t) : a(t.q8), ps(t.pstride) {
    for (int q = 0; q < P; ++q)
      for (int h = 0; h < 2; ++h) {
        s[q][h] = _mm256_loadu_ps(t.sc + 16 * q + 8 * h);
        o[q][h] = _mm256_loadu_ps(t.of + 16 * q + 8 * h);
      }
  }
  static constexpr int64_t step = 16;
  void prefetch(const uint8_t* k, int q) const { _mm_prefetch((const char*)(k + q * ps + 16 * 64), _MM_HINT_T0); }
  void row(const uint8_t* k, int q, __m256* v0, __m256* v1) const {
    ss8_row<S>(_mm_loadu_si128((const __m128i*)(k + q * ps)), s[q], o[q], v0, v1);
    *v0 = _mm256_cvtph_ps(_mm256_cvtps_ph(*v0, kRound));
    *v1 = _mm256_cvtph_ps(_mm256_cvtps_ph(*v1, kRound));
  }
};

template <int NC, int P, bool S>
void panels_q8(const PanelTile& t) {
  panels_of<NC, P, Q8Rows<P, S>>(t);
}

// A 16-entry fp16 table split into its low and high bytes, for pshufb lookups (decode_lut4's).
struct Lut4Table {
  __m128i lo, hi;
};
inline Lut4Table lut4_table(const f16* table) {
  alignas(16) uint8_t lo[16], hi[16];
  for (int i = 0; i < 16; ++i) {
    uint16_t v;
    std::memcpy(&v, table + i, sizeof v);
    lo[i] = (uint8_t)(v & 0xFF);
    hi[i] = (uint8_t)(v >> 8);
  }
  return {_mm_load_si128((const __m128i*)lo), _mm_load_si128((const __m128i*)hi)};
}

// 4-bit LUT code panels, one table each: each k-row (8 bytes) looked up exactly as decode_lut4 does (the fp16
// values themselves), widened.
template <int P>
struct Lut4Rows {
  const uint8_t* a;
  int64_t ps;
  Lut4Table tab[P];
  __m128i m = _mm_set1_epi8(0x0F);
  explicit Lut4Rows(const PanelTile& t) : a(t.q4), ps(t.pstride) {
    for (int q = 0; q < P; ++q) tab[q] = lut4_table(t.tabs[q]);
  }
  static constexpr int64_t step = 8;
  void prefetch(const uint8_t* k, int q) const { _mm_prefetch((const char*)(k + q * ps + 8 * 64), _MM_HINT_T0); }
  void row(const uint8_t* k, int q, __m256* v0, __m256* v1) const {
    const __m128i bytes = _mm_loadl_epi64((const __m128i*)(k + q * ps));
    const __m128i c = _mm_unpacklo_epi8(_mm_and_si128(bytes, m), _mm_and_si128(_mm_srli_epi16(bytes, 4), m));
    const __m128i vl = _mm_shuffle_epi8(tab[q].lo, c), vh = _mm_shuffle_epi8(tab[q].hi, c);
    *v0 = _mm256_cvtph_ps(_mm_unpacklo_epi8(vl, vh));
    *v1 = _mm256_cvtph_ps(_mm_unpackhi_epi8(vl, vh));
  }
};

template <int NC, int P>
void panels_lut4(const PanelTile& t) {
  panels_of<NC, P, Lut4Rows<P>>(t);
}

void panel_one(const PanelTile& t) {
  for (int j0 = 0; j0 < t.cols; j0 += 6) {
    switch (std::min(6, t.cols - j0)) {
      case 1: panel_cols<1>(t, j0); break;
      case 2: panel_cols<2>(t, j0); break;
      case 3: panel_cols<3>(t, j0); break;
      case 4: panel_cols<4>(t, j0); break;
      case 5: panel_cols<5>(t, j0); break;
      default: panel_cols<6>(t, j0); break;
    }
  }
}

}  // namespace

int panel_group(int cols) { return cols <= 1 ? 4 : cols == 2 ? 2 : 1; }

void decode_ss8(const uint8_t* codes, int64_t n, bool is_signed, const float* sc, const float* of, f16* dst) {
  const __m256 s[2] = {_mm256_loadu_ps(sc), _mm256_loadu_ps(sc + 8)};
  const __m256 o[2] = {_mm256_loadu_ps(of), _mm256_loadu_ps(of + 8)};
  for (int64_t k = 0; k < n; ++k, codes += 16, dst += 16) {
    const __m128i b = _mm_loadu_si128((const __m128i*)codes);
    __m256 v0, v1;
    if (is_signed)
      ss8_row<true>(b, s, o, &v0, &v1);
    else
      ss8_row<false>(b, s, o, &v0, &v1);
    _mm_storeu_si128((__m128i*)dst, _mm256_cvtps_ph(v0, kRound));
    _mm_storeu_si128((__m128i*)(dst + 8), _mm256_cvtps_ph(v1, kRound));
  }
}

// Two k-rows (16 bytes, 32 codes) at a time: the nibbles interleaved into one code a byte, looked up by
// pshufb in the table's low bytes and its high bytes, the two halves zipped back into fp16 values.
void decode_lut4(const uint8_t* codes, int64_t n, const f16* table, f16* dst) {
  const Lut4Table t = lut4_table(table);
  const __m128i tl = t.lo, th = t.hi;
  const __m128i m = _mm_set1_epi8(0x0F);
  int64_t k = 0;
  for (; k + 2 <= n; k += 2) {
    const __m128i b = _mm_loadu_si128((const __m128i*)(codes + 8 * k));
    const __m128i c_lo = _mm_and_si128(b, m), c_hi = _mm_and_si128(_mm_srli_epi16(b, 4), m);
    const __m128i c[2] = {_mm_unpacklo_epi8(c_lo, c_hi), _mm_unpackhi_epi8(c_lo, c_hi)};  // codes 0-15, 16-31
    for (int h = 0; h < 2; ++h) {
      const __m128i vl = _mm_shuffle_epi8(tl, c[h]), vh = _mm_shuffle_epi8(th, c[h]);
      _mm_storeu_si128((__m128i*)(dst + 16 * k + 16 * h), _mm_unpacklo_epi8(vl, vh));
      _mm_storeu_si128((__m128i*)(dst + 16 * k + 16 * h + 8), _mm_unpackhi_epi8(vl, vh));
    }
  }
  if (k < n) decode_lut4_ref(codes + 8 * k, n - k, table, dst + 16 * k);
}

// The fused GEMVs run with panels == panel_group(cols) > 1: one or two columns (gemm_panel.cpp's rule).
void gemm_panel_q8(const PanelTile& t) {
  if (t.cols == 1) return t.q8_signed ? panels_q8<1, 4, true>(t) : panels_q8<1, 4, false>(t);
  return t.q8_signed ? panels_q8<2, 2, true>(t) : panels_q8<2, 2, false>(t);
}

void gemm_panel_lut4(const PanelTile& t) {
  if (t.cols == 1) return panels_lut4<1, 4>(t);
  return panels_lut4<2, 2>(t);
}

void gemm_panel(const PanelTile& t) {
  if (t.panels > 1 && t.panels == panel_group(t.cols)) {
    if (t.cols == 1) return panels<1, 4>(t);
    if (t.cols == 2) return panels<2, 2>(t);
  }
  for_each_panel(t, panel_one);
}

}  // namespace orion::cpu::simd::avx2
