// THE op schema: one row per op the simulator knows — MIL parameter names as in the
// coremltools 9.0 registry (required first, "?" = optional) with the type the simulator accepts, the
// output rule, the ANE facts (evidence, constraint IDs, the compiler's lowering) and the family
// functions implementing it. orion.sim.ops() and orion.ops.schema() expose it; the Python op builders,
// the compiler's validation and legalisation lists and the ANE test programs are views of it.
#include <unordered_map>

#include "sim/ops/op.h"

namespace orion::sim::ops {

namespace {

// "bias?: tensor" style parameter list -> Params.
std::vector<Param> ps(std::initializer_list<std::pair<const char*, const char*>> l) {
  std::vector<Param> out;
  for (const auto& [n, t] : l) {
    std::string name = n;
    bool opt = !name.empty() && name.back() == '?';
    if (opt) name.pop_back();
    out.push_back({name, t, opt});
  }
  return out;
}

OpDef op(const char* name, const char* family, std::vector<Param> params, const char* output, AneInfo ane,
         void (*infer)(OpCtx&), RunFn (*lower)(OpCtx&), bool attr_params = false) {
  return {name, family, std::move(params), output, std::move(ane), attr_params, infer, lower};
}

const char* T = "tensor";
const char* I32 = "const int32";
const char* I32V = "const int32[]";
const char* B = "const bool";
const char* F = "const fp";
const char* STR = "const string";

const char* kEw = "elementwise(x)";
const char* kGelu = "tanh form: x * 0.5 * (1 + tanh(0.7978846 * (x + 0.044715 * x^3)))";

std::vector<OpDef> make_registry() {
  std::vector<Param> bin = ps({{"x", T}, {"y", T}}), un = ps({{"x", T}});
  auto red = ps({{"x", T}, {"axes?", I32V}, {"keep_dims?", B}});
  const char* bc = "broadcast(x, y)";
  const char* rd = "reduce(x, axes, keep_dims)";
  return {
      op("const", "const", ps({{"val", "const any"}}), "val", {"[C]", {"C08", "C18"}, ""}, const_infer, nullptr, true),
      op("constexpr_affine_dequantize", "quantization",
         ps({{"quantized_data", "const tensor<int8|uint8>"}, {"zero_point", "const tensor<int8|uint8>"},
             {"scale", "const tensor<fp>"}, {"axis", I32}}),
         "shape of quantized_data, dtype of scale", {"[S]", {"C47"}, ""}, constexpr_affine_dequantize_infer, nullptr, true),
      op("constexpr_lut_to_dense", "quantization",
         ps({{"indices", "const tensor<uint1|uint2|uint3|uint4|uint6|uint8>"}, {"lut", "const tensor<fp>"},
             {"vector_axis?", I32}}),
         "shape of indices, dtype of lut", {"unverified", {"C47"}, ""}, constexpr_lut_to_dense_infer, nullptr, true),
      op("constexpr_blockwise_shift_scale", "quantization",
         ps({{"data", "const tensor<int4|uint4|int8|uint8>"}, {"scale", "const tensor<fp>"},
             {"offset?", "const tensor<int4|uint4|int8|uint8>"}}),
         "shape of data, dtype of scale", {"unverified", {"C47"}, ""}, constexpr_blockwise_shift_scale_infer, nullptr, true),
      // contraction: convolution, matmul, attention
      op("conv", "contraction",
         ps({{"x", T}, {"weight", T}, {"bias?", T}, {"strides?", I32V}, {"pad_type?", STR}, {"pad?", I32V},
             {"dilations?", I32V}, {"groups?", I32}}),
         "conv(x, weight): [N, Cout, H', W'], dtype of x", {"[C]", {"C16", "C24", "C25", "C46"}, ""}, conv_infer, conv_lower),
      op("matmul", "contraction", ps({{"x", T}, {"y", T}, {"transpose_x?", B}, {"transpose_y?", B}}),
         "matmul(x, y): broadcast(batch axes) + [M, N]", {"[C]", {"C15", "C30", "C36"}, ""}, matmul_infer, matmul_lower),
      op("scaled_dot_product_attention", "contraction",
         ps({{"query", T}, {"key", T}, {"value", T}, {"attn_mask?", T}}), "[..., L, Ev], dtype of query",
         {"[C]", {"C06", "C30", "C45"}, "explicit masked attention: matmul, add mask, softmax, matmul"},
         sdpa_infer, sdpa_lower),
      // elementwise binary (numpy broadcasting)
      op("add", "elementwise", bin, bc, {"[C]", {"C19"}, ""}, binary_infer, binary_lower),
      op("sub", "elementwise", bin, bc, {"[C]", {}, ""}, binary_infer, binary_lower),
      op("mul", "elementwise", bin, bc, {"[C]", {"C33"}, ""}, binary_infer, binary_lower),
      op("real_div", "elementwise", bin, bc, {"unverified", {}, "mul by a reciprocal const, or x * pow(y, -1)"},
         binary_infer, binary_lower),
      op("pow", "elementwise", bin, bc, {"[C]", {"C19"}, ""}, binary_infer, binary_lower),
      op("maximum", "elementwise", bin, bc, {"unverified", {}, ""}, binary_infer, binary_lower),
      op("minimum", "elementwise", bin, bc, {"unverified", {}, ""}, binary_infer, binary_lower),
      // elementwise unary
      op("sqrt", "elementwise", un, kEw, {"[S]", {}, ""}, unary_infer, unary_lower),
      op("rsqrt", "elementwise", ps({{"x", T}, {"epsilon?", F}}), kEw, {"rejected", {"C20"}, "pow(x, -0.5)"},
         unary_infer, unary_lower),
      op("exp", "elementwise", un, kEw, {"[S]", {}, ""}, unary_infer, unary_lower),
      op("log", "elementwise", ps({{"x", T}, {"epsilon?", F}}), kEw, {"unverified", {}, ""}, unary_infer, unary_lower),
      op("tanh", "elementwise", un, kEw, {"[C]", {}, ""}, unary_infer, unary_lower),
      // activations
      op("sigmoid", "activation", un, kEw, {"[C]", {}, ""}, unary_infer, unary_lower),
      op("relu", "activation", un, kEw, {"[S]", {}, ""}, unary_infer, unary_lower),
      op("silu", "activation", un, kEw, {"[S]", {}, "x * sigmoid(x) (treated as unsupported)"}, unary_infer, unary_lower),
      op("gelu", "activation", ps({{"x", T}, {"mode?", STR}}), kEw, {"[X]", {"C10"}, kGelu}, gelu_infer, gelu_lower),
      op("clip", "activation", ps({{"x", T}, {"alpha", F}, {"beta", F}}), kEw, {"unverified", {}, ""}, clip_infer, clip_lower),
      op("softmax", "activation", ps({{"x", T}, {"axis?", I32}}), "like(x)", {"[C]", {"C21"}, ""}, softmax_infer, softmax_lower),
      // reductions and normalisation
      op("reduce_sum", "reduction", red, rd, {"[C]", {}, ""}, reduce_infer, reduce_lower),
      op("reduce_mean", "reduction", red, rd, {"[X]", {"C27"}, "reduce_sum * (1/N)"}, reduce_infer, reduce_lower),
      op("reduce_max", "reduction", red, rd, {"unverified", {}, ""}, reduce_infer, reduce_lower),
      op("reduce_min", "reduction", red, rd, {"unverified", {}, ""}, reduce_infer, reduce_lower),
      op("reduce_prod", "reduction", red, rd, {"unverified", {}, ""}, reduce_infer, reduce_lower),
      op("layer_norm", "normalization", ps({{"x", T}, {"axes?", I32V}, {"gamma?", T}, {"beta?", T}, {"epsilon?", F}}),
         "like(x)", {"[S]", {"C38"}, ""}, layer_norm_infer, layer_norm_lower),
      // tensor transformation: shape / layout / indexing
      op("reshape", "tensor_transformation", ps({{"x", T}, {"shape", I32V}}), "reshape(x, shape)", {"[C]", {}, ""},
         reshape_infer, reshape_lower),
      op("transpose", "tensor_transformation", ps({{"x", T}, {"perm", I32V}}), "permute(x, perm)", {"[C]", {}, ""},
         transpose_infer, transpose_lower),
      op("cast", "elementwise", ps({{"x", T}, {"dtype", STR}}), "elementwise(x), dtype from dtype", {"[C]", {"C28"}, ""},
         cast_infer, cast_lower),
      op("slice_by_index", "tensor_transformation",
         ps({{"x", T}, {"begin", I32V}, {"end", I32V}, {"stride?", I32V}, {"begin_mask?", "const bool[]"},
             {"end_mask?", "const bool[]"}, {"squeeze_mask?", "const bool[]"}}),
         "slice(x, begin, end, stride)", {"[C]", {"C34"}, ""}, slice_by_index_infer, slice_by_index_lower),
      op("slice_by_size", "tensor_transformation", ps({{"x", T}, {"begin", I32V}, {"size", I32V}}),
         "slice(x, begin, size)", {"[C]", {"C35"}, ""}, slice_by_size_infer, slice_by_size_lower),
      op("concat", "tensor_transformation", ps({{"values", "tuple<tensor>"}, {"axis", I32}, {"interleave?", B}}),
         "concat(values, axis)", {"[X]", {"C01"}, ""}, concat_infer, concat_lower),
      op("split", "tensor_transformation", ps({{"x", T}, {"axis", I32}, {"num_splits?", I32}, {"split_sizes?", I32V}}),
         "split(x, axis): one part", {"unverified", {}, ""}, split_infer, split_lower),
      op("identity", "tensor_transformation", un, kEw, {"[C]", {"C17"}, ""}, identity_infer, identity_lower),
      op("gather", "tensor_transformation",
         ps({{"x", T}, {"indices", "tensor<int>"}, {"axis?", I32}, {"batch_dims?", I32}, {"validate_indices?", B}}),
         "x.shape[:axis] + indices.shape + x.shape[axis+1:]", {"[S]", {}, ""}, gather_infer, gather_lower),
      op("select", "elementwise", ps({{"cond", "tensor<bool>"}, {"a", T}, {"b", T}}), "broadcast(cond, a, b), dtype of a",
         {"unverified", {"C39"}, ""}, select_infer, select_lower),
      op("band_part", "tensor_transformation", ps({{"x", T}, {"lower?", I32}, {"upper?", I32}}), "like(x)",
         {"unverified", {}, ""}, band_part_infer, band_part_lower),
      // quantisation
      op("quantize", "quantization",
         ps({{"input", T}, {"scale", "const tensor<fp>"}, {"output_dtype", STR}, {"zero_point?", "const tensor<int8|uint8>"},
             {"axis?", I32}}),
         "shape of input, dtype output_dtype", {"[S]", {}, ""}, quantize_infer, quantize_lower),
      op("dequantize", "quantization",
         ps({{"input", "tensor<int8|uint8>"}, {"scale", "const tensor<fp>"}, {"zero_point?", "const tensor<int8|uint8>"},
             {"axis?", I32}}),
         "shape of input, dtype of scale", {"[S]", {}, ""}, dequantize_infer, dequantize_lower),
  };
}

}  // namespace

const std::vector<OpDef>& registry() {
  static const std::vector<OpDef> ops = make_registry();
  return ops;
}

const OpDef* find_op(const std::string& name) {
  static const std::unordered_map<std::string, const OpDef*> by_name = [] {  // once per node the IR builds
    std::unordered_map<std::string, const OpDef*> m;
    for (const auto& d : registry()) m.emplace(d.name, &d);
    return m;
  }();
  auto it = by_name.find(name);
  return it == by_name.end() ? nullptr : it->second;
}

}  // namespace orion::sim::ops
