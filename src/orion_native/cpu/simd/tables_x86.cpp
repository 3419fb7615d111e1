// x86 ISA tables: plain data, baseline-compiled. Nothing here executes AVX code; dispatch.cpp hands a
// table out only after checking the CPU.
#if defined(ORION_X86)
#include "cpu/simd/isa_decls.h"

namespace orion::cpu::simd {

#define ORION_TABLE(isa, mr, nr, q8, rows, lut4)                                                       \
  {                                                                                                \
    #isa, isa::f16_to_f32, isa::f32_to_f16, mr, nr, isa::gemm_micro, isa::gemm_pack_rows,          \
        isa::cvt_transpose,                                                                        \
        isa::binary_vv, isa::binary_vs, isa::binary_sv, isa::unary, isa::clip, isa::scale_bias,    \
        isa::reduce_row, isa::reduce_step, isa::softmax_row, isa::exp_sub_acc, isa::div_to_f16,    \
        isa::gemm_panel, isa::panel_group, isa::decode_ss8, isa::decode_lut4, q8, rows, lut4,       \
  }

const IsaOps* avx512_ops() {
  static const IsaOps t = ORION_TABLE(avx512, 12, 32, avx512::gemm_panel_q8, avx512::gemm_rows,
                                     avx512::gemm_panel_lut4);
  return &t;
}

const IsaOps* avx2_ops() {
  static const IsaOps t = ORION_TABLE(avx2, 6, 16, avx2::gemm_panel_q8, nullptr, avx2::gemm_panel_lut4);
  return &t;
}

#undef ORION_TABLE

}  // namespace orion::cpu::simd
#endif
