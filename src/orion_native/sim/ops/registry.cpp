// The single list of ops the simulator knows (mil-dialect.md §4): MIL parameter names as in the
// coremltools 9.0 registry (required first, "?" = optional) and the family functions implementing them.
#include "sim/ops/op.h"

namespace orion::sim::ops {

const std::vector<OpDef>& registry() {
  static const std::vector<OpDef> ops = {
      {"const", {"val"}, true, const_infer, nullptr},
      {"constexpr_affine_dequantize", {"quantized_data", "zero_point", "scale", "axis"}, true,
       constexpr_affine_dequantize_infer, nullptr},
      // convolution / contraction
      {"conv", {"x", "weight", "bias?", "strides?", "pad_type?", "pad?", "dilations?", "groups?"}, false, conv_infer, conv_lower},
      {"matmul", {"x", "y", "transpose_x?", "transpose_y?"}, false, matmul_infer, matmul_lower},
      {"scaled_dot_product_attention", {"query", "key", "value", "attn_mask?"}, false, sdpa_infer, sdpa_lower},
      // element-wise binary (numpy broadcasting)
      {"add", {"x", "y"}, false, binary_infer, binary_lower},
      {"sub", {"x", "y"}, false, binary_infer, binary_lower},
      {"mul", {"x", "y"}, false, binary_infer, binary_lower},
      {"real_div", {"x", "y"}, false, binary_infer, binary_lower},
      {"pow", {"x", "y"}, false, binary_infer, binary_lower},
      {"maximum", {"x", "y"}, false, binary_infer, binary_lower},
      {"minimum", {"x", "y"}, false, binary_infer, binary_lower},
      // element-wise unary
      {"sqrt", {"x"}, false, unary_infer, unary_lower},
      {"rsqrt", {"x", "epsilon?"}, false, unary_infer, unary_lower},
      {"exp", {"x"}, false, unary_infer, unary_lower},
      {"log", {"x", "epsilon?"}, false, unary_infer, unary_lower},
      {"tanh", {"x"}, false, unary_infer, unary_lower},
      {"sigmoid", {"x"}, false, unary_infer, unary_lower},
      {"relu", {"x"}, false, unary_infer, unary_lower},
      {"silu", {"x"}, false, unary_infer, unary_lower},
      {"gelu", {"x", "mode?"}, false, gelu_infer, gelu_lower},
      {"clip", {"x", "alpha", "beta"}, false, clip_infer, clip_lower},
      // reductions and normalisation
      {"reduce_sum", {"x", "axes?", "keep_dims?"}, false, reduce_infer, reduce_lower},
      {"reduce_mean", {"x", "axes?", "keep_dims?"}, false, reduce_infer, reduce_lower},
      {"reduce_max", {"x", "axes?", "keep_dims?"}, false, reduce_infer, reduce_lower},
      {"reduce_min", {"x", "axes?", "keep_dims?"}, false, reduce_infer, reduce_lower},
      {"reduce_prod", {"x", "axes?", "keep_dims?"}, false, reduce_infer, reduce_lower},
      {"softmax", {"x", "axis?"}, false, softmax_infer, softmax_lower},
      {"layer_norm", {"x", "axes?", "gamma?", "beta?", "epsilon?"}, false, layer_norm_infer, layer_norm_lower},
      // shape / layout
      {"reshape", {"x", "shape"}, false, reshape_infer, reshape_lower},
      {"transpose", {"x", "perm"}, false, transpose_infer, transpose_lower},
      {"cast", {"x", "dtype"}, false, cast_infer, cast_lower},
      {"slice_by_index", {"x", "begin", "end", "stride?", "begin_mask?", "end_mask?", "squeeze_mask?"}, false,
       slice_by_index_infer, slice_by_index_lower},
      {"slice_by_size", {"x", "begin", "size"}, false, slice_by_size_infer, slice_by_size_lower},
      {"concat", {"values", "axis", "interleave?"}, false, concat_infer, concat_lower},
      {"split", {"x", "axis", "num_splits?", "split_sizes?"}, false, split_infer, split_lower},
      {"identity", {"x"}, false, identity_infer, identity_lower},
      // indexing / masking
      {"gather", {"x", "indices", "axis?", "batch_dims?", "validate_indices?"}, false, gather_infer, gather_lower},
      {"select", {"cond", "a", "b"}, false, select_infer, select_lower},
      {"band_part", {"x", "lower?", "upper?"}, false, band_part_infer, band_part_lower},
      // quantisation
      {"quantize", {"input", "scale", "output_dtype", "zero_point?", "axis?"}, false, quantize_infer, quantize_lower},
      {"dequantize", {"input", "scale", "zero_point?", "axis?"}, false, dequantize_infer, dequantize_lower},
  };
  return ops;
}

const OpDef* find_op(const std::string& name) {
  for (const auto& d : registry()) if (d.name == name) return &d;
  return nullptr;
}

}  // namespace orion::sim::ops
