// Portable scalar primitives: the fallback ISA and the reference the vector files must match bit for bit.
#include <cmath>
#include <cstring>

#include "cpu/simd/isa.h"
#include "cpu/simd/scalar_math.h"

namespace orion::cpu::simd {
namespace {

// Like F16C/NEON: a signalling NaN comes out quiet (IEEE conversion), payload kept.
inline float h2f(f16 h) {
  float f = orion::f16_to_f32(h);
  if ((h & 0x7c00u) == 0x7c00u && (h & 0x3ffu)) f = sm_from_bits(sm_bits(f) | 0x00400000u);
  return f;
}

void s_f16_to_f32(const f16* src, float* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = h2f(src[i]);
}
void s_f32_to_f16(const float* src, f16* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = orion::f32_to_f16(src[i]);
}

constexpr int kMR = 4, kNR = 16;

void s_gemm_micro(const GemmTile& g) {
  float t[kMR][kNR];
  for (int r = 0; r < g.rows; ++r)
    for (int j = 0; j < kNR; ++j) t[r][j] = g.cin ? g.cin[r * g.ldcin + j] : 0.0f;
  float row[kNR];
  for (int64_t k = 0; k < g.kc; ++k) {
    if (g.bh)  // unpacked fp16 B
      for (int j = 0; j < kNR; ++j) row[j] = j < g.bcols ? h2f(g.bh[k * g.ldbh + j]) : 0.0f;
    const float* b = g.bh ? row : g.bp + k * kNR;
    for (int r = 0; r < g.rows; ++r)
      for (int j = 0; j < kNR; ++j) t[r][j] = std::fma(g.ap[r * g.lda + k], b[j], t[r][j]);
  }
  for (int r = 0; r < g.rows; ++r)
    for (int j = 0; j < g.cols; ++j) {
      if (g.o16)
        g.o16[r * g.ldo + j] = orion::f32_to_f16(t[r][j]);
      else
        g.o32[r * g.ldo + j] = t[r][j];
    }
}

void s_gemm_pack_rows(const f16* src, int64_t ld, int64_t kc, int64_t cols, int nr, float* dst) {
  for (int64_t k = 0; k < kc; ++k, src += ld, dst += nr) {
    int64_t j = 0;
    for (; j < cols; ++j) dst[j] = h2f(src[j]);
    for (; j < nr; ++j) dst[j] = 0.0f;
  }
}

void s_cvt_transpose(const f16* src, int64_t ld, int64_t rows, int64_t rows_pad, int64_t cols, float* dst,
                     int64_t ldd) {
  for (int64_t c = 0; c < cols; ++c)
    for (int64_t r = 0; r < rows_pad; ++r) dst[c * ldd + r] = r < rows ? h2f(src[r * ld + c]) : 0.0f;
}

inline f16 f2h(float f) { return orion::f32_to_f16(f); }

void s_binary_vv(Binary op, const f16* a, const f16* b, f16* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = f2h(sm_binary(op, h2f(a[i]), h2f(b[i])));
}
void s_binary_vs(Binary op, const f16* a, f16 s, f16* out, size_t n) {
  float sf = h2f(s);
  for (size_t i = 0; i < n; ++i) out[i] = f2h(sm_binary(op, h2f(a[i]), sf));
}
void s_binary_sv(Binary op, f16 s, const f16* b, f16* out, size_t n) {
  float sf = h2f(s);
  for (size_t i = 0; i < n; ++i) out[i] = f2h(sm_binary(op, sf, h2f(b[i])));
}

float unary1(Unary op, float x, float param) {
  switch (op) {
    case Unary::exp: return sm_exp(x);
    case Unary::log: return sm_log(x + param);
    case Unary::sqrt: return std::sqrt(x + param);
    case Unary::rsqrt: return 1.0f / std::sqrt(x + param);
    case Unary::tanh: return sm_tanh(x);
    case Unary::sigmoid: return sm_sigmoid(x);
    case Unary::square: return x * x;
    case Unary::reciprocal: return 1.0f / x;
    case Unary::silu: return sm_silu(x);
    case Unary::gelu_tanh: return sm_gelu_tanh(x);
    case Unary::gelu_exact: return sm_gelu_exact(x);
    default: return x;
  }
}

// Sign-bit ops work on the fp16 bits directly (exact, no conversion).
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
    case Unary::relu:  // negative (incl. -0) -> +0, NaN kept
      for (size_t i = 0; i < n; ++i) {
        f16 h = x[i];
        y[i] = ((h & 0x8000u) && (h & 0x7fffu) <= 0x7c00u) ? (f16)0 : h;
      }
      return true;
    default: return false;
  }
}

void s_unary(Unary op, const f16* x, f16* y, size_t n, float param) {
  if (bit_unary(op, x, y, n)) return;
  for (size_t i = 0; i < n; ++i) y[i] = f2h(unary1(op, h2f(x[i]), param));
}

