// Constant weights shared by the plans of one process: a model's program sets (prefill and decode, a batch
// set, another context bucket) bake the same weights, and each plan packing its own copy held every baked
// weight once per set. A plan asks here for its packed or compressed weight and gets the copy another
// plan already holds when the contents are equal (compared exactly: a hash only finds candidates), else
// its own, which later plans then share. Entries live as long as a plan holds them.
#pragma once
#include <cstdint>
#include <memory>

#include "cpu/kernels/compressed.h"
#include "cpu/kernels/kernels.h"

namespace orion::sim {

// W [M][K] row-major fp16, packed into the panel kernel's layout (cpu::kernels::pack_a).
std::shared_ptr<const cpu::kernels::PackedA> shared_packed(const f16* w, int64_t M, int64_t K);
// A compressed weight with its codes set: `w` itself, or an equal one held by another plan.
std::shared_ptr<const cpu::kernels::CompressedWeight> shared_compressed(std::shared_ptr<cpu::kernels::CompressedWeight> w);
// Live entries (tests): dense packed weights, compressed weights.
std::pair<size_t, size_t> shared_weight_counts();

}  // namespace orion::sim
