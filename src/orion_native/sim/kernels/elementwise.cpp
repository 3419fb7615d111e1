// Element-wise drivers: shape collapsing and broadcasting here, contiguous spans to the ISA kernels.
#include <algorithm>
#include <stdexcept>

#include "sim/kernels/kernels.h"
#include "sim/kernels/scratch.h"
#include "sim/simd/isa.h"
#include "sim/threadpool.h"

namespace orion::sim::kernels {
namespace {

// Wake other threads only when a chunk holds enough work to beat the ~10 us wake-up.
constexpr int64_t kCheapGrain = 1 << 16;  // add/mul/copy-like: ~1 ns per 16 elements
constexpr int64_t kMathGrain = 1 << 14;   // exp/tanh/...: several times the work per element
constexpr int64_t kMaxRank = 5;

bool is_math(Unary op) {
  switch (op) {
    case Unary::relu: case Unary::neg: case Unary::abs: case Unary::identity: case Unary::square:
      return false;
    default: return true;
  }
}

struct Collapsed {
  int rank = 0;
  int64_t shape[kMaxRank] = {}, as[kMaxRank] = {}, bs[kMaxRank] = {};
};

// Drops size-1 dims and merges neighbours that are contiguous in both inputs (out is dense).
Collapsed collapse(const std::vector<int64_t>& shape, const std::vector<int64_t>& as, const std::vector<int64_t>& bs) {
  Collapsed c;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 1) continue;
    if (c.rank > 0) {
      int k = c.rank - 1;
      if (c.as[k] == as[i] * shape[i] && c.bs[k] == bs[i] * shape[i]) {
        c.shape[k] *= shape[i];
        c.as[k] = as[i];
        c.bs[k] = bs[i];
        continue;
      }
    }
    c.shape[c.rank] = shape[i];
    c.as[c.rank] = as[i];
    c.bs[c.rank] = bs[i];
    ++c.rank;
  }
  if (c.rank == 0) {  // a scalar
    c.rank = 1;
    c.shape[0] = 1;
  }
  return c;
}

// out[0:n] = a[0:n:sa] op b[0:n:sb] for arbitrary inner strides.
void binary_span(const simd::IsaOps& o, Binary op, const f16* a, int64_t sa, const f16* b, int64_t sb, f16* out,
                 int64_t n) {
  if (sa == 1 && sb == 1) return o.binary_vv(op, a, b, out, (size_t)n);
  if (sa == 1 && sb == 0) return o.binary_vs(op, a, *b, out, (size_t)n);
  if (sa == 0 && sb == 1) return o.binary_sv(op, *a, b, out, (size_t)n);
  // General strides: gather into contiguous blocks first.
  constexpr int64_t kBlk = 1024;
  f16* ta = scratch_as<f16>(ScratchSlot::tmp, 2 * kBlk);
  f16* tb = ta + kBlk;
  for (int64_t i = 0; i < n; i += kBlk) {
    int64_t m = std::min(kBlk, n - i);
    for (int64_t j = 0; j < m; ++j) {
      ta[j] = a[(i + j) * sa];
      tb[j] = b[(i + j) * sb];
    }
    o.binary_vv(op, ta, tb, out + i, (size_t)m);
  }
}

}  // namespace

void binary(Binary op, const f16* a, const std::vector<int64_t>& a_strides, const f16* b,
            const std::vector<int64_t>& b_strides, f16* out, const std::vector<int64_t>& out_shape) {
  if (out_shape.size() > (size_t)kMaxRank || a_strides.size() != out_shape.size() ||
      b_strides.size() != out_shape.size())
    throw std::invalid_argument("binary: rank mismatch or rank > 5");
  int64_t total = 1;
  for (int64_t d : out_shape) total *= d;
  if (total <= 0) return;
  Collapsed c = collapse(out_shape, a_strides, b_strides);
  const simd::IsaOps& o = simd::ops();
  int last = c.rank - 1;
  int64_t n = c.shape[last], rows = total / n;
  // Work items: (row, chunk of the row) so a single long row still splits across threads.
  int64_t piece = std::min<int64_t>(n, kCheapGrain);
  int64_t per_row = (n + piece - 1) / piece;
  int64_t grain = std::max<int64_t>(1, kCheapGrain / piece);
  parallel_for(rows * per_row, grain, [&](int64_t it0, int64_t it1) {
    for (int64_t it = it0; it < it1; ++it) {
      int64_t row = it / per_row, c0 = (it % per_row) * piece;
      int64_t ao = 0, bo = 0, r = row;
      for (int d = last - 1; d >= 0; --d) {
        int64_t idx = r % c.shape[d];
        r /= c.shape[d];
        ao += idx * c.as[d];
        bo += idx * c.bs[d];
      }
      int64_t m = std::min(piece, n - c0);
      binary_span(o, op, a + ao + c0 * c.as[last], c.as[last], b + bo + c0 * c.bs[last], c.bs[last],
                  out + row * n + c0, m);
    }
  });
}

void unary(Unary op, const f16* x, f16* y, size_t n, float param) {
  const simd::IsaOps& o = simd::ops();
  parallel_for((int64_t)n, is_math(op) ? kMathGrain : kCheapGrain,
               [&](int64_t b, int64_t e) { o.unary(op, x + b, y + b, (size_t)(e - b), param); });
}

void clip(const f16* x, f16* y, size_t n, float lo, float hi) {
  const simd::IsaOps& o = simd::ops();
  parallel_for((int64_t)n, kCheapGrain, [&](int64_t b, int64_t e) { o.clip(x + b, y + b, (size_t)(e - b), lo, hi); });
}

void scale_bias(const f16* x, f16* y, size_t n, float scale, float bias) {
  const simd::IsaOps& o = simd::ops();
  parallel_for((int64_t)n, kCheapGrain,
               [&](int64_t b, int64_t e) { o.scale_bias(x + b, y + b, (size_t)(e - b), scale, bias); });
}

}  // namespace orion::sim::kernels
