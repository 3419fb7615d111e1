// Process-wide worker pool for the CPU kernels. Sized to the machine (hardware_concurrency), or to
// ORION_NUM_THREADS when set; set_num_threads() resizes. Nested parallel_for calls run inline.
#pragma once
#include <algorithm>
#include <cstdint>
#include <functional>

namespace orion::cpu {

// Calls fn(begin, end) over [0, n) split into chunks of at least `grain` items, on the pool plus the
// calling thread; returns when all chunks are done. Exceptions from fn are rethrown in the caller.
void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);
// The grain for items of `per_item` elements (or bytes) each: as many as make up `amount` of them, at least one -
// so a chunk is worth waking a thread for however long a row is.
inline int64_t grain_for(int64_t per_item, int64_t amount) {
  return std::max<int64_t>(1, amount / std::max<int64_t>(per_item, 1));
}
int num_threads();
void set_num_threads(int n);  // n <= 0: back to the default

}  // namespace orion::cpu
