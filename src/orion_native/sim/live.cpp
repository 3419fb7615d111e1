// Dead-column skipping: which part of every value the live output entries read. Backward from the
// outputs (a prefix of each one's last axis), in reverse definition order: a view passes its region
// to its source through the reshape, a step asks its op's column rule which parts of its inputs a
// prefix of its output reads. An op that mixes entries along the axis (softmax or a reduction over
// it, a contraction, a window) has no rule for it: that step and everything it reads is computed
// whole, and a note says why. Computing a whole region where only a prefix is needed is always
// exact; a prefix is computed only where every reader was proved to stay inside it.
#include <algorithm>

#include "sim/ops/op.h"

namespace orion::sim::live {

using ops::Region;

namespace {

// The smallest region covering both; prefixes along different axes need all of it.
Region merge(const Region& a, const Region& b) {
  if (a.kind == Region::Kind::none) return b;
  if (b.kind == Region::Kind::none) return a;
  if (a.kind == Region::Kind::all || b.kind == Region::Kind::all || a.axis != b.axis) return Region::all();
  return Region::prefix(a.axis, std::max(a.len, b.len));
}

// A prefix covering its whole axis is all of the value.
Region normal(const Region& r, const Shape& s) {
  if (r.kind == Region::Kind::prefix && (r.axis < 0 || r.axis >= (int)s.size() || r.len >= s[r.axis])) return Region::all();
  if (r.kind == Region::Kind::prefix && r.len <= 0) return Region{};
  return r;
}

}  // namespace

Result analyse(const std::deque<ops::Value>& values, const std::vector<StepInfo>& steps,
               const std::vector<std::pair<int, int>>& views, const std::vector<int>& out_ids,
               const std::vector<int64_t>& live) {
  const int n = (int)values.size();
  std::vector<Region> need((size_t)n);
  std::vector<std::string> cause((size_t)n);  // why a value is needed whole (first reader that did it)
  auto add = [&](int x, const Region& part, const std::string& reader) {
    Region before = need[(size_t)x], p = normal(part, values[(size_t)x].shape);
    need[(size_t)x] = merge(before, p);
    if (need[(size_t)x].kind == Region::Kind::all && before.kind != Region::Kind::all && cause[(size_t)x].empty())
      cause[(size_t)x] = p.kind == Region::Kind::all ? "read whole by '" + reader + "'"
                                                      : "read along two axes (by '" + reader + "')";
  };
  std::vector<int> step_of((size_t)n, -1), view_of((size_t)n, -1);
  for (size_t i = 0; i < steps.size(); ++i) step_of[(size_t)steps[i].out] = (int)i;
  for (const auto& [v, src] : views) view_of[(size_t)v] = src;
  for (size_t j = 0; j < out_ids.size(); ++j) {
    const Shape& s = values[(size_t)out_ids[j]].shape;
    Region r = j < live.size() && live[j] >= 0 && !s.empty() ? Region::prefix((int)s.size() - 1, live[j]) : Region::all();
    add(out_ids[j], r, "the output hint");
  }
  Result res;
  res.step.resize(steps.size());
  std::vector<std::pair<int, Region>> in;
  for (int id = n - 1; id >= 0; --id) {
    const ops::Value& v = values[(size_t)id];
    Region r = normal(need[(size_t)id], v.shape);
    if (r.kind == Region::Kind::none) continue;
    if (view_of[(size_t)id] >= 0) {
      int src = view_of[(size_t)id];
      if (v.numel() != values[(size_t)src].numel()) {  // a slice of an input (read whole: it is a parameter)
        add(src, Region::all(), v.name);
        continue;
      }
      add(src, ops::reshape_region(v.shape, r, values[(size_t)src].shape), v.name);
      continue;
    }
    int si = step_of[(size_t)id];
    if (si < 0) continue;  // a parameter or a const: always whole
    const StepInfo& st = steps[(size_t)si];
    in.clear();
    if (r.kind == Region::Kind::prefix) {
      std::string why;
      if (!(*st.rule) || !(*st.rule)(r.axis, r.len, &in, &why)) {
        res.notes.push_back("'" + v.name + "' computed whole: " + (why.empty() ? "no column rule" : why));
        r = Region::all();
        in.clear();
      }
    } else if (!cause[(size_t)id].empty() && cause[(size_t)id] != "read whole by 'the output hint'") {
      res.notes.push_back("'" + v.name + "' computed whole: " + cause[(size_t)id]);
    }
    res.step[(size_t)si] = r;
    for (int x : *st.ins) {  // inputs the rule did not name are read whole
      Region part = Region::all();
      bool named = false;
      for (const auto& [id2, reg] : in)
        if (id2 == x) {
          part = named ? merge(part, reg) : reg;
          named = true;
        }
      add(x, part, v.name);
    }
  }
  int prefix = 0, whole = 0, skipped = 0;
  for (const Region& r : res.step)
    (r.kind == Region::Kind::prefix ? prefix : r.kind == Region::Kind::all ? whole : skipped)++;
  res.notes.push_back("summary: " + std::to_string(prefix) + " of " + std::to_string(steps.size()) +
                      " steps compute a prefix, " + std::to_string(whole) + " all, " + std::to_string(skipped) + " none");
  return res;
}

}  // namespace orion::sim::live
