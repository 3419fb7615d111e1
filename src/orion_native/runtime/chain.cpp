// Chain: see chain.h.
#include "runtime/chain.h"

#include <cstring>
#include <string>

#include "common/error.h"

namespace orion::runtime {
namespace {

void copy_columns(const ColumnCopy& c, int64_t cols, int64_t pos) {
  const uint16_t* s = c.src;
  uint16_t* d = c.dst + (c.at_pos ? pos * c.dst_col : 0);
  if (c.src_col == 1 && c.dst_col == 1 && cols > 1) {
    for (int64_t r = 0; r < c.rows; ++r) std::memcpy(d + r * c.dst_row, s + r * c.src_row, (size_t)cols * 2);
    return;
  }
  for (int64_t r = 0; r < c.rows; ++r)
    for (int64_t j = 0; j < cols; ++j) d[r * c.dst_row + j * c.dst_col] = s[r * c.src_row + j * c.src_col];
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
      const int64_t cols = c.cols < 0 ? n : c.cols;
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
    for (const ColumnCopy& c : s.copies) copy_columns(c, c.cols < 0 ? n : c.cols, pos);
    std::vector<Warning> w = s.program->eval(s.has_live ? &s.live : nullptr);
    if (warnings) warnings->insert(warnings->end(), w.begin(), w.end());
    if (s.check.at && !all_finite(s.check, n)) return (int64_t)i;
  }
  return -1;
}

}  // namespace orion::runtime
