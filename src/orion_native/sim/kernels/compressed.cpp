// Decoding of compressed constant weights (compressed.h): one row at a time, codes unpacked with
// two-byte reads (a 3- or 6-bit code may straddle a byte), scales applied in fp32 and rounded once.
#include "sim/kernels/compressed.h"

#include <algorithm>
#include <cstring>

#include "sim/kernels/kernels.h"
#include "sim/kernels/scratch.h"
#include "sim/threadpool.h"

namespace orion::sim::kernels {

namespace {

// Codes of row r, k in [0, K), as ints (sign-extended when signed).
template <typename F>
void for_codes(const CompressedWeight& w, int64_t r, F&& f) {
  const uint8_t* p = w.codes.data();
  const int64_t K = w.K;
  if (w.bits == 8) {
    const uint8_t* row = p + r * K;
    if (w.is_signed)
      for (int64_t k = 0; k < K; ++k) f(k, (int)(int8_t)row[k]);
    else
      for (int64_t k = 0; k < K; ++k) f(k, (int)row[k]);
    return;
  }
  const unsigned bits = w.bits, mask = (1u << bits) - 1, sign = 1u << (bits - 1);
  uint64_t bit = (uint64_t)r * (uint64_t)K * bits;
  if (bits == 4 && bit % 8 == 0) {  // the common case: two codes per byte, row starts on a byte
    const uint8_t* row = p + bit / 8;
    for (int64_t k = 0; k < K; ++k) {
      unsigned v = (row[k >> 1] >> ((k & 1) * 4)) & 15u;
      f(k, w.is_signed && (v & 8u) ? (int)v - 16 : (int)v);
    }
    return;
  }
  for (int64_t k = 0; k < K; ++k, bit += bits) {
    const uint8_t* b = p + (bit >> 3);
    unsigned v = ((unsigned)b[0] | (unsigned)b[1] << 8) >> (bit & 7) & mask;
    f(k, w.is_signed && (v & sign) ? (int)v - (int)(1u << bits) : (int)v);
  }
}

}  // namespace

void CompressedWeight::set_codes(const uint8_t* unpacked, int64_t n) {
  codes.assign((size_t)((n * bits + 7) / 8) + 1, 0);
  const unsigned mask = (1u << bits) - 1;
  for (int64_t i = 0; i < n; ++i) {
    uint64_t bit = (uint64_t)i * bits;
    unsigned v = (unsigned)unpacked[i] & mask;  // two's complement bits of a signed code
    codes[bit >> 3] |= (uint8_t)(v << (bit & 7));
    if ((bit & 7) + bits > 8) codes[(bit >> 3) + 1] |= (uint8_t)(v >> (8 - (bit & 7)));
  }
}

void CompressedWeight::decode_row(int64_t r, f16* dst, float* tmp) const {
  const int64_t b0 = (r / rows_per_block) * blocks_per_row, cpb = cols_per_block;
  if (kind == Kind::lut) {
    const unsigned n = 1u << bits;
    for_codes(*this, r, [&](int64_t k, int c) { dst[k] = lut[(size_t)(b0 + k / cpb) * n + (unsigned)c]; });
    return;
  }
  const float* sc = scale.data() + b0;
  const float* of = offset.empty() ? nullptr : offset.data() + b0;
  if (of)
    for_codes(*this, r, [&](int64_t k, int c) { tmp[k] = ((float)c - of[k / cpb]) * sc[k / cpb]; });
  else
    for_codes(*this, r, [&](int64_t k, int c) { tmp[k] = (float)c * sc[k / cpb]; });
  f32_to_f16(tmp, dst, (size_t)K);  // exact products: one round-to-nearest-even each
}

void CompressedWeight::panel(int64_t p, f16* dst) const {
  f16* row = scratch_as<f16>(ScratchSlot::tmp, (size_t)K);
  float* tmp = kind == Kind::shift_scale ? scratch_as<float>(ScratchSlot::tmp2, (size_t)K) : nullptr;
  for (int64_t j = 0; j < 16; ++j) {
    int64_t r = p * 16 + j;
    if (r >= M) {
      for (int64_t k = 0; k < K; ++k) dst[k * 16 + j] = 0;
      continue;
    }
    decode_row(r, row, tmp);
    for (int64_t k = 0; k < K; ++k) dst[k * 16 + j] = row[k];
  }
}

void CompressedWeight::dense(f16* dst) const {
  parallel_for(M, 16, [&](int64_t lo, int64_t hi) {
    std::vector<float> tmp(kind == Kind::shift_scale ? (size_t)K : 0);
    for (int64_t r = lo; r < hi; ++r) decode_row(r, dst + r * K, tmp.data());
  });
}

size_t CompressedWeight::bytes() const {
  return codes.size() + lut.size() * sizeof(f16) + (scale.size() + offset.size()) * sizeof(float);
}

}  // namespace orion::sim::kernels
