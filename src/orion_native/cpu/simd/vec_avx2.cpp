// AVX2 + FMA + F16C element-wise, reduction and conversion kernels: 8 fp32 lanes; tails go through a
// small stack buffer. The algorithms live in vec_impl.h.
#include <immintrin.h>

#include <cstring>

#include "cpu/simd/isa_decls.h"

namespace orion::cpu::simd {
namespace {

struct V {
  static constexpr int W = 8;
  using F = __m256;
  using M = __m256;  // all-ones / all-zeros lanes
  static constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;

  static M lanes(int n) {
    return _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)));
  }
  static F load(const float* p) { return _mm256_loadu_ps(p); }
  static F load_n(const float* p, int n) { return _mm256_maskload_ps(p, _mm256_castps_si256(lanes(n))); }
  static void store(float* p, F v) { _mm256_storeu_ps(p, v); }
  static void store_n(float* p, F v, int n) { _mm256_maskstore_ps(p, _mm256_castps_si256(lanes(n)), v); }
  static F load_h(const f16* p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)p)); }
  static F load_h_n(const f16* p, int n) {
    alignas(16) f16 t[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    std::memcpy(t, p, (size_t)n * sizeof(f16));
    return _mm256_cvtph_ps(_mm_load_si128((const __m128i*)t));
  }
  static void store_h(f16* p, F v) { _mm_storeu_si128((__m128i*)p, _mm256_cvtps_ph(v, kRound)); }
  static void store_h_n(f16* p, F v, int n) {
    alignas(16) f16 t[8];
    _mm_store_si128((__m128i*)t, _mm256_cvtps_ph(v, kRound));
    std::memcpy(p, t, (size_t)n * sizeof(f16));
  }

  static F set1(float c) { return _mm256_set1_ps(c); }
  static F add(F a, F b) { return _mm256_add_ps(a, b); }
  static F sub(F a, F b) { return _mm256_sub_ps(a, b); }
  static F mul(F a, F b) { return _mm256_mul_ps(a, b); }
  static F div(F a, F b) { return _mm256_div_ps(a, b); }
  static F fma(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
  static F sqrt(F a) { return _mm256_sqrt_ps(a); }
  static F abs(F a) { return _mm256_and_ps(a, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff))); }
  static F neg(F a) { return _mm256_xor_ps(a, _mm256_castsi256_ps(_mm256_set1_epi32(INT32_MIN))); }
  static F copysign(F mag, F sgn) {
    __m256 s = _mm256_castsi256_ps(_mm256_set1_epi32(INT32_MIN));
    return _mm256_or_ps(_mm256_andnot_ps(s, mag), _mm256_and_ps(s, sgn));
  }
  static M lt(F a, F b) { return _mm256_cmp_ps(a, b, _CMP_LT_OQ); }
  static M gt(F a, F b) { return _mm256_cmp_ps(a, b, _CMP_GT_OQ); }
  static M eq(F a, F b) { return _mm256_cmp_ps(a, b, _CMP_EQ_OQ); }
  static M isnan(F a) { return _mm256_cmp_ps(a, a, _CMP_UNORD_Q); }
  static M mor(M a, M b) { return _mm256_or_ps(a, b); }
  static F select(M m, F t, F f) { return _mm256_blendv_ps(f, t, m); }

  static F exp2_from_magic(F t) {
    __m256i b = _mm256_sub_epi32(_mm256_castps_si256(t), _mm256_set1_epi32(0x4B400000 - 127));
    return _mm256_castsi256_ps(_mm256_slli_epi32(b, 23));
  }
  static F exponent_field(F v) { return _mm256_cvtepi32_ps(_mm256_srli_epi32(_mm256_castps_si256(v), 23)); }
  static F mantissa_half(F v) {
    __m256i b = _mm256_and_si256(_mm256_castps_si256(v), _mm256_set1_epi32(0x007fffff));
    return _mm256_castsi256_ps(_mm256_or_si256(b, _mm256_set1_epi32(0x3f000000)));
  }
};

}  // namespace
}  // namespace orion::cpu::simd

#include "cpu/simd/vec_impl.h"

namespace orion::cpu::simd::avx2 {
#include "cpu/simd/vec_wrappers.inc"
}  // namespace orion::cpu::simd::avx2
