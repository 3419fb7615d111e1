#include "cpu/kernels/scratch.h"

#include <cstdlib>
#include <new>

namespace orion::cpu::kernels {
namespace {

struct Buffers {
  void* p[(int)ScratchSlot::count] = {};
  size_t cap[(int)ScratchSlot::count] = {};
  ~Buffers() {
    for (void* q : p) std::free(q);
  }
};
thread_local Buffers t_buf;

}  // namespace

void* scratch(ScratchSlot slot, size_t bytes) {
  int i = (int)slot;
  if (t_buf.cap[i] < bytes) {
    size_t cap = (bytes + bytes / 4 + 4095) & ~(size_t)4095;  // headroom, page multiple (aligned_alloc)
    std::free(t_buf.p[i]);
    t_buf.p[i] = std::aligned_alloc(64, cap);
    if (!t_buf.p[i]) {
      t_buf.cap[i] = 0;
      throw std::bad_alloc();
    }
    t_buf.cap[i] = cap;
  }
  return t_buf.p[i];
}

}  // namespace orion::cpu::kernels
