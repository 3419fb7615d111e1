// Panel GEMM driver (internal to cpu/kernels): C = op(A) op(B) for few columns of C (N <= 32), with
// op(A) in fp16 panels of 16 rows, k-major — either packed once ahead (PackedA: constant weights),
// read in place (transposed A), or packed per 16-row panel by the thread that computes it.
#pragma once
#include "cpu/kernels/kernels.h"

namespace orion::cpu::kernels {

// gemm_f16 takes this route for N <= kPanelMaxCols when op(A) has >= 16 rows: there, the blocked GEMM
// would compute mostly padding columns or pack a big A for little work.
constexpr int64_t kPanelMaxCols = 32;
// ...and up to this many when op(A) is stored k-major in whole panels (read in place, never packed).
constexpr int64_t kPanelInPlaceMaxCols = 128;

// pa may be null (then A[b] is read per g.trans_a / g.lda). g has dense leading dimensions resolved.
// trans_c: C_b is stored transposed ([N][ldc]): how gemm_f16 computes a product with few rows and many
// columns, as C^T = op(B)^T op(A)^T, writing C directly.
void panel_gemm(const GemmShape& g, int64_t batch, const f16* const* A, const PackedA* pa, const f16* const* B,
                f16* const* C, bool trans_c = false);
void panel_gemm(const GemmShape& g, int64_t batch, const f16* const* A, const PackedA* pa, const f16* const* B,
                float* const* C, bool trans_c = false);

}  // namespace orion::cpu::kernels
