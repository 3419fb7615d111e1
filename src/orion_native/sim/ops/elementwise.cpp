// Element-wise ops: add/sub/mul/real_div/pow/maximum/minimum (numpy broadcasting), the unary
// activations, clip and gelu. Every result is rounded once to fp16 by the kernels (C37).
#include <cmath>
#include <memory>
#include <vector>

#include "cpu/kernels/kernels.h"
#include "cpu/kernels/scratch.h"
#include "sim/ops/op.h"
#include "sim/ops/prefix.h"
#include "cpu/threadpool.h"

namespace orion::sim::ops {

namespace k = cpu::kernels;

// ---- binary ---------------------------------------------------------------------------------------

static k::Binary binary_kind(const std::string& op) {
  if (op == "add") return k::Binary::add;
  if (op == "sub") return k::Binary::sub;
  if (op == "mul") return k::Binary::mul;
  if (op == "real_div") return k::Binary::div;
  if (op == "pow") return k::Binary::pow;
  if (op == "maximum") return k::Binary::maximum;
  return k::Binary::minimum;
}

void binary_infer(OpCtx& ctx) {
  const Value& x = ctx.expect_float("x");
  const Value& y = ctx.expect_float("y");
  ctx.expect_same_dtype("x", "y");
  ctx.out_dtype = x.dtype;
  ctx.out_shape = ctx.broadcast(x.shape, y.shape, "x", "y");
}

// A broadcast const operand of a small op (a bias [C,1] over [C,S], norm gamma/beta, the ones that
// widen an output) is expanded to the output's shape once, here: the op becomes one contiguous pass
// instead of a gather per short row. Same values, so same results; bounded to keep plans small.
constexpr int64_t kExpandMaxElems = 1 << 17;

using Expanded = std::shared_ptr<const std::vector<f16>>;

static Expanded expand_const(const Value& v, const Shape& out, std::vector<int64_t>* strides) {
  int64_t n = shape_numel(out);
  if (!v.is_const() || v.cdata->elided || v.numel() <= 1 || v.numel() >= n || n > kExpandMaxElems) return nullptr;
  auto e = std::make_shared<std::vector<f16>>((size_t)n);
  k::strided_copy(v.cdata->bytes.data(), e->data(), sizeof(f16), 0, *strides, out);
  *strides = dense_strides(out);
  return e;
}

RunFn binary_lower(OpCtx& ctx) {
  Shape out = at_least_1d(ctx.out_shape);
  std::vector<int64_t> as = broadcast_strides(ctx.v("x").shape, out), bs = broadcast_strides(ctx.v("y").shape, out);
  int ix = ctx.input("x"), iy = ctx.input("y");
  k::Binary op = binary_kind(ctx.st.op);
  ctx.flops = (double)shape_numel(out);
  const std::vector<int64_t> as0 = as, bs0 = bs;  // as stored (a compact run reads consts unexpanded)
  Expanded ex = expand_const(ctx.v("x"), out, &as), ey = expand_const(ctx.v("y"), out, &bs);
  // A prefix box starts at index 0 of every axis: the operands' strides address it as they are.
  ctx.run_prefix = [=](const RunArgs& a, int axis, int64_t len) {
    PrefixBox bx = prefix_box(out, axis, len);
    if (!worth_a_box(bx, 32)) bx = prefix_box(out, 0, out[0]);  // the whole tensor, in place
    f16* dst = bx.outer == 1 ? a.o<f16>() : k::scratch_as<f16>(k::ScratchSlot::prefix, (size_t)(bx.outer * bx.chunk));
    k::binary(op, ex ? ex->data() : a.at<f16>(ix), as, ey ? ey->data() : a.at<f16>(iy), bs, dst, bx.sub);
    if (bx.outer > 1) scatter_prefix(bx, dst, a.o<f16>());
  };
  // An operand given compact is its own box, dense (reads_own_prefix); the others are read in place as
  // stored - a broadcast const unexpanded: over a box of short rows (an output widened by a ones const) its
  // one row is gathered once, where its expansion would be read row by row.
  ctx.compact_inputs = [=, xs = ctx.v("x").shape, ys = ctx.v("y").shape](int axis, int64_t len,
                                                                         std::vector<std::pair<int, Region>>* in) {
    if (reads_own_prefix(xs, out, axis)) in->push_back({ix, Region::prefix(axis, len)});
    if (reads_own_prefix(ys, out, axis)) in->push_back({iy, Region::prefix(axis, len)});
  };
  ctx.run_compact = [=, xs = ctx.v("x").shape, ys = ctx.v("y").shape](const RunArgs& a, int axis, int64_t len,
                                                                     const f16* const* in, f16* dst) {
    PrefixBox bx = prefix_box(out, axis, len);
    auto box_strides = [&](Shape s) {
      s[(size_t)axis] = len;
      return broadcast_strides(s, bx.sub);
    };
    k::binary(op, in[ix] ? in[ix] : a.at<f16>(ix), in[ix] ? box_strides(xs) : as0,
              in[iy] ? in[iy] : a.at<f16>(iy), in[iy] ? box_strides(ys) : bs0, dst, bx.sub);
  };
  return [=](const RunArgs& a) {
    k::binary(op, ex ? ex->data() : a.at<f16>(ix), as, ey ? ey->data() : a.at<f16>(iy), bs, a.o<f16>(), out);
  };
}

// An element-wise map's prefix box: gathered, mapped in place, scattered back.
static PrefixRunFn map_prefix(const Shape& shape, std::function<void(const f16*, f16*, size_t)> map, int ix,
                              int64_t min_chunk) {
  return [=](const RunArgs& a, int axis, int64_t len) {
    PrefixBox bx = prefix_box(shape, axis, len);
    if (!worth_a_box(bx, min_chunk)) bx = prefix_box(shape, 0, shape[0]);
    size_t n = (size_t)(bx.outer * bx.chunk);
    if (bx.outer == 1) return map(a.at<f16>(ix), a.o<f16>(), n);
    f16* box = k::scratch_as<f16>(k::ScratchSlot::prefix, n);
    gather_prefix(bx, a.at<f16>(ix), box);
    map(box, box, n);
    scatter_prefix(bx, box, a.o<f16>());
  };
}

// ---- unary ----------------------------------------------------------------------------------------

static k::Unary unary_kind(const std::string& op) {
  if (op == "sqrt") return k::Unary::sqrt;
  if (op == "rsqrt") return k::Unary::rsqrt;
  if (op == "exp") return k::Unary::exp;
  if (op == "log") return k::Unary::log;
  if (op == "tanh") return k::Unary::tanh;
  if (op == "sigmoid") return k::Unary::sigmoid;
  if (op == "relu") return k::Unary::relu;
  if (op == "silu") return k::Unary::silu;
  return k::Unary::identity;
}

void unary_infer(OpCtx& ctx) {
  const Value& x = ctx.expect_float("x");
  if (ctx.has("epsilon")) ctx.f64("epsilon", 0);  // validates: float scalar const
  ctx.out_dtype = x.dtype;
  ctx.out_shape = x.shape;
}

RunFn unary_lower(OpCtx& ctx) {
  k::Unary op = unary_kind(ctx.st.op);
  // coremltools defaults: rsqrt 1e-12, log 1e-45 — both flush to 0 in fp16, as on the ANE.
  double def = ctx.st.op == "rsqrt" ? 1e-12 : ctx.st.op == "log" ? 1e-45 : 0.0;
  float eps = f16_to_f32(f32_to_f16((float)ctx.f64("epsilon", def)));
  size_t n = (size_t)shape_numel(ctx.out_shape);
  int ix = ctx.input("x");
  ctx.flops = (double)n;
  bool cheap = op == k::Unary::relu || op == k::Unary::identity;
  ctx.run_prefix = map_prefix(at_least_1d(ctx.out_shape), [=](const f16* x, f16* y, size_t m) { k::unary(op, x, y, m, eps); },
                              ix, cheap ? 32 : 1);
  ctx.compact_inputs = [=](int axis, int64_t len, std::vector<std::pair<int, Region>>* in) {
    in->push_back({ix, Region::prefix(axis, len)});
  };
  ctx.run_compact = [=, shape = at_least_1d(ctx.out_shape)](const RunArgs& a, int axis, int64_t len,
                                                            const f16* const* in, f16* dst) {
    PrefixBox bx = prefix_box(shape, axis, len);
    const f16* x = in[ix];
    if (!x) {  // not given compact (a const, a view at an offset): gathered here
      gather_prefix(bx, a.at<f16>(ix), dst);
      x = dst;
    }
    k::unary(op, x, dst, (size_t)(bx.outer * bx.chunk), eps);
  };
  return [=](const RunArgs& a) { k::unary(op, a.at<f16>(ix), a.o<f16>(), n, eps); };
}

// ---- clip -----------------------------------------------------------------------------------------

void clip_infer(OpCtx& ctx) {
  const Value& x = ctx.expect_float("x");
  const double alpha = ctx.f64("alpha", 0), beta = ctx.f64("beta", 0);
  if (alpha > beta) ctx.fail("alpha " + std::to_string(alpha) + " > beta " + std::to_string(beta) + " (clip to [alpha, beta])");
  if (ctx.v("alpha").dtype != x.dtype || ctx.v("beta").dtype != x.dtype)
    ctx.fail("alpha and beta must have the dtype of x (" + std::string(dtype_name(x.dtype)) + ")");
  ctx.out_dtype = x.dtype;
  ctx.out_shape = x.shape;
}

RunFn clip_lower(OpCtx& ctx) {
  float lo = (float)ctx.f64("alpha", 0), hi = (float)ctx.f64("beta", 0);
  size_t n = (size_t)shape_numel(ctx.out_shape);
  int ix = ctx.input("x");
  ctx.flops = (double)n;
  return [=](const RunArgs& a) { k::clip(a.at<f16>(ix), a.o<f16>(), n, lo, hi); };
}

// ---- gelu -----------------------------------------------------------------------------------------

void gelu_infer(OpCtx& ctx) {
  const Value& x = ctx.expect_float("x");
  std::string mode = ctx.str("mode", "EXACT");
  if (mode != "EXACT" && mode != "TANH_APPROXIMATION" && mode != "SIGMOID_APPROXIMATION")
    ctx.fail("mode must be EXACT, TANH_APPROXIMATION or SIGMOID_APPROXIMATION, got '" + mode + "'");
  ctx.out_dtype = x.dtype;
  ctx.out_shape = x.shape;
}

RunFn gelu_lower(OpCtx& ctx) {
  std::string mode = ctx.str("mode", "EXACT");
  size_t n = (size_t)shape_numel(ctx.out_shape);
  int ix = ctx.input("x");
  ctx.flops = 8.0 * n;
  if (mode == "SIGMOID_APPROXIMATION") {  // x * sigmoid(1.702 x); kernels.h has no such mode
    return [=](const RunArgs& a) {
      const f16* x = a.at<f16>(ix);
      f16* y = a.o<f16>();
      cpu::parallel_for((int64_t)n, 16384, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
          float v = f16_to_f32(x[i]);
          y[i] = f32_to_f16(v / (1.0f + std::exp(-1.702f * v)));
        }
      });
    };
  }
  k::Unary op = mode == "EXACT" ? k::Unary::gelu_exact : k::Unary::gelu_tanh;
  return [=](const RunArgs& a) { k::unary(op, a.at<f16>(ix), a.o<f16>(), n, 0.0f); };
}

}  // namespace orion::sim::ops
