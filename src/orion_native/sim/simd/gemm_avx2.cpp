// AVX2 GEMM microkernel (6 x 16 fp32 tile in 12 ymm accumulators) and F16C panel packing.
#include <immintrin.h>

#include <cstring>

#include "sim/simd/isa_decls.h"

namespace orion::sim::simd::avx2 {

void gemm_micro(int64_t kc, const float* ap, int64_t lda, const float* bp, float* c, int64_t ldc, bool acc) {
  __m256 c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51;
#define ORION_ROWS(X) X(0, c00, c01) X(1, c10, c11) X(2, c20, c21) X(3, c30, c31) X(4, c40, c41) X(5, c50, c51)
  if (acc) {
#define ORION_LOAD(r, x0, x1) x0 = _mm256_loadu_ps(c + r * ldc); x1 = _mm256_loadu_ps(c + r * ldc + 8);
    ORION_ROWS(ORION_LOAD)
  } else {
#define ORION_ZERO(r, x0, x1) x0 = _mm256_setzero_ps(); x1 = _mm256_setzero_ps();
    ORION_ROWS(ORION_ZERO)
  }
  for (int64_t k = 0; k < kc; ++k, ++ap, bp += 16) {
    __m256 b0 = _mm256_load_ps(bp), b1 = _mm256_load_ps(bp + 8);
#define ORION_FMA(r, x0, x1)                  \
  {                                           \
    __m256 a = _mm256_broadcast_ss(ap + r * lda);   \
    x0 = _mm256_fmadd_ps(a, b0, x0);          \
    x1 = _mm256_fmadd_ps(a, b1, x1);          \
  }
    ORION_ROWS(ORION_FMA)
  }
#define ORION_STORE(r, x0, x1) _mm256_storeu_ps(c + r * ldc, x0); _mm256_storeu_ps(c + r * ldc + 8, x1);
  ORION_ROWS(ORION_STORE)
#undef ORION_ROWS
#undef ORION_LOAD
#undef ORION_ZERO
#undef ORION_FMA
#undef ORION_STORE
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

}  // namespace orion::sim::simd::avx2
