// Decoding of compressed constant weights (compressed.h), one 16-row panel at a time: per k, the 16
// codes come from 2 * bits consecutive bytes; a LUT is a per-row table lookup, scale/offset is applied
// in fp32 (exact for integer codes and offsets) and rounded once by the vectorised f32 -> f16 conversion
// (8-bit codes: the ISA's decode_ss8, one pass from codes to fp16; 4-bit LUTs shared by a panel's rows: the
// ISA's decode_lut4).
#include "cpu/kernels/compressed.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#if defined(__x86_64__) || defined(_M_X64)
#include <emmintrin.h>
#define ORION_STREAM_STORES 1
#endif

#include "cpu/kernels/kernels.h"
#include "cpu/kernels/scratch.h"
#include "cpu/simd/isa.h"
#include "cpu/threadpool.h"

namespace orion::cpu::kernels {

namespace {

constexpr int64_t kR = 16;

// The 16 codes of one k-row of a panel (2 * bits bytes at p), sign-extended when signed.
inline void unpack16(const uint8_t* p, unsigned bits, bool is_signed, int32_t* c) {
  if (bits == 8) {
    for (int j = 0; j < 16; ++j) c[j] = is_signed ? (int32_t)(int8_t)p[j] : (int32_t)p[j];
    return;
  }
  if (bits == 4) {  // the common sub-byte width: two codes a byte
    for (int j = 0; j < 16; ++j) c[j] = (p[j >> 1] >> ((j & 1) * 4)) & 15;
    if (is_signed)
      for (int j = 0; j < 16; ++j) c[j] = (c[j] ^ 8) - 8;
    return;
  }
  uint64_t w[2] = {0, 0};
  std::memcpy(w, p, 2 * bits);  // <= 12 bytes: 16 codes of <= 6 bits
  const uint64_t mask = (1u << bits) - 1;
  for (int j = 0; j < 16; ++j) {
    unsigned bit = j * bits, wi = bit >> 6, sh = bit & 63;
    uint64_t v = w[wi] >> sh;
    if (sh + bits > 64) v |= w[wi + 1] << (64 - sh);
    c[j] = (int32_t)(v & mask);
  }
  if (is_signed) {
    const int32_t sign = 1 << (bits - 1);
    for (int j = 0; j < 16; ++j) c[j] = (c[j] ^ sign) - sign;
  }
}

// unpack16 with the width and signedness known at compile time (the 4- and 8-bit hot paths).
template <unsigned B, bool S>
inline void unpack16_t(const uint8_t* p, int32_t* c) {
  if constexpr (B == 8) {
    for (int j = 0; j < 16; ++j) c[j] = S ? (int32_t)(int8_t)p[j] : (int32_t)p[j];
  } else if constexpr (B == 4) {
    for (int j = 0; j < 16; ++j) {
      int32_t v = (p[j >> 1] >> ((j & 1) * 4)) & 15;
      c[j] = S ? (v ^ 8) - 8 : v;
    }
  } else if constexpr (B == 6 && !S) {  // 4 codes in every 3 bytes
    for (int g = 0; g < 4; ++g) {
      uint32_t v = (uint32_t)p[3 * g] | (uint32_t)p[3 * g + 1] << 8 | (uint32_t)p[3 * g + 2] << 16;
      for (int i = 0; i < 4; ++i) c[4 * g + i] = (int32_t)((v >> (6 * i)) & 63u);
    }
  } else {
    unpack16(p, B, S, c);
  }
}

// The scale and offset of each of a panel's 16 rows in k-block kb of the parameter grid.
inline void block_params(const CompressedWeight& w, const int64_t* rowbase, int64_t kb, float* sc, float* of) {
  for (int j = 0; j < 16; ++j) {
    sc[j] = w.scale[rowbase[j] + kb];
    of[j] = w.offset.empty() ? 0.0f : w.offset[rowbase[j] + kb];
  }
}

// scale/offset decoding of one panel into fp32 [K][16], per k-block of the parameter grid.
template <unsigned B, bool S>
void shift_scale_panel(const CompressedWeight& w, const uint8_t* src, const int64_t* rowbase, float* tmp) {
  constexpr int64_t rb = 2 * B;
  float sc[16], of[16];
  int32_t c[16];
  for (int64_t k0 = 0; k0 < w.K; k0 += w.cols_per_block) {
    const int64_t kb = k0 / w.cols_per_block, k1 = std::min(w.K, k0 + w.cols_per_block);
    block_params(w, rowbase, kb, sc, of);
    for (int64_t k = k0; k < k1; ++k) {
      unpack16_t<B, S>(src + k * rb, c);
      float* t = tmp + k * 16;
      for (int j = 0; j < 16; ++j) t[j] = ((float)c[j] - of[j]) * sc[j];
    }
  }
}

}  // namespace

void CompressedWeight::zero_codes() {
  const int64_t npan = (M + kR - 1) / kR;
  codes.assign((size_t)(npan * K * 2 * bits) + 8, 0);
}

void CompressedWeight::set_codes(const uint8_t* unpacked) {
  zero_codes();
  set_code_rows(0, M, unpacked);
}

void CompressedWeight::set_code_rows(int64_t r0, int64_t n, const uint8_t* unpacked) {
  const int64_t rb = 2 * bits;
  if (r0 < 0 || n < 0 || r0 + n > M || r0 % kR || (n % kR && r0 + n != M) ||
      codes.size() != (size_t)(((M + kR - 1) / kR) * K * rb) + 8)
    throw std::invalid_argument("CompressedWeight: rows " + std::to_string(r0) + ".." + std::to_string(r0 + n) +
                                " are not whole panels of a " + std::to_string(M) + "-row weight with its codes sized");
  // the rows' panels are theirs alone: cleared, then each code OR-ed into its bits
  std::fill(codes.begin() + (r0 / kR) * K * rb, codes.begin() + ((r0 + n + kR - 1) / kR) * K * rb, 0);
  if (bits == 8) {  // a byte per code: each panel is its 16 rows transposed (k-major), a straight copy
    for (int64_t r = r0; r < r0 + n; ++r) {
      const uint8_t* src = unpacked + (r - r0) * K;
      uint8_t* dst = codes.data() + (r / kR) * K * rb + r % kR;
      for (int64_t k = 0; k < K; ++k) dst[k * rb] = src[k];
    }
    return;
  }
  const unsigned mask = (1u << bits) - 1;
  for (int64_t r = r0; r < r0 + n; ++r) {
    const int64_t p = r / kR, j = r % kR;
    const uint8_t* src = unpacked + (r - r0) * K;
    for (int64_t k = 0; k < K; ++k) {
      unsigned v = (unsigned)src[k] & mask;  // two's complement bits of a signed code
      uint8_t* row = codes.data() + (p * K + k) * rb;
      unsigned bit = (unsigned)j * bits;
      row[bit >> 3] |= (uint8_t)(v << (bit & 7));
      if ((bit & 7) + bits > 8) row[(bit >> 3) + 1] |= (uint8_t)(v >> (8 - (bit & 7)));
    }
  }
}

void CompressedWeight::panel(int64_t p, f16* dst) const {
  const int64_t i0 = p * kR, rows = std::min(kR, M - i0), rb = 2 * bits;
  const uint8_t* src = codes.data() + p * K * rb;
  int64_t rowbase[kR];  // first parameter block of each row (pad rows: row 0's, zeroed afterwards)
  for (int64_t j = 0; j < kR; ++j) rowbase[j] = ((i0 + std::min(j, rows - 1)) / rows_per_block) * blocks_per_row;
  int32_t c[kR];
  if (kind == Kind::lut) {
    const f16* tab[kR];
    for (int64_t k0 = 0; k0 < K; k0 += cols_per_block) {
      const int64_t kb = k0 / cols_per_block, k1 = std::min(K, k0 + cols_per_block);
      for (int64_t j = 0; j < kR; ++j) tab[j] = lut.data() + ((size_t)(rowbase[j] + kb) << bits);
      const bool one_table = std::all_of(tab, tab + kR, [&](const f16* t) { return t == tab[0]; });
      if (one_table && bits == 4) {  // the lut4 linears (tables per >= 16 rows): the ISA's vector lookup
        simd::ops().decode_lut4(src + k0 * rb, k1 - k0, tab[0], dst + k0 * kR);
        continue;
      }
      for (int64_t k = k0; k < k1; ++k) {
        if (bits == 4) unpack16_t<4, false>(src + k * rb, c);
        else if (bits == 6) unpack16_t<6, false>(src + k * rb, c);
        else unpack16(src + k * rb, bits, false, c);
        f16* d = dst + k * kR;
        if (one_table) {  // the panel's rows share a table (groups of >= 16 rows): one base pointer
          const f16* t = tab[0];
          for (int64_t j = 0; j < kR; ++j) d[j] = t[c[j]];
        } else {
          for (int64_t j = 0; j < kR; ++j) d[j] = tab[j][c[j]];
        }
      }
    }
  } else if (bits == 8) {  // the int8 / uint8 linears: one vectorised pass per k-block straight to fp16
    const simd::IsaOps& o = simd::ops();
    float sc[kR], of[kR];
    for (int64_t k0 = 0; k0 < K; k0 += cols_per_block) {
      const int64_t kb = k0 / cols_per_block, k1 = std::min(K, k0 + cols_per_block);
      block_params(*this, rowbase, kb, sc, of);
      o.decode_ss8(src + k0 * rb, k1 - k0, is_signed, sc, of, dst + k0 * kR);
    }
  } else {
    float* tmp = scratch_as<float>(ScratchSlot::tmp2, (size_t)(K * kR));
    if (bits == 4 && is_signed) shift_scale_panel<4, true>(*this, src, rowbase, tmp);
    else if (bits == 4) shift_scale_panel<4, false>(*this, src, rowbase, tmp);
    else {  // other widths: the runtime-width unpacker
      float sc[kR], of[kR];
      for (int64_t k0 = 0; k0 < K; k0 += cols_per_block) {
        const int64_t kb = k0 / cols_per_block, k1 = std::min(K, k0 + cols_per_block);
        block_params(*this, rowbase, kb, sc, of);
        for (int64_t k = k0; k < k1; ++k) {
          unpack16(src + k * rb, bits, is_signed, c);
          float* t = tmp + k * kR;
          for (int64_t j = 0; j < kR; ++j) t[j] = ((float)c[j] - of[j]) * sc[j];
        }
      }
    }
    f32_to_f16(tmp, dst, (size_t)(K * kR));  // exact products: one round-to-nearest-even each
  }
  if (rows < kR)
    for (int64_t k = 0; k < K; ++k) std::memset(dst + k * kR + rows, 0, (size_t)(kR - rows) * sizeof(f16));
}

void CompressedWeight::dense(f16* dst) const {
  const int64_t npan = (M + kR - 1) / kR;
  parallel_for(npan, 1, [&](int64_t lo, int64_t hi) {
    std::vector<f16> buf((size_t)(K * kR));
    for (int64_t p = lo; p < hi; ++p) {
      panel(p, buf.data());
      for (int64_t j = 0; j < kR && p * kR + j < M; ++j)
        for (int64_t k = 0; k < K; ++k) dst[(p * kR + j) * K + k] = buf[k * kR + j];
    }
  });
}

namespace {

// A destination this big is written with non-temporal stores: it cannot stay in cache until the program reads it
// (a 1B model's layer is 116 MB of fp16), and ordinary stores read every line before writing it, doubling the
// traffic. Smaller ones (a 135M model's 1.7 MB inputs) stay cached for the eval that follows.
constexpr int64_t kStreamBytes = int64_t(8) << 20;

// `bytes` (a multiple of 16) from `in` to the 16-byte aligned `out`, bypassing the cache.
inline void stream_copy(f16* out, const f16* in, int64_t bytes) {
#ifdef ORION_STREAM_STORES
  for (int64_t b = 0; b < bytes; b += 16)
    _mm_stream_si128(reinterpret_cast<__m128i*>(reinterpret_cast<char*>(out) + b),
                     _mm_loadu_si128(reinterpret_cast<const __m128i*>(reinterpret_cast<const char*>(in) + b)));
#else
  std::memcpy(out, in, (size_t)bytes);
#endif
}

}  // namespace

void CompressedWeight::panels_into(f16* dst, int64_t width, int64_t ld) const {
  const int64_t npan = (M + kR - 1) / kR, per = width / kR, nout = (M + width - 1) / width;
#ifdef ORION_STREAM_STORES
  const bool stream = nout * K * ld * (int64_t)sizeof(f16) >= kStreamBytes && (uintptr_t)dst % 16 == 0 && ld % 8 == 0;
#else
  const bool stream = false;
#endif
  // One output panel (width rows: `per` kernel panels) at a time, so that each of its k-rows is written whole:
  // width contiguous values, full cache lines for the streaming stores.
  parallel_for(nout, 1, [&](int64_t lo, int64_t hi) {
    std::vector<f16> buf((size_t)(per * K * kR));
    std::vector<f16> row(stream ? (size_t)width : 0);
    for (int64_t q = lo; q < hi; ++q) {
      const int64_t p0 = q * per, np = std::min(per, npan - p0), rows = std::min(width, M - q * width);
      for (int64_t u = 0; u < np; ++u) panel(p0 + u, buf.data() + u * K * kR);
      f16* out = dst + q * K * ld;
      if (stream && rows == width) {
        for (int64_t k = 0; k < K; ++k) {
          for (int64_t u = 0; u < per; ++u) std::memcpy(row.data() + u * kR, buf.data() + (u * K + k) * kR, kR * sizeof(f16));
          stream_copy(out + k * ld, row.data(), width * (int64_t)sizeof(f16));
        }
        continue;
      }
      for (int64_t u = 0; u < np; ++u) {  // fixed-size copies of whole panels: one vector move each
        const int64_t n = std::min(kR, rows - u * kR);
        const f16* in = buf.data() + u * K * kR;
        if (n == kR) {
          for (int64_t k = 0; k < K; ++k) std::memcpy(out + k * ld + u * kR, in + k * kR, kR * sizeof(f16));
        } else {
          for (int64_t k = 0; k < K; ++k) std::memcpy(out + k * ld + u * kR, in + k * kR, (size_t)n * sizeof(f16));
        }
      }
    }
#ifdef ORION_STREAM_STORES
    if (stream) _mm_sfence();  // the streamed lines visible before the eval that reads them
#endif
  });
}

namespace {
constexpr int64_t kRowGrain = int64_t(1) << 16;  // elements per chunk of rows before threads are worth waking
}  // namespace

void shift_scale_dense(const uint8_t* codes, bool is_signed, int64_t M, int64_t K, const float* scale,
                       const float* offset, int64_t rows_per_block, int64_t blocks_per_row, f16* dst) {
  const int64_t cols = K / blocks_per_row, whole = cols / kR * kR;
  const simd::IsaOps& o = simd::ops();
  // decode_ss8 decodes k-rows of 16 lanes, each lane with its own scale: with all 16 the same, a k-row is 16
  // consecutive codes of one row
  parallel_for(M, grain_for(K, kRowGrain), [&](int64_t lo, int64_t hi) {
    float sc[kR], of[kR], tail[kR];
    for (int64_t r = lo; r < hi; ++r) {
      const int64_t base = (r / rows_per_block) * blocks_per_row;
      for (int64_t b = 0; b < blocks_per_row; ++b) {
        const float s = scale[base + b], f = offset ? offset[base + b] : 0.0f;
        const uint8_t* c = codes + r * K + b * cols;
        f16* d = dst + r * K + b * cols;
        std::fill(sc, sc + kR, s);
        std::fill(of, of + kR, f);
        if (whole) o.decode_ss8(c, whole / kR, is_signed, sc, of, d);
        for (int64_t j = whole; j < cols; ++j)
          tail[j - whole] = ((float)(is_signed ? (int32_t)(int8_t)c[j] : (int32_t)c[j]) - f) * s;
        if (cols > whole) o.f32_to_f16(tail, d + whole, (size_t)(cols - whole));
      }
    }
  });
}

void lut_dense(const uint8_t* packed, unsigned bits, int64_t M, int64_t K, const f16* lut, int64_t rows_per_table,
               f16* dst) {
  const simd::IsaOps& o = simd::ops();
  const unsigned mask = (1u << bits) - 1;
  // a row of 4-bit codes starts on a byte and its 16-code runs are 8 bytes LSB-first: decode_lut4's k-rows
  const bool runs4 = bits == 4 && K % 16 == 0;
  parallel_for(M, grain_for(K, kRowGrain), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      const f16* t = lut + ((size_t)(r / rows_per_table) << bits);
      f16* d = dst + r * K;
      if (runs4) {
        o.decode_lut4(packed + r * K / 2, K / 16, t, d);
      } else if (bits == 8) {
        const uint8_t* c = packed + r * K;
        for (int64_t k = 0; k < K; ++k) d[k] = t[c[k]];
      } else {
        uint64_t bit = (uint64_t)(r * K) * bits;
        for (int64_t k = 0; k < K; ++k, bit += bits) {
          const unsigned sh = bit & 7;
          unsigned v = packed[bit >> 3];
          if (sh + bits > 8) v |= (unsigned)packed[(bit >> 3) + 1] << 8;  // the code crosses into the next byte
          d[k] = t[(v >> sh) & mask];
        }
      }
    }
  });
}

size_t CompressedWeight::bytes() const {
  return codes.size() + lut.size() * sizeof(f16) + (scale.size() + offset.size()) * sizeof(float);
}

}  // namespace orion::cpu::kernels