void s_clip(const f16* x, f16* y, size_t n, float lo, float hi) {
  for (size_t i = 0; i < n; ++i) {
    float v = h2f(x[i]);
    v = v < lo ? lo : v;
    v = v > hi ? hi : v;
    y[i] = f2h(v);
  }
}

void s_scale_bias(const f16* x, f16* y, size_t n, float scale, float bias) {
  for (size_t i = 0; i < n; ++i) y[i] = f2h(std::fma(h2f(x[i]), scale, bias));
}

inline float combine(Reduce op, float acc, float x) {
  switch (op) {
    case Reduce::sum:
    case Reduce::mean: return acc + x;
    case Reduce::max: return sm_max(acc, x);
    case Reduce::min: return sm_min(acc, x);
    case Reduce::prod: return acc * x;
    case Reduce::sum_square: return std::fma(x, x, acc);
  }
  return acc;
}
// Merging two partial accumulators (sum_square partials are plain sums).
inline float merge(Reduce op, float a, float b) {
  return combine(op == Reduce::sum_square ? Reduce::sum : op, a, b);
}

float lanes_reduce(Reduce op, const float* x, int64_t n) {
  float acc[kLanes];
  for (int j = 0; j < kLanes; ++j) acc[j] = reduce_identity(op);
  for (int64_t i = 0; i < n; ++i) acc[i % kLanes] = combine(op, acc[i % kLanes], x[i]);
  for (int w = kLanes / 2; w >= 1; w /= 2)
    for (int j = 0; j < w; ++j) acc[j] = merge(op, acc[j], acc[j + w]);
  return acc[0];
}

float s_reduce_row(Reduce op, const f16* x, int64_t n) {
  float acc[kLanes];
  for (int j = 0; j < kLanes; ++j) acc[j] = reduce_identity(op);
  for (int64_t i = 0; i < n; ++i) acc[i % kLanes] = combine(op, acc[i % kLanes], h2f(x[i]));
  for (int w = kLanes / 2; w >= 1; w /= 2)
    for (int j = 0; j < w; ++j) acc[j] = merge(op, acc[j], acc[j + w]);
  return acc[0];
}

void s_reduce_step(Reduce op, const f16* x, float* acc, int64_t n) {
  for (int64_t i = 0; i < n; ++i) acc[i] = combine(op, acc[i], h2f(x[i]));
}

void s_softmax_row(const f16* x, f16* y, int64_t n, float* e) {
  float m = s_reduce_row(Reduce::max, x, n);
  for (int64_t i = 0; i < n; ++i) e[i] = sm_exp(h2f(x[i]) - m);
  float s = lanes_reduce(Reduce::sum, e, n);
  for (int64_t i = 0; i < n; ++i) y[i] = f2h(e[i] / s);
}

void s_exp_sub_acc(const f16* x, const float* m, float* e, float* s, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    e[i] = sm_exp(h2f(x[i]) - m[i]);
    s[i] = s[i] + e[i];
  }
}

void s_div_to_f16(const float* e, const float* s, f16* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = f2h(e[i] / s[i]);
}

// Panel GEMM reference: acc[j][r] over k in order, fma(a, b, acc) as in s_gemm_micro.
void s_gemm_panel_one(const PanelTile& t) {
  float acc[kPanelCols][kPanelRows] = {};
  for (int64_t k = 0; k < t.K; ++k) {
    const f16* a = t.ap + k * t.lda;
    const float* b = t.bp + k * t.ldb;
    for (int j = 0; j < t.cols; ++j)
      for (int r = 0; r < kPanelRows; ++r) acc[j][r] = std::fma(h2f(a[r]), b[j], acc[j][r]);
  }
  for (int r = 0; r < t.rows; ++r)
    for (int j = 0; j < t.cols; ++j) {
      int64_t at = t.trans_c ? j * t.ldo + r : r * t.ldo + j;
      if (t.o16)
        t.o16[at] = orion::f32_to_f16(acc[j][r]);
      else
        t.o32[at] = acc[j][r];
    }
}

void s_gemm_panel(const PanelTile& t) { for_each_panel(t, s_gemm_panel_one); }

int s_panel_group(int) { return 1; }

const IsaOps kScalar = {
    "scalar",      s_f16_to_f32,   s_f32_to_f16,  kMR,           kNR,
    s_gemm_micro,  s_gemm_pack_rows, s_cvt_transpose, s_binary_vv, s_binary_vs,   s_binary_sv,
    s_unary,       s_clip,         s_scale_bias,  s_reduce_row,  s_reduce_step,
    s_softmax_row, s_exp_sub_acc,  s_div_to_f16,  s_gemm_panel,  s_panel_group, decode_ss8_ref, decode_lut4_ref,
    nullptr,       nullptr,        nullptr,
};

}  // namespace

const IsaOps& scalar_ops() { return kScalar; }

}  // namespace orion::cpu::simd
