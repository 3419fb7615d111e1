// Element-wise drivers: shape collapsing and broadcasting here, contiguous spans to the ISA kernels.
#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "cpu/kernels/kernels.h"
#include "cpu/kernels/scratch.h"
#include "cpu/simd/isa.h"
#include "cpu/threadpool.h"

namespace orion::cpu::kernels {
namespace {

// Split only when a chunk holds enough work to beat handing it over: ~1 us to a spinning worker (ops
// run back to back in a plan), ~10 us to wake a sleeping one (the caller then does most of it).
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

// Rows shorter than this (a bias [C,1] over [C,S], a norm's [1,S] statistics, the ones-broadcast that
// widens outputs) are batched: whole rows gathered into contiguous blocks, one ISA call per block —
// a call per 16-element row costs more than its arithmetic.
constexpr int64_t kShortRow = 64;
constexpr int64_t kRowBlock = 2048;  // elements per gathered block (two blocks in L1)

// Element offsets of each operand's row, advanced row by row (no divisions per row).
struct RowWalk {
  int dims;
  int64_t idx[kMaxRank] = {}, ao = 0, bo = 0;
  const Collapsed& c;
  RowWalk(const Collapsed& col, int64_t row) : dims(col.rank - 1), c(col) {
    for (int d = dims - 1; d >= 0; --d) {
      idx[d] = row % c.shape[d];
      row /= c.shape[d];
      ao += idx[d] * c.as[d];
      bo += idx[d] * c.bs[d];
    }
  }
  void next() {
    for (int d = dims - 1; d >= 0; --d) {
      ao += c.as[d];
      bo += c.bs[d];
      if (++idx[d] < c.shape[d]) return;
      ao -= c.as[d] * c.shape[d];
      bo -= c.bs[d] * c.shape[d];
      idx[d] = 0;
    }
  }
};

// True when the operand is laid out exactly like the (dense) output: rows can be read in place.
bool dense_like_out(const Collapsed& c, const int64_t* st) {
  int64_t want = 1;
  for (int d = c.rank - 1; d >= 0; --d) {
    if (st[d] != want) return false;
    want *= c.shape[d];
  }
  return true;
}

// True when every row of the operand is the same (outer strides 0): its block is gathered once.
bool row_invariant(const Collapsed& c, const int64_t* st) {
  for (int d = 0; d < c.rank - 1; ++d)
    if (st[d] != 0) return false;
  return true;
}

// Inline loops: rows are short, a library call per row would cost more than the copy.
inline void gather(const f16* src, int64_t stride, f16* dst, int64_t n) {
  if (stride == 1) {
    for (int64_t j = 0; j < n; ++j) dst[j] = src[j];
  } else if (stride == 0) {
    const f16 v = *src;
    for (int64_t j = 0; j < n; ++j) dst[j] = v;
  } else {
    for (int64_t j = 0; j < n; ++j) dst[j] = src[j * stride];
  }
}

// m rows of n elements (row stride rs, element stride es) into dst [m][n].
void gather_rows(const f16* src, int64_t rs, int64_t es, f16* dst, int64_t n, int64_t m) {
  if (es == 0 && rs == 1 && n == 2) {  // each element twice (the ones-broadcast widening outputs): vectorises
    for (int64_t i = 0; i < m; ++i) {
      uint32_t pair = (uint32_t)src[i] * 0x00010001u;
      std::memcpy(dst + 2 * i, &pair, sizeof(pair));
    }
    return;
  }
  if (es == 0) {  // one value per row (a per-channel operand): repeat it
    for (int64_t i = 0; i < m; ++i) {
      const f16 v = src[i * rs];
      for (int64_t j = 0; j < n; ++j) dst[i * n + j] = v;
    }
    return;
  }
  for (int64_t i = 0; i < m; ++i) gather(src + i * rs, es, dst + i * n, n);
}

void binary_short_rows(Binary op, const f16* a, const f16* b, f16* out, const Collapsed& c, int64_t n, int64_t rows) {
  const simd::IsaOps& o = simd::ops();
  const int last = c.rank - 1;
  const bool da = dense_like_out(c, c.as), db = dense_like_out(c, c.bs);
  const bool ia = row_invariant(c, c.as), ib = row_invariant(c, c.bs);
  const int64_t per_blk = std::max<int64_t>(1, kRowBlock / n), nblk = (rows + per_blk - 1) / per_blk;
  parallel_for(nblk, std::max<int64_t>(1, kCheapGrain / (per_blk * n)), [&](int64_t b0, int64_t b1) {
    f16* ta = scratch_as<f16>(ScratchSlot::tmp, 2 * (size_t)(per_blk * n));
    f16* tb = ta + per_blk * n;
    for (int64_t i = 0; i < per_blk; ++i) {  // row-invariant operands: one block for the whole chunk
      if (ia && !da) gather(a, c.as[last], ta + i * n, n);
      if (ib && !db) gather(b, c.bs[last], tb + i * n, n);
    }
    const bool ga = !da && !ia, gb = !db && !ib;
    int64_t r = b0 * per_blk, rend = std::min(rows, b1 * per_blk);
    RowWalk w(c, r);
    while (r < rend) {
      int64_t m = std::min(per_blk, rend - r);
      if (c.rank == 2) {  // one outer axis (the common case): plain row offsets, no walker
        if (ga) gather_rows(a + r * c.as[0], c.as[0], c.as[1], ta, n, m);
        if (gb) gather_rows(b + r * c.bs[0], c.bs[0], c.bs[1], tb, n, m);
      } else {
        for (int64_t i = 0; i < m; ++i, w.next()) {
          if (ga) gather(a + w.ao, c.as[last], ta + i * n, n);
          if (gb) gather(b + w.bo, c.bs[last], tb + i * n, n);
        }
      }
      o.binary_vv(op, da ? a + r * n : ta, db ? b + r * n : tb, out + r * n, (size_t)(m * n));
      r += m;
    }
  });
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
  if (n < kShortRow && rows > 1) return binary_short_rows(op, a, b, out, c, n, rows);
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

}  // namespace orion::cpu::kernels
