// AArch64 ISA table (NEON and fp16<->fp32 conversion are part of the AArch64 baseline).
#if defined(ORION_ARM) && defined(__aarch64__)
#include "cpu/simd/isa_decls.h"

namespace orion::cpu::simd {

const IsaOps* neon_ops() {
  static const IsaOps t = {"neon", neon::f16_to_f32, neon::f32_to_f16, 8, 12, neon::gemm_micro,
                           neon::gemm_pack_rows, neon::cvt_transpose, neon::binary_vv, neon::binary_vs, neon::binary_sv,
                           neon::unary, neon::clip, neon::scale_bias, neon::reduce_row, neon::reduce_step,
                           neon::softmax_row, neon::exp_sub_acc, neon::div_to_f16, neon::gemm_panel,
                           neon::panel_group, neon::decode_ss8, neon::decode_lut4, nullptr, nullptr,
                           nullptr};
  return &t;
}

}  // namespace orion::cpu::simd
#elif defined(ORION_ARM)
#include "cpu/simd/isa.h"
namespace orion::cpu::simd {
const IsaOps* neon_ops() { return nullptr; }  // 32-bit ARM: scalar only
}  // namespace orion::cpu::simd
#endif
