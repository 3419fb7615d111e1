// The first `len` entries along one axis of a dense tensor (dead-column skipping's regions, op.h):
// `outer` blocks of `chunk` contiguous elements, `stride` apart. Element-wise ops and softmax compute
// such a box into a dense buffer and scatter it into place; a box with one block is computed in place.
// Worth it only for long blocks: 16 decode columns of fp16 are one half cache line per channel, so
// gathering one strided column costs as much as computing all 16 contiguously.
#pragma once
#include <algorithm>
#include <cstring>

#include "sim/ops/op.h"

namespace orion::sim::ops {

struct PrefixBox {
  Shape sub;  // the box's own shape (the tensor's, with `len` along the axis)
  int64_t outer = 1, chunk = 0, stride = 0;
};

// Computing the box beats computing the whole tensor: one block, or at most a quarter of the tensor in
// blocks of at least `min_chunk` elements (32 for an add or a copy; 1 where each element costs a
// transcendental function, which dwarfs the strided copies), or at most a sixteenth in any blocks (decode's
// one live column of 16, widened x3 for C04: the whole op took ~5x the box and its scatter, measured).
inline bool worth_a_box(const PrefixBox& b, int64_t min_chunk) {
  return b.outer == 1 || (b.chunk >= min_chunk && 4 * b.chunk <= b.stride) || 16 * b.chunk <= b.stride;
}

// An operand of shape `s` read by an element-wise op with output shape `out` over the output prefix along
// `axis` reads its own prefix box along that axis when it has the output's rank, equals it along every
// axis up to `axis` and is at most broadcast (size 1) inside it - the same shape, or an output widened
// along an inner axis (C04's padding). Other operands (broadcast along outer axes) are read in place.
inline bool reads_own_prefix(const Shape& s, const Shape& out, int axis) {
  if (s.size() != out.size()) return false;
  for (size_t d = 0; d < s.size(); ++d)
    if (s[d] != out[d] && ((int)d <= axis || s[d] != 1)) return false;
  return true;
}

inline PrefixBox prefix_box(const Shape& s, int axis, int64_t len) {
  PrefixBox b;
  b.sub = s;
  b.sub[(size_t)axis] = len;
  int64_t inner = prod(s, axis + 1, (int)s.size());
  b.outer = prod(s, 0, axis);
  b.chunk = len * inner;
  b.stride = s[(size_t)axis] * inner;
  return b;
}

// `n` blocks of `chunk` elements from src to dst, each side's blocks `*_step` apart. Short chunks (a
// column per channel) copy by element: a library call per element would cost more than the copy.
inline void copy_blocks(int64_t n, int64_t chunk, const f16* src, int64_t src_step, f16* dst, int64_t dst_step) {
  for (int64_t o = 0; o < n; ++o, src += src_step, dst += dst_step) {
    if (chunk <= 8) for (int64_t i = 0; i < chunk; ++i) dst[i] = src[i];
    else std::memcpy(dst, src, (size_t)chunk * sizeof(f16));
  }
}

// dense [outer][chunk] <-> its place in the full tensor.
inline void scatter_prefix(const PrefixBox& b, const f16* box, f16* full) {
  copy_blocks(b.outer, b.chunk, box, b.chunk, full, b.stride);
}

inline void gather_prefix(const PrefixBox& b, const f16* full, f16* box) {
  copy_blocks(b.outer, b.chunk, full, b.stride, box, b.chunk);
}

}  // namespace orion::sim::ops
