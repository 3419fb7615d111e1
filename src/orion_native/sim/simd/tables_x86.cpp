// x86 ISA tables (plain data, baseline-compiled: nothing here executes AVX code; dispatch.cpp hands a
// table out only after checking the CPU).
#if defined(ORION_X86)
#include "sim/simd/isa_decls.h"

namespace orion::sim::simd {

const IsaOps* avx512_ops() {
  static const IsaOps t = [] {
    IsaOps o = scalar_ops();
    o.name = "avx512";
    o.gemm_mr = 12;
    o.gemm_nr = 32;
    o.gemm_micro = avx512::gemm_micro;
    o.gemm_pack_rows = avx512::gemm_pack_rows;
    o.f16_to_f32 = avx512::f16_to_f32;
    o.f32_to_f16 = avx512::f32_to_f16;
    o.binary_vv = avx512::binary_vv;
    o.binary_vs = avx512::binary_vs;
    o.binary_sv = avx512::binary_sv;
    o.unary = avx512::unary;
    o.clip = avx512::clip;
    o.scale_bias = avx512::scale_bias;
    o.reduce_row = avx512::reduce_row;
    o.reduce_step = avx512::reduce_step;
    o.softmax_row = avx512::softmax_row;
    o.exp_sub_acc = avx512::exp_sub_acc;
    o.div_to_f16 = avx512::div_to_f16;
    return o;
  }();
  return &t;
}

const IsaOps* avx2_ops() {
  static const IsaOps t = [] {
    IsaOps o = scalar_ops();
    o.name = "avx2";
    o.gemm_mr = 6;
    o.gemm_nr = 16;
    o.gemm_micro = avx2::gemm_micro;
    o.gemm_pack_rows = avx2::gemm_pack_rows;
    o.f16_to_f32 = avx2::f16_to_f32;
    o.f32_to_f16 = avx2::f32_to_f16;
    o.binary_vv = avx2::binary_vv;
    o.binary_vs = avx2::binary_vs;
    o.binary_sv = avx2::binary_sv;
    o.unary = avx2::unary;
    o.clip = avx2::clip;
    o.scale_bias = avx2::scale_bias;
    o.reduce_row = avx2::reduce_row;
    o.reduce_step = avx2::reduce_step;
    o.softmax_row = avx2::softmax_row;
    o.exp_sub_acc = avx2::exp_sub_acc;
    o.div_to_f16 = avx2::div_to_f16;
    return o;
  }();
  return &t;
}

}  // namespace orion::sim::simd
#endif
