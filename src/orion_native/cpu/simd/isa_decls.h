// Per-ISA kernel entry points (namespaces avx2 / avx512 / neon), defined in the *_<isa>.cpp files
// (compiled with that ISA's flags) and collected into IsaOps tables by tables_x86.cpp / tables_arm.cpp.
#pragma once
#include <cstddef>
#include <cstdint>

#include "cpu/simd/isa.h"

namespace orion::cpu::simd {

#define ORION_ISA_DECLS                                                                                    \
  void gemm_micro(const GemmTile& t);                                                                     \
  void gemm_pack_rows(const f16* src, int64_t ld, int64_t kc, int64_t cols, int nr, float* dst);           \
  void cvt_transpose(const f16* src, int64_t ld, int64_t rows, int64_t rows_pad, int64_t cols, float* dst,  \
                     int64_t ldd);                                                                         \
  void f16_to_f32(const f16* src, float* dst, size_t n);                                                   \
  void f32_to_f16(const float* src, f16* dst, size_t n);                                                   \
  void binary_vv(Binary op, const f16* a, const f16* b, f16* out, size_t n);                               \
  void binary_vs(Binary op, const f16* a, f16 s, f16* out, size_t n);                                      \
  void binary_sv(Binary op, f16 s, const f16* b, f16* out, size_t n);                                      \
  void unary(Unary op, const f16* x, f16* y, size_t n, float param);                                       \
  void clip(const f16* x, f16* y, size_t n, float lo, float hi);                                           \
  void scale_bias(const f16* x, f16* y, size_t n, float scale, float bias);                                \
  float reduce_row(Reduce op, const f16* x, int64_t n);                                                    \
  void reduce_step(Reduce op, const f16* x, float* acc, int64_t n);                                        \
  void softmax_row(const f16* x, f16* y, int64_t n, float* scratch);                                       \
  void exp_sub_acc(const f16* x, const float* m, float* e, float* s, int64_t n);                           \
  void div_to_f16(const float* e, const float* s, f16* y, int64_t n);                                     \
  void gemm_panel(const PanelTile& t);                                                                    \
  int panel_group(int cols);                                                                               \
  void decode_ss8(const uint8_t* codes, int64_t n, bool is_signed, const float* sc, const float* of, f16* dst); \
  void decode_lut4(const uint8_t* codes, int64_t n, const f16* table, f16* dst);

namespace avx2 {
ORION_ISA_DECLS void gemm_panel_q8(const PanelTile& t);
void gemm_panel_lut4(const PanelTile& t);
}  // namespace avx2
namespace avx512 {
ORION_ISA_DECLS void gemm_panel_q8(const PanelTile& t);
void gemm_rows(const GemmTile& t);
void gemm_panel_lut4(const PanelTile& t);
}  // namespace avx512
namespace neon { ORION_ISA_DECLS }

}  // namespace orion::cpu::simd
