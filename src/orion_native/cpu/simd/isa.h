// Per-ISA primitive table used by the kernel drivers in cpu/kernels. Each ISA file (scalar.cpp,
// *_avx2.cpp, *_avx512.cpp, *_neon.cpp) fills one table; dispatch.cpp picks one at run time.
//
// Every entry must produce bit-identical results on every ISA: same fp32 operation sequence per
// element (explicit fma where a product feeds a sum), same reduction order (see canonical lanes
// below). Tests check this with force_isa().
#pragma once
#include <cstddef>
#include <cstdint>

#include "common/fp16.h"
#include "cpu/kernels/kernels.h"

namespace orion::cpu::simd {

using kernels::Binary;
using kernels::Reduce;
using kernels::reduce_identity;
using kernels::Unary;

// Contiguous-axis reductions sum into kLanes partial accumulators (element i goes to lane i % kLanes,
// in order), combined by halving: lane j += lane j + kLanes/2, ... This fixes the rounding order.
constexpr int kLanes = 16;

// GEMMs with at most this many rows of op(A) read B unpacked (GemmTile::bh).
constexpr int kDirectBRows = 4;

// One GEMM microkernel call: acc = cin (or 0) + Ap * Bp over kc for `rows` (1..mr; 1..kDirectBRows
// with bh) rows of A, then
// the rows x first `cols` of acc go to o16 (one RNE rounding) or o32. Ap is a row-major fp32 panel [mr][lda] (row r of op(A), k
// contiguous: packing A is a plain conversion); Bp is packed k-major [kc][nr]. Each C element is one
// fma chain over k in order, so blocking, threads and ISA do not change results.
struct GemmTile {
  int64_t kc;
  const float* ap;
  int64_t lda;
  const float* bp;
  // Unpacked B (few rows of A, B not transposed: packing would cost as much as the product): when
  // set, row k of the tile's B is bh + k * ldbh in fp16, first bcols columns valid, and bp is unused.
  const f16* bh;
  int64_t ldbh;
  int bcols;
  // gemm_rows only: bh holds op(B) transposed (column j of the tile's B at bh + j * ldbh, its kc values
  // contiguous: keys stored position-major), read in place and transposed in registers.
  bool trans_bh = false;
  const float* cin;  // partial sums of earlier k blocks (rows x nr, row stride ldcin) or nullptr
  int64_t ldcin;
  float* o32;        // exactly one of o32 / o16 is set
  f16* o16;
  int64_t ldo;
  int rows, cols;
};

// Panel GEMM tile (few columns of C, e.g. a conv1x1 on the 16 decode columns): one panel of 16 rows
// of op(A), k-major fp16 (row r at k is ap[k * lda + r]; all 16 lanes readable, lanes past `rows`
// zero), times fp32 B columns (column j at k is bp[k * ldb + j], j < cols <= 16). Vectorised over the
// rows, so A streams as stored (a constant A is packed once, at plan build) and widens in registers.
// Each C element is the same in-order fma chain over k as gemm_micro, from +0, then one rounding.
constexpr int kPanelRows = 16;
constexpr int kPanelCols = 16;
struct PanelTile {
  int64_t K;
  const f16* ap;
  int64_t lda;
  const float* bp;
  int64_t ldb;
  int rows, cols;
  float* o32;  // exactly one of o32 / o16 is set; C row r is o + r * ldo
  f16* o16;
  int64_t ldo;
  bool trans_c;  // C stored transposed: tile column j goes to o + j * ldo (its rows contiguous)
  // Several panels in one tile (few columns: independent fma chains, so the loop is not bound by
  // the fma latency): panel q starts at ap + q * pstride and holds rows [16 q, 16 q + 16) of the
  // tile; rows <= 16 * panels. Each C element keeps its own in-order chain, so results are the same.
  int panels = 1;
  int64_t pstride = 0;
  // gemm_panel_q8 only: A as 8-bit codes (16 bytes per k of a panel, panel q at q8 + q * pstride bytes)
  // with one scale/offset per row (sc/of [panels][16]); row r's value at k is fp16((code - of) * sc).
  const uint8_t* q8 = nullptr;
  bool q8_signed = false;
  const float* sc = nullptr;
  const float* of = nullptr;
  // Every sc is an fp16 value and every of an integer of at most 1024 in magnitude: the decode may run in
  // fp16 arithmetic, exactly (AVX512-FP16, where the CPU has it).
  bool q8_fp16 = false;
  // gemm_panel_lut4 only: A as 4-bit codes (8 bytes per k of a panel, LSB-first, panel q at q4 + q * pstride
  // bytes) looked up in one 16-entry fp16 table per panel (tabs[q]).
  const uint8_t* q4 = nullptr;
  const f16* const* tabs = nullptr;
};

// decode_ss8 in plain C++ (the scalar table, and NEON's, where the compiler vectorises it).
inline void decode_ss8_ref(const uint8_t* codes, int64_t n, bool is_signed, const float* sc, const float* of,
                           f16* dst) {
  for (int64_t k = 0; k < n; ++k, codes += 16, dst += 16)
    for (int j = 0; j < 16; ++j) {
      float c = is_signed ? (float)(int8_t)codes[j] : (float)codes[j];
      dst[j] = orion::f32_to_f16((c - of[j]) * sc[j]);
    }
}

// decode_lut4 in plain C++ (the scalar table, and NEON's): n k-rows of 16 4-bit codes (8 bytes, LSB-first)
// looked up in one 16-entry fp16 table.
inline void decode_lut4_ref(const uint8_t* codes, int64_t n, const f16* table, f16* dst) {
  for (int64_t k = 0; k < n; ++k, codes += 8, dst += 16)
    for (int j = 0; j < 16; ++j) dst[j] = table[(codes[j >> 1] >> ((j & 1) * 4)) & 15];
}

// Runs a multi-panel tile one panel at a time through `one` (for kernels without a multi-panel loop).
template <typename F>
inline void for_each_panel(const PanelTile& t, F&& one) {
  for (int q = 0; q < t.panels && q * kPanelRows < t.rows; ++q) {
    PanelTile s = t;
    s.panels = 1;
    s.ap = t.ap + q * t.pstride;
    s.rows = t.rows - q * kPanelRows < kPanelRows ? t.rows - q * kPanelRows : kPanelRows;
    int64_t off = t.trans_c ? q * kPanelRows : q * kPanelRows * t.ldo;
    if (t.o16) s.o16 = t.o16 + off;
    if (t.o32) s.o32 = t.o32 + off;
    one(s);
  }
}

struct IsaOps {
  const char* name;

