// AVX-512 (F/BW/VL/DQ + F16C) element-wise, reduction and conversion kernels: 16 fp32 lanes, masked
// tails. The algorithms live in vec_impl.h.
// GCC 12 flags _mm512_cvtph_ps/_mm512_cvtps_ph internals (undefined pass-through) as maybe-uninitialized.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include "cpu/simd/isa_decls.h"

namespace orion::cpu::simd {
namespace {

struct V {
  static constexpr int W = 16;
  using F = __m512;
  using M = __mmask16;
  static constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;

  static M lanes(int n) { return (M)((1u << n) - 1); }
  static F load(const float* p) { return _mm512_loadu_ps(p); }
  static F load_n(const float* p, int n) { return _mm512_maskz_loadu_ps(lanes(n), p); }
  static void store(float* p, F v) { _mm512_storeu_ps(p, v); }
  static void store_n(float* p, F v, int n) { _mm512_mask_storeu_ps(p, lanes(n), v); }
  static F load_h(const f16* p) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)p)); }
  static F load_h_n(const f16* p, int n) { return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(lanes(n), p)); }
  static void store_h(f16* p, F v) { _mm256_storeu_si256((__m256i*)p, _mm512_cvtps_ph(v, kRound)); }
  static void store_h_n(f16* p, F v, int n) { _mm256_mask_storeu_epi16(p, lanes(n), _mm512_cvtps_ph(v, kRound)); }

  static F set1(float c) { return _mm512_set1_ps(c); }
  static F add(F a, F b) { return _mm512_add_ps(a, b); }
  static F sub(F a, F b) { return _mm512_sub_ps(a, b); }
  static F mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static F div(F a, F b) { return _mm512_div_ps(a, b); }
  static F fma(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  static F sqrt(F a) { return _mm512_sqrt_ps(a); }
  static F abs(F a) { return _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(a), _mm512_set1_epi32(0x7fffffff))); }
  static F neg(F a) { return _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(a), _mm512_set1_epi32(INT32_MIN))); }
  static F copysign(F mag, F sgn) {
    return _mm512_castsi512_ps(_mm512_ternarylogic_epi32(_mm512_castps_si512(mag), _mm512_castps_si512(sgn),
                                                          _mm512_set1_epi32(0x7fffffff), 0xe4));  // c ? a : b per bit
  }
  static M lt(F a, F b) { return _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ); }
  static M gt(F a, F b) { return _mm512_cmp_ps_mask(a, b, _CMP_GT_OQ); }
  static M eq(F a, F b) { return _mm512_cmp_ps_mask(a, b, _CMP_EQ_OQ); }
  static M isnan(F a) { return _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q); }
  static M mor(M a, M b) { return (M)(a | b); }
  static F select(M m, F t, F f) { return _mm512_mask_blend_ps(m, f, t); }

  static F exp2_from_magic(F t) {  // 2^n where t = n + 1.5*2^23 (n in [-126, 127])
    __m512i b = _mm512_sub_epi32(_mm512_castps_si512(t), _mm512_set1_epi32(0x4B400000 - 127));
    return _mm512_castsi512_ps(_mm512_slli_epi32(b, 23));
  }
  static F exponent_field(F v) { return _mm512_cvtepi32_ps(_mm512_srli_epi32(_mm512_castps_si512(v), 23)); }
  static F mantissa_half(F v) {
    __m512i b = _mm512_and_si512(_mm512_castps_si512(v), _mm512_set1_epi32(0x007fffff));
    return _mm512_castsi512_ps(_mm512_or_si512(b, _mm512_set1_epi32(0x3f000000)));
  }
};

}  // namespace
}  // namespace orion::cpu::simd

#include "cpu/simd/vec_impl.h"

namespace orion::cpu::simd::avx512 {
#include "cpu/simd/vec_wrappers.inc"
}  // namespace orion::cpu::simd::avx512
