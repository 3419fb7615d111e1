// Batched-GEMM geometry shared by matmul and scaled_dot_product_attention.
#pragma once
#include <string>
#include <vector>

#include "cpu/kernels/kernels.h"
#include "sim/ops/op.h"

namespace orion::sim::ops {

struct MatmulGeom {
  int64_t M = 0, N = 0, K = 0;
  bool drop_m = false, drop_n = false;  // rank-1 operands (numpy semantics)
  Shape batch, out;
  cpu::kernels::GemmShape gs;
  std::vector<int64_t> x_off, y_off;  // element offset of each broadcast batch's matrix
};

// Validates two operands of a (possibly transposed) product and precomputes the batch pointers.
MatmulGeom matmul_geometry(OpCtx& ctx, const std::string& xn, const std::string& yn, bool tx, bool ty);
// Element offsets (in units of `mat`-sized matrices) of `part` broadcast to `full`, row-major over full.
std::vector<int64_t> batch_offsets(const Shape& part, const Shape& full, int64_t mat);
// C36: |y| >= 32752 -> +-inf (NaN kept), on `rows` rows of `cols` entries, row stride `ld` (a product's live
// columns). Returns how many elements changed.
int64_t saturate_matmul(f16* y, int64_t rows, int64_t cols, int64_t ld);

}  // namespace orion::sim::ops
