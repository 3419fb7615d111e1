// Scalar reference of the fp32 element math (see math_consts.h). Vector ISA files mirror these
// operation by operation; a product feeding a sum is always an explicit fma so that compilers
// cannot contract differently per ISA. Internal linkage: only baseline TUs include this.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

#include "cpu/kernels/kernels.h"
#include "cpu/simd/math_consts.h"

namespace orion::cpu::simd {
namespace {

inline float sm_from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint32_t sm_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

inline float sm_exp(float x) {
  float xc = x < mc::kExpLo ? mc::kExpLo : x;
  xc = xc > mc::kExpHi ? mc::kExpHi : xc;
  float t = std::fma(xc, mc::kLog2e, mc::kMagic);
  float n = t - mc::kMagic;
  float r = std::fma(n, -mc::kLn2Hi, xc);
  r = std::fma(n, -mc::kLn2Lo, r);
  float p = mc::kExpP0;
  p = std::fma(p, r, mc::kExpP1);
  p = std::fma(p, r, mc::kExpP2);
  p = std::fma(p, r, mc::kExpP3);
  p = std::fma(p, r, mc::kExpP4);
  p = std::fma(p, r, mc::kExpP5);
  float r2 = r * r;
  p = std::fma(p, r2, r);
  p = p + 1.0f;
  float scale = sm_from_bits((sm_bits(t) - 0x4B400000u + 127u) << 23);
  float y = p * scale;
  if (x > mc::kExpHi) y = INFINITY;
  if (x < mc::kExpLo) y = 0.0f;
  if (x != x) y = x;
  return y;
}

inline float sm_log(float v) {
  bool sub = v < 1.17549435e-38f;  // fp32 subnormal (or <= 0: fixed up below)
  float vs = sub ? v * 8388608.0f : v;
  uint32_t b = sm_bits(vs);
  int32_t e = (int32_t)(b >> 23) - 126 - (sub ? 23 : 0);
  float m = sm_from_bits((b & 0x007fffffu) | 0x3f000000u);  // [0.5, 1)
  float xm;
  if (m < mc::kSqrtHalf) {
    e -= 1;
    xm = (m + m) - 1.0f;
  } else {
    xm = m - 1.0f;
  }
  float fe = (float)e;
  float z = xm * xm;
  float p = mc::kLogP[0];
  for (int i = 1; i < 9; ++i) p = std::fma(p, xm, mc::kLogP[i]);
  float y = (p * xm) * z;
  y = std::fma(fe, mc::kLn2Lo, y);
  y = std::fma(z, -0.5f, y);
  float r = xm + y;
  r = std::fma(fe, mc::kLn2Hi, r);
  if (v == 0.0f) r = -INFINITY;
  if (v < 0.0f) r = NAN;
  if (v == INFINITY) r = INFINITY;
  if (v != v) r = v;
  return r;
}

inline float sm_tanh(float x) {
  float a = std::fabs(x);
  float z = x * x;
  float p = mc::kTanhP[0];
  for (int i = 1; i < 5; ++i) p = std::fma(p, z, mc::kTanhP[i]);
  float small = std::fma(p * z, x, x);
  float e = sm_exp(a + a);
  float large = 1.0f - 2.0f / (e + 1.0f);
  large = std::copysign(large, x);
  return a < mc::kTanhSmall ? small : large;
}

inline float sm_sigmoid(float x) { return 1.0f / (1.0f + sm_exp(-x)); }

inline float sm_silu(float x) {
  float y = x / (1.0f + sm_exp(-x));
  return x == -INFINITY ? -0.0f : y;
}

inline float sm_gelu_tanh(float x) {
  float t = (x * x) * mc::kGeluC;
  float inner = std::fma(t, x, x);
  float y = x / (1.0f + sm_exp(inner * mc::kGeluK2));
  return x == -INFINITY ? -0.0f : y;
}

inline float sm_gelu_exact(float x) {
  float z = std::fabs(x) * mc::kInvSqrt2;
  float t = 1.0f / std::fma(z, 0.5f, 1.0f);
  float q = mc::kErfcP[0];
  for (int i = 1; i < 10; ++i) q = std::fma(q, t, mc::kErfcP[i]);
  float arg = std::fma(-z, z, q);
  float h = (t * sm_exp(arg)) * 0.5f;  // Phi(-|x|)
  float phi = x < 0.0f ? h : 1.0f - h;
  float y = x * phi;
  return x == -INFINITY ? -0.0f : y;
}

// NaN-propagating max/min as used by all ISAs: keep acc unless x wins or x is NaN.
inline float sm_max(float acc, float x) { return (x > acc || x != x) ? x : acc; }
inline float sm_min(float acc, float x) { return (x < acc || x != x) ? x : acc; }

inline float sm_binary(kernels::Binary op, float a, float b) {
  using kernels::Binary;
  switch (op) {
    case Binary::add: return a + b;
    case Binary::sub: return a - b;
    case Binary::mul: return a * b;
    case Binary::div: return a / b;
    case Binary::pow: return std::pow(a, b);
    case Binary::maximum: return (a != a || b != b) ? NAN : (a > b ? a : b);
    case Binary::minimum: return (a != a || b != b) ? NAN : (a < b ? a : b);
  }
  return NAN;
}

}  // namespace
}  // namespace orion::cpu::simd
