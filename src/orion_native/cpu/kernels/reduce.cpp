// Reductions and softmax over the middle axis of [outer, axis_len, inner].
// inner == 1: one contiguous row per output (ISA row kernel, canonical lane order).
// inner > 1: accumulate whole rows of `inner` values in axis order (vectorised across inner).
// Threads split outer (and inner columns), never an axis, so results do not depend on them.
#include <algorithm>
#include <cmath>

#include "cpu/kernels/kernels.h"
#include "cpu/kernels/scratch.h"
#include "cpu/simd/isa.h"
#include "cpu/threadpool.h"

namespace orion::cpu::kernels {
namespace {

constexpr int64_t kGrainElems = 1 << 16;  // input elements per chunk before threads are worth waking
constexpr int64_t kColBlock = 1024;       // inner columns per work item (fp32 accumulators in L1)

float finish(Reduce op, float v, int64_t len) { return op == Reduce::mean ? v / (float)len : v; }

}  // namespace

void reduce(Reduce op, const f16* x, f16* y, int64_t outer, int64_t axis_len, int64_t inner) {
  if (outer <= 0 || inner <= 0) return;
  const simd::IsaOps& o = simd::ops();
  if (inner == 1) {
    int64_t grain = grain_for(axis_len, kGrainElems);
    parallel_for(outer, grain, [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        float v = finish(op, o.reduce_row(op, x + r * axis_len, axis_len), axis_len);
        o.f32_to_f16(&v, y + r, 1);
      }
    });
    return;
  }
  int64_t cblocks = (inner + kColBlock - 1) / kColBlock;
  int64_t item = std::min(inner, kColBlock) * std::max<int64_t>(axis_len, 1);
  parallel_for(outer * cblocks, grain_for(item, kGrainElems), [&](int64_t b, int64_t e) {
    float* acc = scratch_as<float>(ScratchSlot::tmp2, (size_t)kColBlock);
    for (int64_t it = b; it < e; ++it) {
      int64_t r = it / cblocks, c0 = (it % cblocks) * kColBlock, n = std::min(kColBlock, inner - c0);
      std::fill(acc, acc + n, reduce_identity(op));
      const f16* base = x + r * axis_len * inner + c0;
      for (int64_t l = 0; l < axis_len; ++l) o.reduce_step(op, base + l * inner, acc, n);
      if (op == Reduce::mean)
        for (int64_t i = 0; i < n; ++i) acc[i] = acc[i] / (float)axis_len;
      o.f32_to_f16(acc, y + r * inner + c0, (size_t)n);
    }
  });
}

void softmax(const f16* x, f16* y, int64_t outer, int64_t axis_len, int64_t inner) {
  if (outer <= 0 || inner <= 0 || axis_len <= 0) return;
  const simd::IsaOps& o = simd::ops();
  if (inner == 1) {
    int64_t grain = grain_for(axis_len, kGrainElems / 4);  // exp-heavy: smaller grain
    parallel_for(outer, grain, [&](int64_t b, int64_t e) {
      float* tmp = scratch_as<float>(ScratchSlot::tmp2, (size_t)axis_len);
      for (int64_t r = b; r < e; ++r) o.softmax_row(x + r * axis_len, y + r * axis_len, axis_len, tmp);
    });
    return;
  }
  // Column blocks small enough that the exp values of a whole block stay in cache.
  int64_t cb = std::min<int64_t>(inner, std::max<int64_t>(16, (int64_t)(1 << 15) / axis_len / 16 * 16));
  int64_t cblocks = (inner + cb - 1) / cb;
  parallel_for(outer * cblocks, grain_for(cb * axis_len, kGrainElems / 4), [&](int64_t b, int64_t e) {
    float* buf = scratch_as<float>(ScratchSlot::tmp2, (size_t)(cb * (axis_len + 2)));
    float* m = buf;
    float* s = buf + cb;
    float* ev = buf + 2 * cb;
    for (int64_t it = b; it < e; ++it) {
      int64_t r = it / cblocks, c0 = (it % cblocks) * cb, n = std::min(cb, inner - c0);
      const f16* xb = x + r * axis_len * inner + c0;
      f16* yb = y + r * axis_len * inner + c0;
      std::fill(m, m + n, -INFINITY);
      std::fill(s, s + n, 0.0f);
      for (int64_t l = 0; l < axis_len; ++l) o.reduce_step(Reduce::max, xb + l * inner, m, n);
      for (int64_t l = 0; l < axis_len; ++l) o.exp_sub_acc(xb + l * inner, m, ev + l * cb, s, n);
      for (int64_t l = 0; l < axis_len; ++l) o.div_to_f16(ev + l * cb, s, yb + l * inner, n);
    }
  });
}

}  // namespace orion::cpu::kernels
