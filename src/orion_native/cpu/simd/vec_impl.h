// Element-wise / reduction / softmax kernels written once against a small vector API `V` (see
// vec_avx512.cpp, vec_avx2.cpp, vec_neon.cpp), mirroring scalar_math.h operation by operation so every
// ISA rounds identically. Include only from an ISA file, after defining V; everything has internal
// linkage so the per-ISA instantiations never mix at link time.
//
// V provides: W (lanes), F (float vector), M (mask); load/store (float), load_h/store_h (fp16 with
// RNE conversion), *_n partial variants (n < W lanes, rest zero / untouched), set1, add, sub, mul, div,
// fma (fused), sqrt, abs, neg (sign flip), copysign, lt/gt/eq/isnan -> M, mor, select(m, t, f),
// lanes(n) (mask of the first n lanes), and integer helpers on the bit patterns (see exp/log).
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

#include "cpu/simd/isa.h"
#include "cpu/simd/math_consts.h"

namespace orion::cpu::simd {
namespace {

using F = V::F;
using Msk = V::M;
constexpr int W = V::W;

inline F k(float c) { return V::set1(c); }

// ---- math (mirrors scalar_math.h) -------------------------------------------------------------
inline F v_exp(F x) {
  F xc = V::select(V::lt(x, k(mc::kExpLo)), k(mc::kExpLo), x);
  xc = V::select(V::gt(xc, k(mc::kExpHi)), k(mc::kExpHi), xc);
  F t = V::fma(xc, k(mc::kLog2e), k(mc::kMagic));
  F n = V::sub(t, k(mc::kMagic));
  F r = V::fma(n, k(-mc::kLn2Hi), xc);
  r = V::fma(n, k(-mc::kLn2Lo), r);
  F p = k(mc::kExpP0);
  p = V::fma(p, r, k(mc::kExpP1));
  p = V::fma(p, r, k(mc::kExpP2));
  p = V::fma(p, r, k(mc::kExpP3));
  p = V::fma(p, r, k(mc::kExpP4));
  p = V::fma(p, r, k(mc::kExpP5));
  F r2 = V::mul(r, r);
  p = V::fma(p, r2, r);
  p = V::add(p, k(1.0f));
  F y = V::mul(p, V::exp2_from_magic(t));  // 2^n from the bits of t
  y = V::select(V::gt(x, k(mc::kExpHi)), k(INFINITY), y);
  y = V::select(V::lt(x, k(mc::kExpLo)), k(0.0f), y);
  return V::select(V::isnan(x), x, y);
}

inline F v_log(F v) {
  Msk sub = V::lt(v, k(1.17549435e-38f));
  F vs = V::select(sub, V::mul(v, k(8388608.0f)), v);
  F fe = V::sub(V::exponent_field(vs), k(126.0f));  // (bits >> 23) as float: exact small integers
  fe = V::select(sub, V::sub(fe, k(23.0f)), fe);
  F m = V::mantissa_half(vs);                       // [0.5, 1)
  Msk lo = V::lt(m, k(mc::kSqrtHalf));
  fe = V::select(lo, V::sub(fe, k(1.0f)), fe);
  F xm = V::select(lo, V::sub(V::add(m, m), k(1.0f)), V::sub(m, k(1.0f)));
  F z = V::mul(xm, xm);
  F p = k(mc::kLogP[0]);
  for (int i = 1; i < 9; ++i) p = V::fma(p, xm, k(mc::kLogP[i]));
  F y = V::mul(V::mul(p, xm), z);
  y = V::fma(fe, k(mc::kLn2Lo), y);
  y = V::fma(z, k(-0.5f), y);
  F r = V::add(xm, y);
  r = V::fma(fe, k(mc::kLn2Hi), r);
  r = V::select(V::eq(v, k(0.0f)), k(-INFINITY), r);
  r = V::select(V::lt(v, k(0.0f)), k(NAN), r);
  r = V::select(V::eq(v, k(INFINITY)), k(INFINITY), r);
  return V::select(V::isnan(v), v, r);
}

inline F v_tanh(F x) {
  F a = V::abs(x);
  F z = V::mul(x, x);
  F p = k(mc::kTanhP[0]);
  for (int i = 1; i < 5; ++i) p = V::fma(p, z, k(mc::kTanhP[i]));
  F small = V::fma(V::mul(p, z), x, x);
  F e = v_exp(V::add(a, a));
  F large = V::sub(k(1.0f), V::div(k(2.0f), V::add(e, k(1.0f))));
  large = V::copysign(large, x);
  return V::select(V::lt(a, k(mc::kTanhSmall)), small, large);
}

inline F v_sigmoid(F x) { return V::div(k(1.0f), V::add(k(1.0f), v_exp(V::neg(x)))); }

inline F v_silu(F x) {
  F y = V::div(x, V::add(k(1.0f), v_exp(V::neg(x))));
  return V::select(V::eq(x, k(-INFINITY)), k(-0.0f), y);
}

inline F v_gelu_tanh(F x) {
  F t = V::mul(V::mul(x, x), k(mc::kGeluC));
  F inner = V::fma(t, x, x);
  F y = V::div(x, V::add(k(1.0f), v_exp(V::mul(inner, k(mc::kGeluK2)))));
  return V::select(V::eq(x, k(-INFINITY)), k(-0.0f), y);
}

inline F v_gelu_exact(F x) {
  F z = V::mul(V::abs(x), k(mc::kInvSqrt2));
  F t = V::div(k(1.0f), V::fma(z, k(0.5f), k(1.0f)));
  F q = k(mc::kErfcP[0]);
  for (int i = 1; i < 10; ++i) q = V::fma(q, t, k(mc::kErfcP[i]));
  F arg = V::fma(V::neg(z), z, q);
  F h = V::mul(V::mul(t, v_exp(arg)), k(0.5f));
  F phi = V::select(V::lt(x, k(0.0f)), h, V::sub(k(1.0f), h));
  F y = V::mul(x, phi);
  return V::select(V::eq(x, k(-INFINITY)), k(-0.0f), y);
}

// ---- loops ------------------------------------------------------------------------------------
// Applies fn to fp16 input span(s), writing fp16; full vectors then one masked tail.
template <typename Fn>
inline void map1(const f16* x, f16* y, size_t n, Fn fn) {
  size_t i = 0;
  for (; i + 2 * W <= n; i += 2 * W) {  // two independent vectors per iteration hide latency
    F a = fn(V::load_h(x + i)), b = fn(V::load_h(x + i + W));
    V::store_h(y + i, a);
    V::store_h(y + i + W, b);
  }
  for (; i + W <= n; i += W) V::store_h(y + i, fn(V::load_h(x + i)));
  if (i < n) V::store_h_n(y + i, fn(V::load_h_n(x + i, (int)(n - i))), (int)(n - i));
}

template <typename Fn>
inline void map2(const f16* a, const f16* b, f16* y, size_t n, Fn fn) {
  size_t i = 0;
  for (; i + W <= n; i += W) V::store_h(y + i, fn(V::load_h(a + i), V::load_h(b + i)));
  if (i < n) {
    int r = (int)(n - i);
    V::store_h_n(y + i, fn(V::load_h_n(a + i, r), V::load_h_n(b + i, r)), r);
  }
}

inline F v_pow(F a, F b) {  // libm powf per lane, like the scalar path
  alignas(64) float ta[W], tb[W];
  V::store(ta, a);
  V::store(tb, b);
  for (int j = 0; j < W; ++j) ta[j] = std::pow(ta[j], tb[j]);
  return V::load(ta);
}

inline F v_max(F a, F b) { return V::select(V::mor(V::isnan(a), V::isnan(b)), k(NAN), V::select(V::gt(a, b), a, b)); }
inline F v_min(F a, F b) { return V::select(V::mor(V::isnan(a), V::isnan(b)), k(NAN), V::select(V::lt(a, b), a, b)); }

template <typename A, typename B>
inline void binary_loop(Binary op, const f16* a, const f16* b, f16* out, size_t n, A la, B lb) {
  // la/lb adapt each operand (span or broadcast scalar) to the map2 signature.
  auto run = [&](auto fn) { map2(a, b, out, n, [&](F x, F y) { return fn(la(x), lb(y)); }); };
  switch (op) {
    case Binary::add: return run([](F x, F y) { return V::add(x, y); });
    case Binary::sub: return run([](F x, F y) { return V::sub(x, y); });
    case Binary::mul: return run([](F x, F y) { return V::mul(x, y); });
    case Binary::div: return run([](F x, F y) { return V::div(x, y); });
    case Binary::pow: return run([](F x, F y) { return v_pow(x, y); });
    case Binary::maximum: return run([](F x, F y) { return v_max(x, y); });
    case Binary::minimum: return run([](F x, F y) { return v_min(x, y); });
  }
}

inline float h_to_f(const f16* p) {  // one element through the vector converter (no scalar helper here)
  alignas(64) float t[W];
  V::store(t, V::load_h_n(p, 1));
  return t[0];
}

void i_binary_vv(Binary op, const f16* a, const f16* b, f16* out, size_t n) {
  auto id = [](F x) { return x; };
  binary_loop(op, a, b, out, n, id, id);
}
void i_binary_vs(Binary op, const f16* a, f16 s, f16* out, size_t n) {
  F sv = k(h_to_f(&s));
  binary_loop(op, a, a, out, n, [](F x) { return x; }, [&](F) { return sv; });
}
void i_binary_sv(Binary op, f16 s, const f16* b, f16* out, size_t n) {
  F sv = k(h_to_f(&s));
  binary_loop(op, b, b, out, n, [&](F) { return sv; }, [](F y) { return y; });
}

// Sign-bit ops on raw fp16 bits (the compiler vectorises these loops).
bool bit_unary(Unary op, const f16* x, f16* y, size_t n) {
  switch (op) {
    case Unary::identity:
      if (x != y) std::memmove(y, x, n * sizeof(f16));
      return true;
    case Unary::neg:
      for (size_t i = 0; i < n; ++i) y[i] = (f16)(x[i] ^ 0x8000u);
      return true;
    case Unary::abs:
      for (size_t i = 0; i < n; ++i) y[i] = (f16)(x[i] & 0x7fffu);
      return true;
    case Unary::relu:
      for (size_t i = 0; i < n; ++i) {
        f16 h = x[i];
        y[i] = ((h & 0x8000u) && (h & 0x7fffu) <= 0x7c00u) ? (f16)0 : h;
      }
      return true;
    default: return false;
  }
}

void i_unary(Unary op, const f16* x, f16* y, size_t n, float param) {
  if (bit_unary(op, x, y, n)) return;
  F pv = k(param);
  switch (op) {
    case Unary::exp: return map1(x, y, n, [](F v) { return v_exp(v); });
    case Unary::log: return map1(x, y, n, [&](F v) { return v_log(V::add(v, pv)); });
    case Unary::sqrt: return map1(x, y, n, [&](F v) { return V::sqrt(V::add(v, pv)); });
    case Unary::rsqrt: return map1(x, y, n, [&](F v) { return V::div(k(1.0f), V::sqrt(V::add(v, pv))); });
    case Unary::tanh: return map1(x, y, n, [](F v) { return v_tanh(v); });
    case Unary::sigmoid: return map1(x, y, n, [](F v) { return v_sigmoid(v); });
    case Unary::square: return map1(x, y, n, [](F v) { return V::mul(v, v); });
    case Unary::reciprocal: return map1(x, y, n, [](F v) { return V::div(k(1.0f), v); });
    case Unary::silu: return map1(x, y, n, [](F v) { return v_silu(v); });
    case Unary::gelu_tanh: return map1(x, y, n, [](F v) { return v_gelu_tanh(v); });
    case Unary::gelu_exact: return map1(x, y, n, [](F v) { return v_gelu_exact(v); });
    default: return map1(x, y, n, [](F v) { return v; });
  }
}

void i_clip(const f16* x, f16* y, size_t n, float lo, float hi) {
  F l = k(lo), h = k(hi);
  map1(x, y, n, [&](F v) {
    v = V::select(V::lt(v, l), l, v);
    return V::select(V::gt(v, h), h, v);
  });
}

void i_scale_bias(const f16* x, f16* y, size_t n, float scale, float bias) {
  F s = k(scale), b = k(bias);
  map1(x, y, n, [&](F v) { return V::fma(v, s, b); });
}

void i_f16_to_f32(const f16* src, float* dst, size_t n) {
  size_t i = 0;
  for (; i + 2 * W <= n; i += 2 * W) {
    V::store(dst + i, V::load_h(src + i));
    V::store(dst + i + W, V::load_h(src + i + W));
  }
  for (; i + W <= n; i += W) V::store(dst + i, V::load_h(src + i));
  if (i < n) V::store_n(dst + i, V::load_h_n(src + i, (int)(n - i)), (int)(n - i));
}

void i_f32_to_f16(const float* src, f16* dst, size_t n) {
  size_t i = 0;
  for (; i + 2 * W <= n; i += 2 * W) {
    V::store_h(dst + i, V::load(src + i));
    V::store_h(dst + i + W, V::load(src + i + W));
  }
  for (; i + W <= n; i += W) V::store_h(dst + i, V::load(src + i));
  if (i < n) V::store_h_n(dst + i, V::load_n(src + i, (int)(n - i)), (int)(n - i));
}

// ---- reductions -------------------------------------------------------------------------------
// Scalar merge of partial lanes, as scalar.cpp's merge().
inline float s_merge(Reduce op, float a, float b) {
  switch (op) {
    case Reduce::max: return (b > a || b != b) ? b : a;
    case Reduce::min: return (b < a || b != b) ? b : a;
    case Reduce::prod: return a * b;
    default: return a + b;
  }
}

template <Reduce op>
inline F comb(F acc, F x) {
  if constexpr (op == Reduce::sum || op == Reduce::mean) return V::add(acc, x);
  if constexpr (op == Reduce::max) return V::select(V::mor(V::gt(x, acc), V::isnan(x)), x, acc);
  if constexpr (op == Reduce::min) return V::select(V::mor(V::lt(x, acc), V::isnan(x)), x, acc);
  if constexpr (op == Reduce::prod) return V::mul(acc, x);
  if constexpr (op == Reduce::sum_square) return V::fma(x, x, acc);
  return acc;
}

// Canonical kLanes-lane reduction; Load(i) gives W elements starting at i, LoadN(i, r) the first r.
template <Reduce op, typename Load, typename LoadN>
inline float lanes_reduce(int64_t n, Load load, LoadN load_n) {
  constexpr int Q = kLanes / W;
  F acc[Q];
  for (int q = 0; q < Q; ++q) acc[q] = k(reduce_identity(op));
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int q = 0; q < Q; ++q) acc[q] = comb<op>(acc[q], load(i + q * W));
  for (int q = 0; q < Q; ++q) {
    int64_t r = n - i - q * W;
    if (r <= 0) break;
    if (r >= W) {
      acc[q] = comb<op>(acc[q], load(i + q * W));
    } else {
      Msk m = V::lanes((int)r);
      acc[q] = V::select(m, comb<op>(acc[q], load_n(i + q * W, (int)r)), acc[q]);
    }
  }
  alignas(64) float t[kLanes];
  for (int q = 0; q < Q; ++q) V::store(t + q * W, acc[q]);
  for (int w = kLanes / 2; w >= 1; w /= 2)
    for (int j = 0; j < w; ++j) t[j] = s_merge(op, t[j], t[j + w]);
  return t[0];
}

template <Reduce op>
float reduce_row_t(const f16* x, int64_t n) {
  return lanes_reduce<op>(
      n, [&](int64_t i) { return V::load_h(x + i); }, [&](int64_t i, int r) { return V::load_h_n(x + i, r); });
}

float i_reduce_row(Reduce op, const f16* x, int64_t n) {
  switch (op) {
    case Reduce::sum: case Reduce::mean: return reduce_row_t<Reduce::sum>(x, n);
    case Reduce::max: return reduce_row_t<Reduce::max>(x, n);
    case Reduce::min: return reduce_row_t<Reduce::min>(x, n);
    case Reduce::prod: return reduce_row_t<Reduce::prod>(x, n);
    case Reduce::sum_square: return reduce_row_t<Reduce::sum_square>(x, n);
  }
  return 0.0f;
}

template <Reduce op>
void reduce_step_t(const f16* x, float* acc, int64_t n) {
  int64_t i = 0;
  for (; i + W <= n; i += W) V::store(acc + i, comb<op>(V::load(acc + i), V::load_h(x + i)));
  if (i < n) {
    int r = (int)(n - i);
    V::store_n(acc + i, comb<op>(V::load_n(acc + i, r), V::load_h_n(x + i, r)), r);
  }
}

void i_reduce_step(Reduce op, const f16* x, float* acc, int64_t n) {
  switch (op) {
    case Reduce::sum: case Reduce::mean: return reduce_step_t<Reduce::sum>(x, acc, n);
    case Reduce::max: return reduce_step_t<Reduce::max>(x, acc, n);
    case Reduce::min: return reduce_step_t<Reduce::min>(x, acc, n);
    case Reduce::prod: return reduce_step_t<Reduce::prod>(x, acc, n);
    case Reduce::sum_square: return reduce_step_t<Reduce::sum_square>(x, acc, n);
  }
}

// ---- softmax ----------------------------------------------------------------------------------
void i_softmax_row(const f16* x, f16* y, int64_t n, float* e) {
  F m = k(reduce_row_t<Reduce::max>(x, n));
  int64_t i = 0;
  for (; i + W <= n; i += W) V::store(e + i, v_exp(V::sub(V::load_h(x + i), m)));
  if (i < n) V::store_n(e + i, v_exp(V::sub(V::load_h_n(x + i, (int)(n - i)), m)), (int)(n - i));
  F s = k(lanes_reduce<Reduce::sum>(
      n, [&](int64_t j) { return V::load(e + j); }, [&](int64_t j, int r) { return V::load_n(e + j, r); }));
  for (i = 0; i + W <= n; i += W) V::store_h(y + i, V::div(V::load(e + i), s));
  if (i < n) V::store_h_n(y + i, V::div(V::load_n(e + i, (int)(n - i)), s), (int)(n - i));
}

void i_exp_sub_acc(const f16* x, const float* m, float* e, float* s, int64_t n) {
  int64_t i = 0;
  for (; i + W <= n; i += W) {
    F v = v_exp(V::sub(V::load_h(x + i), V::load(m + i)));
    V::store(e + i, v);
    V::store(s + i, V::add(V::load(s + i), v));
  }
  if (i < n) {
    int r = (int)(n - i);
    F v = v_exp(V::sub(V::load_h_n(x + i, r), V::load_n(m + i, r)));
    V::store_n(e + i, v, r);
    V::store_n(s + i, V::add(V::load_n(s + i, r), v), r);
  }
}

void i_div_to_f16(const float* e, const float* s, f16* y, int64_t n) {
  int64_t i = 0;
  for (; i + W <= n; i += W) V::store_h(y + i, V::div(V::load(e + i), V::load(s + i)));
  if (i < n) {
    int r = (int)(n - i);
    // Lanes past r divide 0/0 harmlessly; only r results are stored.
    V::store_h_n(y + i, V::div(V::load_n(e + i, r), V::load_n(s + i, r)), r);
  }
}

}  // namespace
}  // namespace orion::cpu::simd
