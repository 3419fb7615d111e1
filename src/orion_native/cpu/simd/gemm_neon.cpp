// AArch64 NEON GEMM microkernel (8 x 12 fp32 tile in 24 q-register accumulators) and fp16 packing.
#include <arm_neon.h>

#include <cstring>

#include "cpu/simd/isa_decls.h"

namespace orion::cpu::simd::neon {

namespace {

// R rows (1..8): per k three B vectors and R x 3 FMAs with the A value as scalar operand.
inline float32x4_t load_h4(const f16* p, int n) {  // n valid halves (rest zero)
  f16 h[4] = {0, 0, 0, 0};
  if (n > 0) std::memcpy(h, p, (size_t)(n < 4 ? n : 4) * sizeof(f16));
  return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(h)));
}

template <int R, bool kDirect = false>
void micro(const GemmTile& g) {
  float32x4_t t[R][3];
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < 3; ++j) t[r][j] = g.cin ? vld1q_f32(g.cin + r * g.ldcin + 4 * j) : vdupq_n_f32(0.0f);
  const float* ap = g.ap;
  const float* bp = g.bp;
  const f16* bh = g.bh;
  for (int64_t k = 0; k < g.kc; ++k, ++ap) {
    float32x4_t b0, b1, b2;
    if constexpr (kDirect) {
      b0 = load_h4(bh, g.bcols);
      b1 = load_h4(bh + 4, g.bcols - 4);
      b2 = load_h4(bh + 8, g.bcols - 8);
      bh += g.ldbh;
    } else {
      b0 = vld1q_f32(bp);
      b1 = vld1q_f32(bp + 4);
      b2 = vld1q_f32(bp + 8);
      bp += 12;
    }
    for (int r = 0; r < R; ++r) {
      float a = ap[r * g.lda];
      t[r][0] = vfmaq_n_f32(t[r][0], b0, a);
      t[r][1] = vfmaq_n_f32(t[r][1], b1, a);
      t[r][2] = vfmaq_n_f32(t[r][2], b2, a);
    }
  }
  for (int r = 0; r < R; ++r) {
    if (g.o16) {
      f16 h[12];
      for (int j = 0; j < 3; ++j) vst1_u16(h + 4 * j, vreinterpret_u16_f16(vcvt_f16_f32(t[r][j])));
      std::memcpy(g.o16 + r * g.ldo, h, (size_t)g.cols * sizeof(f16));
    } else {
      float row[12];
      for (int j = 0; j < 3; ++j) vst1q_f32(row + 4 * j, t[r][j]);
      std::memcpy(g.o32 + r * g.ldo, row, (size_t)g.cols * sizeof(float));
    }
  }
}

}  // namespace

void gemm_micro(const GemmTile& g) {
  if (g.bh) {
    switch (g.rows) {
      case 1: return micro<1, true>(g);
      case 2: return micro<2, true>(g);
      case 3: return micro<3, true>(g);
      default: return micro<4, true>(g);
    }
  }
  switch (g.rows) {
    case 1: return micro<1>(g);
    case 2: return micro<2>(g);
    case 3: return micro<3>(g);
    case 4: return micro<4>(g);
    case 5: return micro<5>(g);
    case 6: return micro<6>(g);
    case 7: return micro<7>(g);
    default: return micro<8>(g);
  }
}

void gemm_pack_rows(const f16* src, int64_t ld, int64_t kc, int64_t cols, int nr, float* dst) {
  for (int64_t k = 0; k < kc; ++k, src += ld, dst += nr) {
    for (int j = 0; j < nr; j += 4) {
      int64_t left = cols - j;
      f16 h[4] = {0, 0, 0, 0};
      if (left >= 4)
        std::memcpy(h, src + j, 8);
      else if (left > 0)
        std::memcpy(h, src + j, (size_t)left * 2);
      float32x4_t f = vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(h)));
      float t[4];
      vst1q_f32(t, f);
      std::memcpy(dst + j, t, (size_t)(nr - j < 4 ? nr - j : 4) * sizeof(float));
    }
  }
}

}  // namespace orion::cpu::simd::neon

