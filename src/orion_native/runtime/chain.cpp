// Chain: see chain.h.
#include "runtime/chain.h"

#include <cstring>
#include <string>

#include "common/error.h"

namespace orion::runtime {
namespace {

int64_t columns(const ColumnCopy& c, int64_t n, int64_t pos) {
  return c.cols == ColumnCopy::kLive ? n : c.cols == ColumnCopy::kFilled ? pos + n : c.cols;
}

void copy_columns(const ColumnCopy& c, int64_t cols, int64_t pos) {
  const uint16_t* s = c.src;
  uint16_t* d = c.dst + (c.at_pos ? pos * c.dst_col : 0);
  const int64_t rows = c.rows, sr = c.src_row, dr = c.dst_row, sc = c.src_col, dc = c.dst_col;
  if (sc == 1 && dc == 1 && cols > 1) {
    for (int64_t r = 0; r < rows; ++r) std::memcpy(d + r * dr, s + r * sr, (size_t)cols * 2);
    return;
  }
  if (cols == 1) {  // decode's one live column: an element per row on both sides, lines fetched ahead
    constexpr int64_t kAhead = 16;
    for (int64_t r = 0; r < rows; ++r) {
      if (r + kAhead < rows) {
        __builtin_prefetch(s + (r + kAhead) * sr, 0, 3);
        __builtin_prefetch(d + (r + kAhead) * dr, 1, 3);
      }
      d[r * dr] = s[r * sr];
    }
    return;
  }
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < cols; ++j) d[r * dr + j * dc] = s[r * sr + j * sc];
}

bool all_finite(const FiniteCheck& f, int64_t cols) {
  uint16_t bad = 0;
  for (int64_t r = 0; r < f.rows; ++r)
    for (int64_t j = 0; j < cols; ++j) bad |= (uint16_t)((f.at[r * f.row + j * f.col] & 0x7c00u) == 0x7c00u);
  return !bad;
}

}  // namespace

int64_t Chain::run(int64_t n, int64_t pos, std::vector<Warning>* warnings) {
  if (n < 1 || pos < 0) throw_error(ErrorKind::Input, "chain: n must be >= 1 and pos >= 0, got n=" + std::to_string(n) +
                                                          ", pos=" + std::to_string(pos));
  for (const ChainStep& s : steps_) {
    for (const ColumnCopy& c : s.copies) {
      const int64_t cols = columns(c, n, pos);
      if (cols > c.src_cols || (c.at_pos ? pos : 0) + cols > c.dst_cols)
        throw_error(ErrorKind::Input, "chain: " + std::to_string(cols) + " columns at position " +
                                          std::to_string(c.at_pos ? pos : 0) + " do not fit a copy's views (" +
                                          std::to_string(c.src_cols) + " -> " + std::to_string(c.dst_cols) + " columns)");
    }
    if (s.check.at && n > s.check.cols) throw_error(ErrorKind::Input, "chain: n exceeds a checked output's columns");
  }
  for (size_t i = 0; i < steps_.size(); ++i) {
    const ChainStep& s = steps_[i];
    for (const auto& [slot, surface] : s.binds) s.program->bind_input(slot, surface);
    for (const auto& fill : s.fills) fill();
    for (const ColumnCopy& c : s.copies) copy_columns(c, columns(c, n, pos), pos);
    std::vector<Warning> w = s.program->eval(s.has_live ? &s.live : nullptr);
    if (warnings) warnings->insert(warnings->end(), w.begin(), w.end());
    if (s.check.at && !all_finite(s.check, n)) return (int64_t)i;
  }
  return -1;
}

}  // namespace orion::runtime
