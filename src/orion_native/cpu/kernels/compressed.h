// Compressed constant weights as the constexpr ops store them (constexpr_affine_dequantize,
// constexpr_lut_to_dense, constexpr_blockwise_shift_scale): integer codes at their bit width plus a table
// or a scale/offset per block. The plan keeps them like this; the panel GEMM decodes one 16-row panel at
// a time into fp16 (PanelSource), so a linear layer never holds its dense weight. Decoding gives exactly
// the op's fp16 result, so the product equals dequantize-then-fp16-GEMM bit for bit.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "common/fp16.h"

namespace orion::cpu::kernels {

// Rows [16p, 16p + 16) of a [M, K] operand as a k-major fp16 panel [K][16] (rows past M zero).
struct PanelSource {
  virtual ~PanelSource() = default;
  virtual void panel(int64_t p, f16* dst) const = 0;
};

// A [M, K] weight (dim 0 = rows, the other dims flattened). Element (r, k) has code c (bits wide) and
// parameter block b = (r / rows_per_block) * blocks_per_row + k / cols_per_block; its value is
//   lut:         lut[b << bits | c]                          (an fp16 table lookup, no arithmetic)
//   shift_scale: fp16(float(c - offset[b]) * scale[b])       (exact in fp32, one rounding)
// Codes are stored in panel order — for each 16-row panel, for each k, the 16 rows' codes packed
// LSB-first in 2 * bits bytes — so a panel decodes as one forward stream.
struct CompressedWeight : PanelSource {
  enum class Kind { lut, shift_scale };
  Kind kind = Kind::lut;
  int64_t M = 0, K = 0;
  unsigned bits = 8;
  bool is_signed = false;
  std::vector<uint8_t> codes;  // [ceil(M / 16)][K][2 * bits] (+ 8 bytes of slack for word reads)
  int64_t rows_per_block = 1, cols_per_block = 1, blocks_per_row = 1;
  std::vector<f16> lut;        // lut: [blocks][1 << bits]
  std::vector<float> scale;    // shift_scale: [blocks], fp16 values
  std::vector<float> offset;   // shift_scale: [blocks] integer values, or empty (0)

  // Codes from one byte per element, row-major [M][K] (int8 for signed, uint8 otherwise); M, K, bits set.
  void set_codes(const uint8_t* unpacked);
  // Rows [r0, r0 + n) of the codes from one byte per element, row-major [n][K], into codes already sized (by
  // set_codes, or zero_codes): r0 a multiple of 16 and n too unless the rows end at M, so that they fill whole
  // panels of their own - a big weight built a block of rows at a time, never whole in row-major form.
  void set_code_rows(int64_t r0, int64_t n, const uint8_t* unpacked);
  void zero_codes();  // every code 0 (M, K, bits set)
  void panel(int64_t p, f16* dst) const override;
  void dense(f16* dst) const;  // all M x K values, row-major
  // All M rows in a weight input's column-panel layout [ceil(M / width)][K][ld] (row r at
  // dst[(r / width) K ld + k ld + r % width]; width a multiple of 16, ld >= width the surface's padded row;
  // slots past M and past width untouched): a shared program's weight surface filled from the compressed
  // weight (models/streamed.py). Threads over panels.
  void panels_into(f16* dst, int64_t width, int64_t ld) const;
  // Whether a destination of `size` values with rows of `ld` fits panels_into(width): width a multiple of 16,
  // ld >= width, size = ceil(M / width) K ld (what its callers check before writing through a raw pointer).
  bool panels_fit(int64_t width, int64_t ld, int64_t size) const {
    return width >= 16 && width % 16 == 0 && ld >= width && size == (M + width - 1) / width * K * ld;
  }
  size_t bytes() const;        // what the plan holds: codes + tables / scales / offsets
};

// fp16(float(c - offset[b]) * scale[b]) for codes stored a byte each, row-major [M][K] (int8 when is_signed), with
// b = (r / rows_per_block) * blocks_per_row + k / (K / blocks_per_row): a shift/scale weight decoded in its file's
// layout (orion.quant's dequantize: the probe and the graphs' values), exactly as CompressedWeight decodes it. offset
// may be null (0). Threads over rows; the 16-code runs go through the ISA's decode_ss8.
void shift_scale_dense(const uint8_t* codes, bool is_signed, int64_t M, int64_t K, const float* scale,
                       const float* offset, int64_t rows_per_block, int64_t blocks_per_row, f16* dst);

// lut[(r / rows_per_table) << bits | c] for codes packed LSB-first at `bits` (1..8) in one row-major stream [M][K]
// (MILBlob's sub-byte layout): a constexpr_lut_to_dense weight decoded in its file's layout (orion.quant's
// dequantize). Threads over rows; 4-bit rows of whole 16-code runs go through the ISA's decode_lut4.
void lut_dense(const uint8_t* packed, unsigned bits, int64_t M, int64_t K, const f16* lut, int64_t rows_per_table,
               f16* dst);

// A compressed weight standing for bytes of a weight input laid out as panels_into lays it out (column panels of
// `width` rows, rows padded to `ld`) from byte `offset` of the input (runtime/surface.h: a surface's panels). The
// simulator's panel GEMM reads the weight from it (decoding a panel at a time, or int8 codes in the GEMV's
// registers) instead of from those bytes, which stay untouched zero pages.
struct PanelsAt {
  std::shared_ptr<const CompressedWeight> weight;
  int64_t offset = 0, width = 16, ld = 16;
  int64_t bytes() const { return (weight->M + width - 1) / width * weight->K * ld * (int64_t)sizeof(f16); }
};

}  // namespace orion::cpu::kernels
