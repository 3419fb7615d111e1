// Per-ISA primitive table used by the kernel drivers in sim/kernels. Each ISA file (scalar.cpp,
// *_avx2.cpp, *_avx512.cpp, *_neon.cpp) fills one table; dispatch.cpp picks one at run time.
//
// Every entry must produce bit-identical results on every ISA: same fp32 operation sequence per
// element (explicit fma where a product feeds a sum), same reduction order (see canonical lanes
// below). Tests check this with force_isa().
#pragma once
#include <cstddef>
#include <cstdint>

#include "common/fp16.h"
#include "sim/kernels/kernels.h"

namespace orion::sim::simd {

using kernels::Binary;
using kernels::Reduce;
using kernels::Unary;

// Contiguous-axis reductions sum into kLanes partial accumulators (element i goes to lane i % kLanes,
// in order), combined by halving: lane j += lane j + kLanes/2, ... This fixes the rounding order.
constexpr int kLanes = 16;

struct IsaOps {
  const char* name;

  void (*f16_to_f32)(const f16* src, float* dst, size_t n);
  void (*f32_to_f16)(const float* src, f16* dst, size_t n);

  // GEMM microkernel: C[mr x nr] (+)= Ap * Bp over kc, where Ap is a row-major fp32 panel [mr][lda]
  // (row r of op(A), k contiguous: packing A is a plain conversion) and Bp is packed k-major [kc][nr].
  // C is fp32 with row stride ldc. Each C element is one fma chain over k in order (so blocking and
  // ISA do not change results).
  int gemm_mr, gemm_nr;
  void (*gemm_micro)(int64_t kc, const float* ap, int64_t lda, const float* bp, float* c, int64_t ldc,
                     bool accumulate);
  // Packs rows of B (non-transposed, [k][ldb]) into Bp [kc][nr]: converts nr halves per k (zero pad
  // past `cols`).
  void (*gemm_pack_rows)(const f16* src, int64_t ld, int64_t kc, int64_t cols, int nr, float* dst);

  // Element-wise on contiguous spans. vs: a[i] op s; sv: s op b[i].
  void (*binary_vv)(Binary op, const f16* a, const f16* b, f16* out, size_t n);
  void (*binary_vs)(Binary op, const f16* a, f16 s, f16* out, size_t n);
  void (*binary_sv)(Binary op, f16 s, const f16* b, f16* out, size_t n);
  void (*unary)(Unary op, const f16* x, f16* y, size_t n, float param);
  void (*clip)(const f16* x, f16* y, size_t n, float lo, float hi);
  void (*scale_bias)(const f16* x, f16* y, size_t n, float scale, float bias);

  // Reduction of one contiguous row in canonical lane order; returns the fp32 result (mean: the sum).
  float (*reduce_row)(Reduce op, const f16* x, int64_t n);
  // acc[i] = acc[i] op x[i] for i < n (strided-axis reductions; acc starts at the op's identity).
  void (*reduce_step)(Reduce op, const f16* x, float* acc, int64_t n);
  // Softmax of one contiguous row; scratch holds n floats.
  void (*softmax_row)(const f16* x, f16* y, int64_t n, float* scratch);
  // Strided softmax helpers over n columns: e[i] = exp(x[i] - m[i]); s[i] += e[i].
  void (*exp_sub_acc)(const f16* x, const float* m, float* e, float* s, int64_t n);
  // y[i] = round(e[i] / s[i]).
  void (*div_to_f16)(const float* e, const float* s, f16* y, int64_t n);
};

const IsaOps& scalar_ops();
const IsaOps* avx2_ops();    // nullptr when not compiled in
const IsaOps* avx512_ops();
const IsaOps* neon_ops();

// The active table (runtime dispatch, ORION_ISA override, force_isa()).
const IsaOps& ops();

}  // namespace orion::sim::simd
