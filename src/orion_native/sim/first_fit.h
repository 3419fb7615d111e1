// First-fit placement of blocks with lifetimes, in order of their first step: a block is free again after the
// last step that uses it. The plan's arena (sim/plan.cpp) and a live run's compact forms (sim/compact.cpp).
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

namespace orion::sim {

class FirstFit {
 public:
  // Offset of a block of `size` units used from step `start` to step `end` (both inclusive); calls come in
  // non-decreasing `start`. A block never shares space with one whose life overlaps it.
  int64_t place(int start, int end, int64_t size) {
    live_.erase(std::remove_if(live_.begin(), live_.end(), [&](const Block& b) { return b.end < start; }), live_.end());
    std::sort(live_.begin(), live_.end(), [](const Block& a, const Block& b) { return a.off < b.off; });
    int64_t at = 0;
    for (const Block& b : live_) {
      if (b.off - at >= size) break;
      at = std::max(at, b.off + b.size);
    }
    live_.push_back({at, size, end});
    peak_ = std::max(peak_, at + size);
    return at;
  }
  int64_t peak() const { return peak_; }  // the space all placements need

 private:
  struct Block {
    int64_t off, size;
    int end;
  };
  std::vector<Block> live_;
  int64_t peak_ = 0;
};

}  // namespace orion::sim
