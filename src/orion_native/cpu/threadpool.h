// Process-wide worker pool for the CPU kernels. Sized to the machine (hardware_concurrency), or to
// ORION_NUM_THREADS when set; set_num_threads() resizes. Nested parallel_for calls run inline.
#pragma once
#include <cstdint>
#include <functional>

namespace orion::cpu {

// Calls fn(begin, end) over [0, n) split into chunks of at least `grain` items, on the pool plus the
// calling thread; returns when all chunks are done. Exceptions from fn are rethrown in the caller.
void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);
int num_threads();
void set_num_threads(int n);  // n <= 0: back to the default

}  // namespace orion::cpu
