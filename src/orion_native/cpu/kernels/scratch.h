// Per-thread, 64-byte aligned scratch buffers that grow on demand and live as long as the thread.
// Slots keep concurrently used buffers apart (e.g. packed B vs packed A in one GEMM).
#pragma once
#include <cstddef>

namespace orion::cpu::kernels {

// prefix: an op's dense copy of the part of its output that dead-column skipping computes (ops/prefix.h);
// compact: a live run's compact forms, held across its steps (sim/compact.h).
enum class ScratchSlot { gemm_a, gemm_b, gemm_c, tmp, tmp2, prefix, compact, count };

// Returns a buffer of at least `bytes` bytes; contents are unspecified.
void* scratch(ScratchSlot slot, size_t bytes);

template <typename T>
T* scratch_as(ScratchSlot slot, size_t n) {
  return static_cast<T*>(scratch(slot, n * sizeof(T)));
}

}  // namespace orion::cpu::kernels