namespace orion::cpu::simd::neon {

// Row-wise widening, then a scalar scatter (simple; transposed operands are the rarer case).
void cvt_transpose(const f16* src, int64_t ld, int64_t rows, int64_t rows_pad, int64_t cols, float* dst,
                   int64_t ldd) {
  float buf[256];
  for (int64_t r = 0; r < rows_pad; ++r)
    for (int64_t c0 = 0; c0 < cols; c0 += 256) {
      int64_t n = cols - c0 < 256 ? cols - c0 : 256;
      if (r < rows)
        f16_to_f32(src + r * ld + c0, buf, (size_t)n);
      else
        std::memset(buf, 0, (size_t)n * sizeof(float));
      for (int64_t c = 0; c < n; ++c) dst[(c0 + c) * ldd + r] = buf[c];
    }
}

}  // namespace orion::cpu::simd::neon

namespace orion::cpu::simd::neon {
namespace {

// NC (<= 4) columns of one 16-row panel: 4 q-registers of rows per column (16 accumulators),
// vfmaq_n_f32 (fused, B as the scalar operand) as in micro(); results scatter through a buffer.
template <int NC>
void panel_cols(const PanelTile& t, int j0) {
  float32x4_t acc[NC][4];
  for (int j = 0; j < NC; ++j)
    for (int q = 0; q < 4; ++q) acc[j][q] = vdupq_n_f32(0.0f);
  const f16* a = t.ap;
  const float* b = t.bp + j0;
  for (int64_t k = 0; k < t.K; ++k, a += t.lda, b += t.ldb) {
    float32x4_t av[4];
    for (int q = 0; q < 4; ++q) av[q] = vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(a + 4 * q)));
    for (int j = 0; j < NC; ++j)
      for (int q = 0; q < 4; ++q) acc[j][q] = vfmaq_n_f32(acc[j][q], av[q], b[j]);
  }
  float buf[NC][16];
  f16 hbuf[NC][16];
  for (int j = 0; j < NC; ++j)
    for (int q = 0; q < 4; ++q) {
      vst1q_f32(buf[j] + 4 * q, acc[j][q]);
      vst1_u16(hbuf[j] + 4 * q, vreinterpret_u16_f16(vcvt_f16_f32(acc[j][q])));
    }
  for (int r = 0; r < t.rows; ++r)
    for (int j = 0; j < NC; ++j) {
      int64_t at = t.trans_c ? (j0 + j) * t.ldo + r : r * t.ldo + j0 + j;
      if (t.o16)
        t.o16[at] = hbuf[j][r];
      else
        t.o32[at] = buf[j][r];
    }
}

}  // namespace

void gemm_panel(const PanelTile& tile) {
  for_each_panel(tile, [](const PanelTile& t) {
    for (int j0 = 0; j0 < t.cols; j0 += 4) {
      switch (t.cols - j0 < 4 ? t.cols - j0 : 4) {
        case 1: panel_cols<1>(t, j0); break;
        case 2: panel_cols<2>(t, j0); break;
        case 3: panel_cols<3>(t, j0); break;
        default: panel_cols<4>(t, j0); break;
      }
    }
  });
}

// One column already runs 4 independent chains (4 q-registers of rows).
int panel_group(int) { return 1; }

void decode_ss8(const uint8_t* codes, int64_t n, bool is_signed, const float* sc, const float* of, f16* dst) {
  decode_ss8_ref(codes, n, is_signed, sc, of, dst);
}

void decode_lut4(const uint8_t* codes, int64_t n, const f16* table, f16* dst) { decode_lut4_ref(codes, n, table, dst); }

}  // namespace orion::cpu::simd::neon
