// CPU compute kernels: the simulator's ops, the runtime's conversions and the Python layer's fp16 math.
// fp16 storage (orion::f16 bits) in and out, fp32 arithmetic inside, one rounding to fp16 per op output
// (overflow -> +-inf, NaN propagates) — C37.
// Vectorised per ISA (cpu/simd, runtime dispatch) and multithreaded (cpu/threadpool.h).
// All tensors are dense row-major; "strides" are in elements. Shapes up to rank 5.
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <vector>

#include "common/fp16.h"

namespace orion::cpu::kernels {

// ---- conversion (exact IEEE, round to nearest even) -------------------------------------------
void f16_to_f32(const f16* src, float* dst, size_t n);
void f32_to_f16(const float* src, f16* dst, size_t n);

// ---- symmetric 8-bit quantization (cpu/kernels/quantize.cpp) --------------------------------------
// max |w| of each fp16 row [n][d] (NaN where a row holds one); codes clip(rint(w / scale[r]), -127, 127) of each
// row in float32 arithmetic - orion.quant.quantize_int8's, bit for bit.
void absmax_rows_f16(const f16* w, int64_t n, int64_t d, float* out);
void quantize_rows_s8(const f16* w, int64_t n, int64_t d, const float* scale, int8_t* out);

// ---- GEMM ---------------------------------------------------------------------------------------
// For each batch b: C_b[M,N] = op(A_b)[M,K] * op(B_b)[K,N], fp32 accumulation, one rounding to fp16.
// op(A) = A (A stored [M, lda>=K]) or A^T (trans_a: A stored [K, lda>=M]); likewise B ([K, ldb>=N] or
// trans_b: [N, ldb>=K]). C stored [M, ldc>=N]. Batches are independent (pointer arrays, length batch).
// Parallelised over batches and tiles; the result does not depend on the thread count.
struct GemmShape {
  int64_t M = 0, N = 0, K = 0;
  bool trans_a = false, trans_b = false;
  int64_t lda = 0, ldb = 0, ldc = 0;
};
void gemm_f16(const GemmShape& g, int64_t batch, const f16* const* A, const f16* const* B, f16* const* C);
// Same contract with fp32 output (no rounding) — used where an op needs the unrounded accumulator.
void gemm_f16_f32out(const GemmShape& g, int64_t batch, const f16* const* A, const f16* const* B, float* const* C);
// fp32 operands and output, one product (the trainer's CPU weight gradients): the same blocked route and
// microkernels, so each C element is the in-order fp32 fma chain over k from +0, whatever the threads or ISA.
void gemm_f32(const GemmShape& g, const float* A, const float* B, float* C);

// A constant left operand (conv weights) packed once, at plan build, into fp16 panels of 16 rows of
// op(A), k-major ([ceil(M/16)][K][16], rows past M zero): the panel kernel streams it as stored and
// widens it in registers, so nothing about it is converted or copied per call. Same bytes as A.
// Or, for a compressed weight (compressed.h), no panels at all: `source` decodes each panel when the
// kernel needs it (per call, per thread), so only the compressed bytes are kept.
struct PanelSource;
struct PackedA {
  struct Free {
    void operator()(f16* p) const { std::free(p); }
  };
  int64_t M = 0, K = 0;
  std::unique_ptr<f16[], Free> data;
  std::shared_ptr<const PanelSource> source;
  const f16* view = nullptr;  // panels owned by the caller (data empty): gemm_panels_f16
  const f16* panel(int64_t p) const { return (data ? data.get() : view) + p * K * 16; }
};
PackedA pack_a(const f16* A, int64_t M, int64_t K, int64_t lda = 0, bool trans_a = false);
PackedA pack_a(std::shared_ptr<const PanelSource> source, int64_t M, int64_t K);
// gemm_f16 with op(A) = a (g.M, g.K, trans_a, lda are taken from a). Same results as gemm_f16.
// trans_c: C_b stored transposed, [N][ldc] (ldc >= M; default M): each column's M results contiguous.
void gemm_packed_f16(const PackedA& a, const GemmShape& g, int64_t batch, const f16* const* B, f16* const* C,
                     bool trans_c = false);
void gemm_packed_f16(const PackedA& a, const GemmShape& g, int64_t batch, const f16* const* B, float* const* C,
                     bool trans_c = false);

// ---- element-wise -------------------------------------------------------------------------------
enum class Binary { add, sub, mul, div, pow, maximum, minimum };
// out[idx] = a[idx . a_strides] (op) b[idx . b_strides] over out_shape; broadcasting = stride 0.
// rank = out_shape.size() <= 5; a_strides/b_strides have the same rank.
void binary(Binary op, const f16* a, const std::vector<int64_t>& a_strides, const f16* b,
            const std::vector<int64_t>& b_strides, f16* out, const std::vector<int64_t>& out_shape);

enum class Unary { exp, log, sqrt, rsqrt, tanh, sigmoid, relu, neg, abs, square, reciprocal,
                   silu, gelu_tanh, gelu_exact, identity };
// y = f(x) (+ param: log/rsqrt epsilon, added to x before the function). In-place allowed (x == y).
void unary(Unary op, const f16* x, f16* y, size_t n, float param = 0.0f);
// y = clamp(x, lo, hi) (NaN stays NaN)
void clip(const f16* x, f16* y, size_t n, float lo, float hi);
// y = x * scale + bias, per element (fp32 math, one rounding). Used by dequantisation and norms.
void scale_bias(const f16* x, f16* y, size_t n, float scale, float bias);

// ---- reductions and softmax ---------------------------------------------------------------------
// View x as [outer, axis_len, inner]; reduce the middle axis into y[outer, inner] with fp32
// accumulation, one rounding. (The executor folds multi-axis reductions into repeated calls or a
// transpose.)
enum class Reduce { sum, mean, max, min, prod, sum_square };
// The value a reduction starts from (every route: the blocked kernels, each ISA's lanes, the scalar ISA).
inline float reduce_identity(Reduce op) {
  switch (op) {
    case Reduce::max: return -INFINITY;
    case Reduce::min: return INFINITY;
    case Reduce::prod: return 1.0f;
    default: return 0.0f;
  }
}
void reduce(Reduce op, const f16* x, f16* y, int64_t outer, int64_t axis_len, int64_t inner);
// Softmax over the middle axis of [outer, axis_len, inner]: max-subtracted, fp32 exp and sum, one
// rounding per output. Rows with -inf everywhere give NaN (as IEEE does).
void softmax(const f16* x, f16* y, int64_t outer, int64_t axis_len, int64_t inner);

// ---- layout (dtype-agnostic: elem_size in bytes, 1/2/4/8) ---------------------------------------
// y = permute(x, perm): y.shape[i] = x_shape[perm[i]].
void transpose(const void* x, void* y, size_t elem_size, const std::vector<int64_t>& x_shape,
               const std::vector<int64_t>& perm);
// Strided gather: y[idx] = x[offset + sum idx_i * x_strides_i] for idx over y_shape (slices, broadcasts).
void strided_copy(const void* x, void* y, size_t elem_size, int64_t offset, const std::vector<int64_t>& x_strides,
                  const std::vector<int64_t>& y_shape);

// ---- optimizer ----------------------------------------------------------------------------------
// AdamW on fp32 arrays of n elements, in place: m = b1 m + ga g; v = b2 v + gb g^2; p = decay p;
// p -= k m / (sqrt(v) + eps) - every operation one fp32 rounding, in that order (numpy's, optim.py).
struct AdamWCoef {
  float b1, b2, ga, gb, k, eps, decay;
};
void adamw_update(float* p, const float* g, float* m, float* v, size_t n, const AdamWCoef& c);

// ---- which implementation is active ---------------------------------------------------------------
const char* isa_name();  // "avx512", "avx2", "neon", "scalar"
// Forces a narrower ISA for tests ("scalar", "avx2", ...); returns false if unsupported here.
bool force_isa(const char* name);

}  // namespace orion::cpu::kernels
