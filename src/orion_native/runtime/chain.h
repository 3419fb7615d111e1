// A fixed sequence of evaluations run in one call: a model's decode step is one eval per layer on a program
// that every layer shares, and the host work between two of them - bind the layer's surfaces, copy the
// previous eval's outputs into the next one's inputs and the new keys and values into the layer's cache -
// cost more than the simulator's small ops when done from Python. Before each eval a step binds surfaces to
// input slots, runs its fills and copies columns between fp16 [rows, columns] views (any strides) in order; after it, it may
// check the live columns of one output for values outside fp16's range (the engine's overflow guard).
#pragma once
#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "runtime/program.h"

namespace orion::runtime {

struct ColumnCopy {
  static constexpr int64_t kLive = -1, kFilled = -2;
  const uint16_t* src = nullptr;
  int64_t src_row = 0, src_col = 1, src_cols = 0;  // elements between rows, between columns; columns the view holds
  uint16_t* dst = nullptr;
  int64_t dst_row = 0, dst_col = 1, dst_cols = 0;
  int64_t rows = 0;
  int64_t cols = -1;    // columns copied; kLive: the run's n live columns; kFilled: pos + n (a cache's filled
                        // prefix, copied into a program's own surface before its eval)
  bool at_pos = false;  // written at columns pos.. of dst (a cache), else at column 0
};

struct FiniteCheck {
  const uint16_t* at = nullptr;  // null: no check
  int64_t row = 0, col = 1, rows = 0, cols = 0;
};

struct ChainStep {
  Program* program = nullptr;
  std::vector<std::pair<size_t, SurfacePtr>> binds;
  std::vector<std::function<void()>> fills;  // after the binds: surfaces filled in place (a shared program's
                                             // weight inputs decoded from a layer's compressed weights)
  std::vector<ColumnCopy> copies;
  bool has_live = false;
  std::vector<int64_t> live;  // the program's live-columns hint (per output slot)
  FiniteCheck check;          // n live columns of check.rows rows
};

class Chain {
 public:
  void add(ChainStep s) { steps_.push_back(std::move(s)); }
  size_t size() const { return steps_.size(); }
  // Runs the steps in order with n live columns at cache position pos; returns the index of the first
  // step whose check saw a non-finite value (the chain stops after it), or -1. Refuses (InputError) an n
  // or pos that a copy's views cannot hold, before running anything.
  int64_t run(int64_t n, int64_t pos, std::vector<Warning>* warnings);

 private:
  std::vector<ChainStep> steps_;
};

}  // namespace orion::runtime
