#include "sim/shared_weights.h"

#include <cstring>
#include <mutex>
#include <unordered_map>

namespace orion::sim {
namespace {

using cpu::kernels::CompressedWeight;
using cpu::kernels::PackedA;

uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h * 0xff51afd7ed558ccdull;
}

uint64_t hash_bytes(const void* p, size_t n, uint64_t h) {
  const uint8_t* b = static_cast<const uint8_t*>(p);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t v;
    std::memcpy(&v, b + i, 8);
    h = mix(h, v);
  }
  for (; i < n; ++i) h = mix(h, b[i]);
  return h;
}

// Exact: every element of W against its place in the packed panels (16 rows per panel, k-major).
bool same_dense(const PackedA& a, const f16* w, int64_t M, int64_t K) {
  if (a.M != M || a.K != K) return false;
  for (int64_t i = 0; i < M; ++i) {
    const f16* panel = a.panel(i / 16) + i % 16;
    const f16* row = w + i * K;
    for (int64_t k = 0; k < K; ++k)
      if (panel[k * 16] != row[k]) return false;
  }
  return true;
}

bool same_compressed(const CompressedWeight& a, const CompressedWeight& b) {
  return a.kind == b.kind && a.M == b.M && a.K == b.K && a.bits == b.bits && a.is_signed == b.is_signed &&
         a.rows_per_block == b.rows_per_block && a.cols_per_block == b.cols_per_block &&
         a.blocks_per_row == b.blocks_per_row && a.codes == b.codes && a.lut == b.lut && a.scale == b.scale &&
         a.offset == b.offset;
}

template <typename T>
struct Registry {
  std::mutex mu;
  std::unordered_multimap<uint64_t, std::weak_ptr<const T>> map;
  void sweep() {  // drop entries no plan holds any more
    for (auto it = map.begin(); it != map.end();) it = it->second.expired() ? map.erase(it) : std::next(it);
  }
  size_t live() {
    std::lock_guard<std::mutex> lock(mu);
    sweep();
    return map.size();
  }
};

Registry<PackedA>& dense() {
  static Registry<PackedA>* r = new Registry<PackedA>;  // never destroyed: plans may outlive static teardown
  return *r;
}
Registry<CompressedWeight>& compressed() {
  static Registry<CompressedWeight>* r = new Registry<CompressedWeight>;
  return *r;
}

}  // namespace

std::shared_ptr<const PackedA> shared_packed(const f16* w, int64_t M, int64_t K) {
  const uint64_t key = hash_bytes(w, (size_t)(M * K) * sizeof(f16), mix((uint64_t)M, (uint64_t)K));
  Registry<PackedA>& r = dense();
  {
    std::lock_guard<std::mutex> lock(r.mu);
    auto range = r.map.equal_range(key);
    for (auto it = range.first; it != range.second; ++it)
      if (auto p = it->second.lock(); p && same_dense(*p, w, M, K)) return p;
  }
  auto p = std::make_shared<const PackedA>(cpu::kernels::pack_a(w, M, K));  // packed outside the lock
  std::lock_guard<std::mutex> lock(r.mu);
  r.sweep();
  r.map.emplace(key, p);
  return p;
}

std::shared_ptr<const CompressedWeight> shared_compressed(std::shared_ptr<CompressedWeight> w) {
  uint64_t key = mix(mix((uint64_t)w->M, (uint64_t)w->K), (uint64_t)w->bits * 2 + (uint64_t)w->kind);
  key = hash_bytes(w->codes.data(), w->codes.size(), key);
  Registry<CompressedWeight>& r = compressed();
  std::lock_guard<std::mutex> lock(r.mu);
  auto range = r.map.equal_range(key);
  for (auto it = range.first; it != range.second; ++it)
    if (auto p = it->second.lock(); p && same_compressed(*p, *w)) return p;
  r.sweep();
  std::shared_ptr<const CompressedWeight> out = std::move(w);
  r.map.emplace(key, out);
  return out;
}

std::pair<size_t, size_t> shared_weight_counts() { return {dense().live(), compressed().live()}; }

}  // namespace orion::sim
