// AVX-512 GEMM microkernel (12 x 32 fp32 tile in 24 zmm accumulators) and F16C panel packing.
// GCC 12 flags _mm512_cvtph_ps/_mm512_cvtps_ph internals (undefined pass-through) as maybe-uninitialized.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include "sim/simd/isa_decls.h"

namespace orion::sim::simd::avx512 {

// C[12 x 32] (+)= Ap[kc][12] * Bp[kc][32]: per k two B vectors, twelve broadcast-FMAs each.
void gemm_micro(int64_t kc, const float* ap, int64_t lda, const float* bp, float* c, int64_t ldc, bool acc) {
  __m512 c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51, c60, c61, c70, c71, c80, c81, c90, c91,
      ca0, ca1, cb0, cb1;
#define ORION_ROWS(X) X(0, c00, c01) X(1, c10, c11) X(2, c20, c21) X(3, c30, c31) X(4, c40, c41) X(5, c50, c51) \
  X(6, c60, c61) X(7, c70, c71) X(8, c80, c81) X(9, c90, c91) X(10, ca0, ca1) X(11, cb0, cb1)
  if (acc) {
#define ORION_LOAD(r, x0, x1) x0 = _mm512_loadu_ps(c + r * ldc); x1 = _mm512_loadu_ps(c + r * ldc + 16);
    ORION_ROWS(ORION_LOAD)
  } else {
#define ORION_ZERO(r, x0, x1) x0 = _mm512_setzero_ps(); x1 = _mm512_setzero_ps();
    ORION_ROWS(ORION_ZERO)
  }
  for (int64_t k = 0; k < kc; ++k, ++ap, bp += 32) {
    __m512 b0 = _mm512_load_ps(bp), b1 = _mm512_load_ps(bp + 16);
#define ORION_FMA(r, x0, x1)                  \
  {                                           \
    __m512 a = _mm512_set1_ps(ap[r * lda]);         \
    x0 = _mm512_fmadd_ps(a, b0, x0);          \
    x1 = _mm512_fmadd_ps(a, b1, x1);          \
  }
    ORION_ROWS(ORION_FMA)
  }
#define ORION_STORE(r, x0, x1) _mm512_storeu_ps(c + r * ldc, x0); _mm512_storeu_ps(c + r * ldc + 16, x1);
  ORION_ROWS(ORION_STORE)
#undef ORION_ROWS
#undef ORION_LOAD
#undef ORION_ZERO
#undef ORION_FMA
#undef ORION_STORE
}

void gemm_pack_rows(const f16* src, int64_t ld, int64_t kc, int64_t cols, int nr, float* dst) {
  for (int64_t k = 0; k < kc; ++k, src += ld, dst += nr) {
    for (int j = 0; j < nr; j += 16) {
      int64_t left = cols - j;
      __mmask16 m = left >= 16 ? (__mmask16)0xffff : left <= 0 ? (__mmask16)0 : (__mmask16)((1u << left) - 1);
      __m256i h = _mm256_maskz_loadu_epi16(m, src + j);
      __m512 f = _mm512_cvtph_ps(h);
      if (nr - j >= 16)
        _mm512_storeu_ps(dst + j, f);
      else
        _mm512_mask_storeu_ps(dst + j, (__mmask16)((1u << (nr - j)) - 1), f);
    }
  }
}

}  // namespace orion::sim::simd::avx512
