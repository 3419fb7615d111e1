// Which steps of a live run compute in compact form, what each reads compact, and which results must
// also reach their full layout (compact.h).
#include "sim/compact.h"

#include <algorithm>
#include <atomic>

#include "sim/first_fit.h"
#include "sim/ops/prefix.h"

namespace orion::sim::compact {

namespace {

std::atomic<bool> g_enabled{true};
std::atomic<int64_t> g_steps_run{0};

Geometry geometry_of(const Shape& shape, const ops::Region& r) {
  ops::PrefixBox b = ops::prefix_box(shape, r.axis, r.len);
  return {b.outer, b.chunk, b.stride};
}

// Strided enough that gathering beats computing in place: many blocks, each at most a quarter of its stride
// (one or a few live columns of 16). A single block is computed in place already.
bool worth_compact(const Geometry& g) { return g.outer > 1 && 4 * g.chunk <= g.stride; }

}  // namespace

bool enabled() { return g_enabled.load(std::memory_order_relaxed); }
void set_enabled(bool on) { g_enabled.store(on, std::memory_order_relaxed); }
void count_steps_run(int64_t n) { g_steps_run.fetch_add(n, std::memory_order_relaxed); }
int64_t take_steps_run() { return g_steps_run.exchange(0, std::memory_order_relaxed); }

Plan plan(const std::deque<ops::Value>& values, const std::vector<StepInfo>& steps,
          const std::vector<std::pair<int, int>>& views, const std::vector<int64_t>& view_off,
          const std::vector<int>& out_ids, const std::vector<ops::Region>& regions, const std::vector<int64_t>& live) {
  const size_t n = values.size(), ns = steps.size();
  Plan p;
  p.step.assign(ns, 0);
  p.in.assign(ns, {});
  p.full.assign(n, 0);
  p.slot.assign(n, -1);
  p.geometry.assign(n, {});
  std::vector<int> view_of(n, -1), step_of(n, -1);
  for (const auto& [v, src] : views) view_of[(size_t)v] = src;
  auto bytes_of = [&](int v) { return view_of[(size_t)v] >= 0 ? view_of[(size_t)v] : v; };  // sources are never views
  auto offset_of = [&](int v) { return (size_t)v < view_off.size() ? view_off[(size_t)v] : 0; };  // 0: not a view
  auto two_byte = [&](int v) { return ops::storage_size(values[(size_t)v].dtype) == 2; };
  // Slots are placed once every value's compact life is known (first - made or gathered - to last read), reusing
  // the space of values no longer read: a program's compact forms would otherwise add up to a copy of all of
  // its values' live boxes (hundreds of MB for a long sequence).
  std::vector<int> first(n, -1), last(n, -1);
  auto take_slot = [&](int v, const Geometry& g, int at) {
    p.geometry[(size_t)v] = g;
    p.slot[(size_t)v] = 0;  // placed below
    first[(size_t)v] = last[(size_t)v] = at;
  };

  for (size_t si = 0; si < ns; ++si) {
    const StepInfo& s = steps[si];
    step_of[(size_t)s.out] = (int)si;
    const ops::Region& r = regions[si];
    if (r.kind != ops::Region::Kind::prefix || !s.runner || !two_byte(s.out)) continue;
    Geometry g = geometry_of(values[(size_t)s.out].shape, r);
    if (!worth_compact(g)) continue;
    p.step[si] = 1;
    take_slot(s.out, g, (int)si);
  }

  std::vector<std::pair<int, ops::Region>> parts;
  for (size_t si = 0; si < ns; ++si) {
    const StepInfo& s = steps[si];
    const ops::Region& r = regions[si];
    if (r.kind == ops::Region::Kind::none) continue;  // not run: reads nothing
    parts.clear();
    if (p.step[si] && *s.inputs) (*s.inputs)(r.axis, r.len, &parts);
    p.in[si].assign(s.ins->size(), -1);
    for (size_t k = 0; k < s.ins->size(); ++k) {
      const int v = (*s.ins)[k];
      if (v < 0 || s.build_only->count(v)) continue;
      const int src = bytes_of(v);
      const ops::Value& val = values[(size_t)v];
      int use = -1;
      // An input the op takes compact over the part it reads (a const never: read in place, as stored).
      for (const auto& [idx, part] : parts) {
        if (idx != (int)k || val.is_const() || !two_byte(v) || offset_of(v) != 0) continue;
        const Geometry g = geometry_of(val.shape, part);
        const bool made_compact = step_of[(size_t)src] >= 0 && p.step[(size_t)step_of[(size_t)src]];
        if (p.slot[(size_t)src] < 0 && !made_compact && worth_compact(g)) take_slot(src, g, (int)si);  // gathered by its first reader
        if (p.slot[(size_t)src] >= 0 && p.geometry[(size_t)src] == g) {
          use = src;
          last[(size_t)src] = std::max(last[(size_t)src], (int)si);
        }
      }
      p.in[si][k] = use;
      if (use < 0) p.full[(size_t)src] = 1;  // read in its full layout
    }
  }
  // A program output that only the caller reads, whose live columns (the first live[j] of each row of its
  // last axis) are exactly its compact box, goes there straight from the compact form (one pass, not a
  // scatter into the arena and a copy out of it: decode's widened outputs).
  p.direct.assign(out_ids.size(), -1);
  std::vector<int> outputs_of(n, 0);
  for (int id : out_ids) ++outputs_of[(size_t)bytes_of(id)];
  for (size_t j = 0; j < out_ids.size(); ++j) {
    const int id = out_ids[j], src = bytes_of(id);
    const ops::Value& v = values[(size_t)id];
    const int si = step_of[(size_t)src];
    const int64_t w = v.shape.empty() ? 1 : v.shape.back();
    const bool made_compact = si >= 0 && p.step[(size_t)si];
    if (made_compact && !p.full[(size_t)src] && outputs_of[(size_t)src] == 1 && v.dtype == DType::fp16 &&
        j < live.size() && live[j] >= 0 && offset_of(id) == 0 &&
        p.geometry[(size_t)src] == Geometry{v.numel() / w, live[j], w})
      p.direct[j] = src;
  }
  for (size_t j = 0; j < out_ids.size(); ++j) {
    if (p.direct[j] < 0) p.full[(size_t)bytes_of(out_ids[j])] = 1;
    else last[(size_t)p.direct[j]] = (int)ns;  // read after the last step
  }
  // First fit in order of first use; a slot is free again after its last read (a step's result never shares
  // with what that step reads: their lives overlap at it).
  std::vector<int> order;
  for (size_t v = 0; v < n; ++v)
    if (p.slot[v] >= 0) order.push_back((int)v);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return first[(size_t)a] < first[(size_t)b]; });
  FirstFit area;
  for (int v : order) {
    const Geometry& g = p.geometry[(size_t)v];
    p.slot[(size_t)v] = area.place(first[(size_t)v], last[(size_t)v], (g.outer * g.chunk + 31) / 32 * 32);  // 64-byte aligned
  }
  p.elems = area.peak();
  return p;
}

}  // namespace orion::sim::compact
