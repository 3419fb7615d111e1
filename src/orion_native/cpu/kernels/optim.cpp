// The trainer's AdamW update in one pass per element (orion.train.optim.AdamW): the same IEEE single
// operations in the same order as its numpy chunk loop (m = b1 m + (ga g); v = b2 v + (g g) gb; p = decay p;
// p -= k (m / (sqrt(v) + eps)), each rounded to fp32), so the weights are bit-identical, while p, g, m and
// v are read once and p, m, v written once (numpy's ~11 passes over cached chunks ran below memory speed).
// No multiply-add may be contracted into one rounding (aarch64 has FMA in its baseline): built with
// -ffp-contract=off, and -fno-math-errno so the sqrt vectorises (CMakeLists.txt).
#include <algorithm>
#include <cmath>

#include "cpu/kernels/kernels.h"
#include "cpu/threadpool.h"

namespace orion::cpu::kernels {
namespace {

// Coefficients by value and restrict pointers: nothing in the loop may alias, so it vectorises.
void update_range(float* __restrict p, const float* __restrict g, float* __restrict m, float* __restrict v, size_t n,
                  const AdamWCoef c) {
  const float b1 = c.b1, b2 = c.b2, ga = c.ga, gb = c.gb, k = c.k, eps = c.eps, decay = c.decay;
  for (size_t i = 0; i < n; ++i) {
    const float gi = g[i];
    float mi = m[i] * b1;
    const float ta = gi * ga;
    mi = mi + ta;
    float vi = v[i] * b2;
    float tv = gi * gi;
    tv = tv * gb;
    vi = vi + tv;
    const float pi = p[i] * decay;  // x 1 (no decay) is exact: branch-free
    float t = std::sqrt(vi);
    t = t + eps;
    t = mi / t;
    t = t * k;
    m[i] = mi;
    v[i] = vi;
    p[i] = pi - t;
  }
}

}  // namespace

void adamw_update(float* p, const float* g, float* m, float* v, size_t n, const AdamWCoef& c) {
  constexpr int64_t kChunk = 1 << 14;  // elements per work item (4 arrays x 64 KB)
  const int64_t items = ((int64_t)n + kChunk - 1) / kChunk;
  parallel_for(items, 1, [&](int64_t lo, int64_t hi) {
    const size_t b = (size_t)(lo * kChunk), e = std::min(n, (size_t)(hi * kChunk));
    update_range(p + b, g + b, m + b, v + b, e - b, c);
  });
}

}  // namespace orion::cpu::kernels