  void (*f16_to_f32)(const f16* src, float* dst, size_t n);
  void (*f32_to_f16)(const float* src, f16* dst, size_t n);

  // GEMM microkernel: one mr x nr tile, see GemmTile.
  int gemm_mr, gemm_nr;
  void (*gemm_micro)(const GemmTile& t);
  // Packs rows of B (non-transposed, [k][ldb]) into Bp [kc][nr]: converts nr halves per k (zero pad
  // past `cols`).
  void (*gemm_pack_rows)(const f16* src, int64_t ld, int64_t kc, int64_t cols, int nr, float* dst);
  // Widening transpose: dst[c * ldd + r] = src[r * ld + c] for r < rows, c < cols; entries for
  // rows <= r < rows_pad are written as 0 (panel padding). Packs transposed GEMM operands.
  void (*cvt_transpose)(const f16* src, int64_t ld, int64_t rows, int64_t rows_pad, int64_t cols, float* dst,
                        int64_t ldd);

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

  // Panel GEMM: C[rows, cols] of one PanelTile.
  void (*gemm_panel)(const PanelTile& t);
  // How many panels a tile of `cols` columns should carry (PanelTile::panels) to keep the fma units
  // busy; 1 where the kernel already has enough independent chains.
  int (*panel_group)(int cols);
  // Decodes n k-rows of an 8-bit scale/offset panel (16 codes a row, int8 when is_signed) with one
  // parameter pair per row lane: dst[16 k + j] = fp16((code - of[j]) * sc[j]) (exact in fp32, one
  // rounding), in one pass (compressed weights at decode width: the int8 linears).
  void (*decode_ss8)(const uint8_t* codes, int64_t n, bool is_signed, const float* sc, const float* of, f16* dst);
  // Decodes n k-rows of a 4-bit LUT panel whose 16 rows share one table: dst[16 k + j] = table[code]
  // (codes LSB-first, two a byte; a pure lookup: the lut4 linears at decode width).
  void (*decode_lut4)(const uint8_t* codes, int64_t n, const f16* table, f16* dst);
  // Panel GEMM on 8-bit codes decoded in registers (PanelTile::q8; cols <= 4, panels ==
  // panel_group(cols)): the same values and fma chains as decode_ss8 + gemm_panel, without the fp16
  // round trip through memory. Null where not implemented (then decode_ss8 + gemm_panel run).
  void (*gemm_panel_q8)(const PanelTile& t);
  // Few rows times B read in place (GemmTile with bh, as stored or trans_bh; rows <= kDirectBRows, all of K
  // in one call - no cin -, any number of columns): enough independent chains per k for one row. Null
  // where not implemented (then gemm_micro's tiles run).
  void (*gemm_rows)(const GemmTile& t);
  // Panel GEMM on 4-bit LUT codes looked up in registers (PanelTile::q4; cols <= 4, panels ==
  // panel_group(cols)): the same values and fma chains as decode_lut4 + gemm_panel. Null where not implemented.
  void (*gemm_panel_lut4)(const PanelTile& t);
};

const IsaOps& scalar_ops();
const IsaOps* avx2_ops();    // nullptr when not compiled in
const IsaOps* avx512_ops();
const IsaOps* neon_ops();

// The active table (runtime dispatch, ORION_ISA override, force_isa()).
const IsaOps& ops();

}  // namespace orion::cpu::simd
