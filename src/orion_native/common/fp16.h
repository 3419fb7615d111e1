// Scalar IEEE binary16 <-> binary32 conversion (round to nearest even, overflow -> inf, NaN kept).
// Bulk, vectorized conversion lives in cpu/kernels/kernels.h.
#pragma once
#include <cstdint>
#include <cstring>

namespace orion {

using f16 = uint16_t;  // fp16 storage bits

inline float f16_to_f32(f16 h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ffu, bits;
  if (exp == 0) {
    if (man == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do { ++e; man <<= 1; } while (!(man & 0x400u));
      bits = sign | ((uint32_t)(112 - e) << 23) | ((man & 0x3ffu) << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (man << 13);
  } else {
    bits = sign | ((exp + 112) << 23) | (man << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline f16 f32_to_f16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) return (f16)(sign | 0x7c00u | (ax > 0x7f800000u ? (0x200u | ((ax >> 13) & 0x3ffu)) : 0));
  if (ax >= 0x477ff000u) return (f16)(sign | 0x7c00u);  // >= 65520 rounds to inf
  if (ax < 0x38800000u) {                               // subnormal or zero in fp16
    if (ax < 0x33000000u) return (f16)sign;             // < 2^-25 rounds to 0 (2^-25 itself ties to even 0)
    uint32_t e = ax >> 23, m = (ax & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126 - e;  // 14 + (112 - e) ... places result in 10-bit mantissa
    uint32_t r = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (r & 1))) ++r;
    return (f16)(sign | r);
  }
  uint32_t r = ax - 0x38000000u;  // rebias 127 -> 15
  uint32_t rem = r & 0x1fffu;
  r >>= 13;
  if (rem > 0x1000u || (rem == 0x1000u && (r & 1))) ++r;
  return (f16)(sign | r);
}

}  // namespace orion
