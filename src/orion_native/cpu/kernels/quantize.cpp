// Weights into symmetric 8-bit codes (orion.quant's quantize_int8 and the quantized model's int8 CPU classifier):
// fp16 rows widened exactly, then numpy's float32 arithmetic - the quotient w / scale rounded once, rint (ties to
// even), clipped to [-127, 127] - so the codes are the ones numpy computed, a row at a time on the pool.
#include <cmath>
#include <vector>

#include "cpu/kernels/kernels.h"
#include "cpu/simd/isa.h"
#include "cpu/threadpool.h"

namespace orion::cpu::kernels {

namespace {
constexpr int64_t kRowGrain = int64_t(1) << 16;  // elements per chunk of rows before threads are worth waking
}  // namespace

void absmax_rows_f16(const f16* w, int64_t n, int64_t d, float* out) {
  const simd::IsaOps& o = simd::ops();
  parallel_for(n, grain_for(d, kRowGrain), [&](int64_t lo, int64_t hi) {
    std::vector<float> row((size_t)d);
    for (int64_t r = lo; r < hi; ++r) {
      o.f16_to_f32(w + r * d, row.data(), (size_t)d);
      float m = 0.0f;
      bool nan = false;
      for (int64_t k = 0; k < d; ++k) {
        const float a = std::fabs(row[k]);
        nan |= a != a;
        m = a > m ? a : m;
      }
      out[r] = nan ? NAN : m;  // numpy's max propagates NaN
    }
  });
}

void quantize_rows_s8(const f16* w, int64_t n, int64_t d, const float* scale, int8_t* out) {
  const simd::IsaOps& o = simd::ops();
  parallel_for(n, grain_for(d, kRowGrain), [&](int64_t lo, int64_t hi) {
    std::vector<float> row((size_t)d);
    for (int64_t r = lo; r < hi; ++r) {
      o.f16_to_f32(w + r * d, row.data(), (size_t)d);
      const float s = scale[r];
      int8_t* q = out + r * d;
      for (int64_t k = 0; k < d; ++k) {
        const float v = std::nearbyint(row[k] / s);  // the default rounding mode: ties to even, as np.rint
        q[k] = (int8_t)(v < -127.0f ? -127.0f : v > 127.0f ? 127.0f : v);
      }
    }
  });
}

}  // namespace orion::cpu::kernels
