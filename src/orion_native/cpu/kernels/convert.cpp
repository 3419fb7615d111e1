// Bulk fp16 <-> fp32 conversion: ISA kernel, split across threads for large arrays.
#include "cpu/kernels/kernels.h"
#include "cpu/simd/isa.h"
#include "cpu/threadpool.h"

namespace orion::cpu::kernels {

namespace {
constexpr int64_t kGrain = 1 << 16;  // below this a thread wake-up costs more than it saves
}

void f16_to_f32(const f16* src, float* dst, size_t n) {
  const auto& o = simd::ops();
  parallel_for((int64_t)n, kGrain, [&](int64_t b, int64_t e) { o.f16_to_f32(src + b, dst + b, (size_t)(e - b)); });
}

void f32_to_f16(const float* src, f16* dst, size_t n) {
  const auto& o = simd::ops();
  parallel_for((int64_t)n, kGrain, [&](int64_t b, int64_t e) { o.f32_to_f16(src + b, dst + b, (size_t)(e - b)); });
}

}  // namespace orion::cpu::kernels
