// AArch64 NEON element-wise, reduction and conversion kernels: 4 fp32 lanes, fp16 via vcvt_f32_f16;
// tails go through a small stack buffer. The algorithms live in vec_impl.h. (Built only on ARM.)
#include <arm_neon.h>

#include <cstring>

#include "cpu/simd/isa_decls.h"

namespace orion::cpu::simd {
namespace {

struct V {
  static constexpr int W = 4;
  using F = float32x4_t;
  using M = uint32x4_t;

  static M lanes(int n) {
    const uint32_t iota[4] = {0, 1, 2, 3};
    return vcltq_u32(vld1q_u32(iota), vdupq_n_u32((uint32_t)n));
  }
  static F load(const float* p) { return vld1q_f32(p); }
  static F load_n(const float* p, int n) {
    float t[4] = {0, 0, 0, 0};
    std::memcpy(t, p, (size_t)n * sizeof(float));
    return vld1q_f32(t);
  }
  static void store(float* p, F v) { vst1q_f32(p, v); }
  static void store_n(float* p, F v, int n) {
    float t[4];
    vst1q_f32(t, v);
    std::memcpy(p, t, (size_t)n * sizeof(float));
  }
  static F load_h(const f16* p) { return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p))); }
  static F load_h_n(const f16* p, int n) {
    f16 t[4] = {0, 0, 0, 0};
    std::memcpy(t, p, (size_t)n * sizeof(f16));
    return load_h(t);
  }
  static void store_h(f16* p, F v) { vst1_u16(p, vreinterpret_u16_f16(vcvt_f16_f32(v))); }  // FPCR: RNE
  static void store_h_n(f16* p, F v, int n) {
    f16 t[4];
    store_h(t, v);
    std::memcpy(p, t, (size_t)n * sizeof(f16));
  }

  static F set1(float c) { return vdupq_n_f32(c); }
  static F add(F a, F b) { return vaddq_f32(a, b); }
  static F sub(F a, F b) { return vsubq_f32(a, b); }
  static F mul(F a, F b) { return vmulq_f32(a, b); }
  static F div(F a, F b) { return vdivq_f32(a, b); }
  static F fma(F a, F b, F c) { return vfmaq_f32(c, a, b); }
  static F sqrt(F a) { return vsqrtq_f32(a); }
  static F abs(F a) { return vabsq_f32(a); }
  static F neg(F a) { return vnegq_f32(a); }
  static F copysign(F mag, F sgn) { return vbslq_f32(vdupq_n_u32(0x80000000u), sgn, mag); }
  static M lt(F a, F b) { return vcltq_f32(a, b); }
  static M gt(F a, F b) { return vcgtq_f32(a, b); }
  static M eq(F a, F b) { return vceqq_f32(a, b); }
  static M isnan(F a) { return vmvnq_u32(vceqq_f32(a, a)); }
  static M mor(M a, M b) { return vorrq_u32(a, b); }
  static F select(M m, F t, F f) { return vbslq_f32(m, t, f); }

  static F exp2_from_magic(F t) {
    int32x4_t b = vsubq_s32(vreinterpretq_s32_f32(t), vdupq_n_s32(0x4B400000 - 127));
    return vreinterpretq_f32_s32(vshlq_n_s32(b, 23));
  }
  static F exponent_field(F v) { return vcvtq_f32_u32(vshrq_n_u32(vreinterpretq_u32_f32(v), 23)); }
  static F mantissa_half(F v) {
    uint32x4_t b = vandq_u32(vreinterpretq_u32_f32(v), vdupq_n_u32(0x007fffffu));
    return vreinterpretq_f32_u32(vorrq_u32(b, vdupq_n_u32(0x3f000000u)));
  }
};

}  // namespace
}  // namespace orion::cpu::simd

#include "cpu/simd/vec_impl.h"

namespace orion::cpu::simd::neon {
#include "cpu/simd/vec_wrappers.inc"
}  // namespace orion::cpu::simd::neon
