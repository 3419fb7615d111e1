// Column rules for dead-column skipping (plan.cpp): for each op, which parts of its inputs a prefix of
// its output along one axis reads. Element-wise ops, norms/reductions/softmax over other axes,
// transposes, slices and concats map the prefix to their operands; an op that mixes entries along the
// axis (softmax or a reduction over it, a window, a gather) refuses, so the plan computes all of it.
// conv, matmul, scaled_dot_product_attention and slice_by_index set their own rule in lower.
#include <algorithm>

#include "sim/ops/op.h"

namespace orion::sim::ops {

namespace {

using Needs = std::vector<std::pair<int, Region>>;

// An operand of shape `shape` broadcast (right-aligned) to an output of rank `out_rank`: the prefix
// along output axis `axis` reads the same prefix of it, or all of it where it has no such axis or
// size 1 there.
Region aligned(const Shape& shape, int out_rank, int axis, int64_t len) {
  int b = axis - (out_rank - (int)shape.size());
  if (b < 0 || shape[b] == 1) return Region::all();
  return Region::prefix(b, len);
}

ColumnRule elementwise(OpCtx& ctx, const std::vector<std::string>& operands) {
  std::vector<std::pair<int, Shape>> ops;
  for (const auto& p : operands)
    if (ctx.has(p)) ops.push_back({ctx.vid(p), ctx.v(p).shape});
  int r = (int)ctx.out_shape.size();
  return [ops, r](int axis, int64_t len, Needs* in, std::string*) {
    for (const auto& [id, shape] : ops) in->push_back({id, aligned(shape, r, axis, len)});
    return true;
  };
}

// Ops whose every output entry reads input entries at the same index except along `mixed` axes.
ColumnRule along_others(OpCtx& ctx, const std::string& x, std::vector<int> mixed, std::vector<int> out_to_in,
                        const std::string& what) {
  int id = ctx.vid(x);
  return [=](int axis, int64_t len, Needs* in, std::string* why) {
    int b = out_to_in.empty() ? axis : out_to_in[axis];
    if (std::find(mixed.begin(), mixed.end(), b) != mixed.end()) {
      *why = what + " along axis " + std::to_string(b);
      return false;
    }
    in->push_back({id, Region::prefix(b, len)});
    return true;
  };
}

ColumnRule refuse(const std::string& why) {
  return [why](int, int64_t, Needs*, std::string* w) {
    *w = why;
    return false;
  };
}

}  // namespace

ColumnRule column_rule(OpCtx& ctx) {
  if (ctx.column_rule) return ctx.column_rule;
  const std::string& op = ctx.st.op;
  const std::string self = "'" + ctx.st.out + "' (" + op + ")";
  static const std::vector<std::string> binary_ops = {"add", "sub", "mul", "real_div", "pow", "maximum", "minimum"};
  static const std::vector<std::string> unary_ops = {"sqrt", "rsqrt", "exp", "log", "tanh", "sigmoid", "relu", "silu",
                                                     "gelu", "clip", "cast", "identity", "split"};
  if (std::find(binary_ops.begin(), binary_ops.end(), op) != binary_ops.end()) return elementwise(ctx, {"x", "y"});
  if (std::find(unary_ops.begin(), unary_ops.end(), op) != unary_ops.end()) return elementwise(ctx, {"x"});
  if (op == "select") return elementwise(ctx, {"cond", "a", "b"});
  if (op == "quantize" || op == "dequantize") return elementwise(ctx, {"input"});  // scale, zero_point: consts
  const Value& x0 = ctx.has("x") ? ctx.v("x") : ctx.env.value(ctx.inputs.empty() ? 0 : ctx.inputs[0]);
  int r = x0.rank();
  if (op == "softmax")
    return along_others(ctx, "x", {ctx.norm_axis(ctx.i64("axis", -1), r, "axis")}, {}, self + " normalises");
  if (op == "layer_norm") return along_others(ctx, "x", ctx.axes_param(r), {}, self + " normalises");
  if (op.rfind("reduce_", 0) == 0) {
    std::vector<int> axes = ctx.axes_param(r);
    std::vector<int> out_to_in;  // without keep_dims the reduced axes disappear from the output
    for (int i = 0; i < r; ++i)
      if (ctx.flag("keep_dims", false) || std::find(axes.begin(), axes.end(), i) == axes.end()) out_to_in.push_back(i);
    return along_others(ctx, "x", axes, out_to_in, self + " reduces");
  }
  if (op == "transpose") {
    std::vector<int> perm;
    for (int64_t p : ctx.ivec("perm")) perm.push_back(ctx.norm_axis(p, r, "perm entry"));
    return along_others(ctx, "x", {}, perm, self);
  }
  if (op == "slice_by_size") {
    if (ctx.profile().legacy_chip()) return refuse(self + " may saturate (C35) on this chip profile");
    std::vector<int64_t> begin = ctx.ivec("begin");
    int id = ctx.vid("x");
    Shape xs = x0.shape;
    return [=](int axis, int64_t len, Needs* in, std::string*) {
      int64_t b = begin[axis] < 0 ? begin[axis] + xs[axis] : begin[axis];
      in->push_back({id, Region::prefix(axis, b + len)});
      return true;
    };
  }
  if (op == "concat") {
    std::vector<int> ids = ctx.tuple("values");
    int ax = ctx.norm_axis(ctx.i64("axis"), r, "axis");
    bool inter = ctx.flag("interleave", false);
    std::vector<int64_t> lens;
    for (int id : ids) lens.push_back(ctx.env.value(id).shape[ax]);
    return [=](int axis, int64_t len, Needs* in, std::string* why) {
      if (axis != ax) {
        for (int id : ids) in->push_back({id, Region::prefix(axis, len)});
        return true;
      }
      if (inter) {
        *why = self + " interleaves its values along axis " + std::to_string(ax);
        return false;
      }
      int64_t at = 0;
      for (size_t i = 0; i < ids.size(); ++i) {  // a value past the prefix is not read at all
        int64_t need = std::min(std::max<int64_t>(len - at, 0), lens[i]);
        in->push_back({ids[i], need ? Region::prefix(axis, need) : Region{}});
        at += lens[i];
      }
      return true;
    };
  }
  return refuse("no column rule for " + self + ": it may read any entry");
}

// Reshape keeps the flat order. Axis a of `of` with inner size I (product of the axes after it) and
// span I*of[a] covers the same flat blocks as an axis b of `as` with the same outer product and span:
// a prefix of `len` along a is then a prefix along b (b split into a: len * I / Ib; a split into b:
// rounded up, a superset). Otherwise all of it.
Region reshape_region(const Shape& of, const Region& r, const Shape& as) {
  if (r.kind != Region::Kind::prefix) return r;
  int64_t inner = prod(of, r.axis + 1, (int)of.size()), span = inner * of[r.axis], outer = prod(of, 0, r.axis);
  for (int b = 0; b < (int)as.size(); ++b) {
    if (as[b] == 1) continue;
    int64_t ib = prod(as, b + 1, (int)as.size());
    if (prod(as, 0, b) != outer || ib * as[b] != span) continue;
    if (ib >= inner && ib % inner == 0) {
      int64_t k = ib / inner;
      return Region::prefix(b, std::min(as[b], (r.len + k - 1) / k));
    }
    if (inner % ib == 0) return Region::prefix(b, std::min(as[b], r.len * (inner / ib)));
  }
  return Region::all();
}

}  // namespace orion::sim::ops
