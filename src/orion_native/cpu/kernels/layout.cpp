// Layout kernels: transpose is a strided gather with permuted strides. Dims are collapsed first; a
// unit-stride inner dim becomes memcpy; a 2-D-like transpose is walked in square tiles so reads and
// writes both stay within a few cache lines.
#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "cpu/kernels/kernels.h"
#include "cpu/threadpool.h"

namespace orion::cpu::kernels {
namespace {

constexpr int kMaxRank = 8;
constexpr int64_t kGrainBytes = 1 << 18;  // bytes per chunk before threads are worth waking
constexpr int64_t kTile = 32;

struct View {
  int rank = 0;
  int64_t shape[kMaxRank] = {}, xs[kMaxRank] = {};  // y is dense over shape
};

View collapse(const std::vector<int64_t>& shape, const std::vector<int64_t>& xs) {
  View v;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 1) continue;
    if (v.rank > 0 && v.xs[v.rank - 1] == xs[i] * shape[i]) {
      v.shape[v.rank - 1] *= shape[i];
      v.xs[v.rank - 1] = xs[i];
      continue;
    }
    v.shape[v.rank] = shape[i];
    v.xs[v.rank] = xs[i];
    ++v.rank;
  }
  if (v.rank == 0) {
    v.rank = 1;
    v.shape[0] = 1;
    v.xs[0] = 1;
  }
  return v;
}

template <typename T>
void gather_row(const T* x, int64_t xs, T* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i * xs];
}

template <typename T>
void copy_rows(const View& v, const T* x, int64_t offset, T* y) {
  int last = v.rank - 1;
  int64_t n = v.shape[last], xs = v.xs[last];
  int64_t rows = 1;
  for (int d = 0; d < last; ++d) rows *= v.shape[d];
  // y's second-last dim is read with unit stride in x: a transpose, walk it in tiles.
  if (last >= 1 && xs != 1 && v.xs[last - 1] == 1 && n >= kTile && v.shape[last - 1] >= kTile) {
    int64_t m = v.shape[last - 1], outer = rows / m;
    int64_t ti = (m + kTile - 1) / kTile, tj = (n + kTile - 1) / kTile;
    int64_t grain = grain_for(kTile * kTile * (int64_t)sizeof(T), kGrainBytes);
    parallel_for(outer * ti * tj, grain, [&](int64_t b, int64_t e) {
      for (int64_t it = b; it < e; ++it) {
        int64_t o = it / (ti * tj), t = it % (ti * tj);
        int64_t i0 = (t / tj) * kTile, j0 = (t % tj) * kTile;
        int64_t xo = offset, r = o;
        for (int d = last - 2; d >= 0; --d) {
          xo += (r % v.shape[d]) * v.xs[d];
          r /= v.shape[d];
        }
        int64_t i1 = std::min(m, i0 + kTile), j1 = std::min(n, j0 + kTile);
        T* yb = y + o * m * n;
        for (int64_t i = i0; i < i1; ++i)
          for (int64_t j = j0; j < j1; ++j) yb[i * n + j] = x[xo + i + j * xs];
      }
    });
    return;
  }
  int64_t grain = grain_for(n * (int64_t)sizeof(T), kGrainBytes);
  parallel_for(rows, grain, [&](int64_t b, int64_t e) {
    for (int64_t row = b; row < e; ++row) {
      int64_t xo = offset, r = row;
      for (int d = last - 1; d >= 0; --d) {
        xo += (r % v.shape[d]) * v.xs[d];
        r /= v.shape[d];
      }
      if (xs == 1)
        std::memcpy(y + row * n, x + xo, (size_t)n * sizeof(T));
      else
        gather_row(x + xo, xs, y + row * n, n);
    }
  });
}

}  // namespace

void strided_copy(const void* x, void* y, size_t elem_size, int64_t offset, const std::vector<int64_t>& x_strides,
                  const std::vector<int64_t>& y_shape) {
  if (y_shape.size() != x_strides.size() || y_shape.size() > (size_t)kMaxRank)
    throw std::invalid_argument("strided_copy: rank mismatch or rank > 8");
  for (int64_t d : y_shape)
    if (d <= 0) return;
  View v = collapse(y_shape, x_strides);
  switch (elem_size) {
    case 1: return copy_rows(v, (const uint8_t*)x, offset, (uint8_t*)y);
    case 2: return copy_rows(v, (const uint16_t*)x, offset, (uint16_t*)y);
    case 4: return copy_rows(v, (const uint32_t*)x, offset, (uint32_t*)y);
    case 8: return copy_rows(v, (const uint64_t*)x, offset, (uint64_t*)y);
    default: throw std::invalid_argument("strided_copy: elem_size must be 1, 2, 4 or 8");
  }
}

void transpose(const void* x, void* y, size_t elem_size, const std::vector<int64_t>& x_shape,
               const std::vector<int64_t>& perm) {
  size_t r = x_shape.size();
  if (perm.size() != r) throw std::invalid_argument("transpose: perm rank mismatch");
  std::vector<int64_t> xs(r), ys(r), ps(r);
  int64_t s = 1;
  for (size_t i = r; i-- > 0;) {
    xs[i] = s;
    s *= x_shape[i];
  }
  std::vector<bool> seen(r, false);
  for (size_t i = 0; i < r; ++i) {
    int64_t p = perm[i];
    if (p < 0 || p >= (int64_t)r || seen[(size_t)p]) throw std::invalid_argument("transpose: bad permutation");
    seen[(size_t)p] = true;
    ys[i] = x_shape[(size_t)p];
    ps[i] = xs[(size_t)p];
  }
  strided_copy(x, y, elem_size, 0, ps, ys);
}

}  // namespace orion::cpu::kernels
