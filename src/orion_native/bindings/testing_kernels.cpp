// Test-only hooks into single CPU kernels and the thread pool (_native.testing.*, not orion's API): tests
// and benchmarks compare each kernel with numpy and force an ISA. Kernels run with the GIL released.
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "bindings/bindings.h"
#include "bindings/half_arrays.h"
#include "cpu/kernels/kernels.h"
#include "cpu/threadpool.h"

namespace orion::bindings {
namespace {

namespace k = orion::cpu::kernels;

std::vector<size_t> shape_of(const HArr& a) {
  std::vector<size_t> s(a.ndim());
  for (size_t i = 0; i < a.ndim(); ++i) s[i] = a.shape(i);
  return s;
}

k::Binary binary_op(const std::string& s) {
  static const std::pair<const char*, k::Binary> t[] = {
      {"add", k::Binary::add}, {"sub", k::Binary::sub}, {"mul", k::Binary::mul}, {"div", k::Binary::div},
      {"pow", k::Binary::pow}, {"maximum", k::Binary::maximum}, {"minimum", k::Binary::minimum}};
  for (auto& [n, v] : t)
    if (s == n) return v;
  throw std::invalid_argument("unknown binary op " + s);
}

k::Unary unary_op(const std::string& s) {
  static const std::pair<const char*, k::Unary> t[] = {
      {"exp", k::Unary::exp},         {"log", k::Unary::log},
      {"sqrt", k::Unary::sqrt},       {"rsqrt", k::Unary::rsqrt},
      {"tanh", k::Unary::tanh},       {"sigmoid", k::Unary::sigmoid},
      {"relu", k::Unary::relu},       {"neg", k::Unary::neg},
      {"abs", k::Unary::abs},         {"square", k::Unary::square},
      {"reciprocal", k::Unary::reciprocal}, {"silu", k::Unary::silu},
      {"gelu_tanh", k::Unary::gelu_tanh},   {"gelu_exact", k::Unary::gelu_exact},
      {"identity", k::Unary::identity}};
  for (auto& [n, v] : t)
    if (s == n) return v;
  throw std::invalid_argument("unknown unary op " + s);
}

k::Reduce reduce_op(const std::string& s) {
  static const std::pair<const char*, k::Reduce> t[] = {{"sum", k::Reduce::sum},   {"mean", k::Reduce::mean},
                                                         {"max", k::Reduce::max},   {"min", k::Reduce::min},
                                                         {"prod", k::Reduce::prod}, {"sum_square", k::Reduce::sum_square}};
  for (auto& [n, v] : t)
    if (s == n) return v;
  throw std::invalid_argument("unknown reduce op " + s);
}

// [outer, axis_len, inner] view of a contiguous array around `axis`.
void split_axis(const HArr& x, int axis, int64_t* outer, int64_t* len, int64_t* inner) {
  int nd = (int)x.ndim();
  if (axis < 0) axis += nd;
  if (axis < 0 || axis >= nd) throw std::invalid_argument("axis out of range");
  *outer = *inner = 1;
  for (int i = 0; i < axis; ++i) *outer *= (int64_t)x.shape(i);
  for (int i = axis + 1; i < nd; ++i) *inner *= (int64_t)x.shape(i);
  *len = (int64_t)x.shape(axis);
}

// numpy-style broadcasting of two arrays (any strides, in elements).
nb::object binary(const std::string& op, const HArr& a, const HArr& b) {
  k::Binary bop = binary_op(op);
  size_t nd = std::max(a.ndim(), b.ndim());
  if (nd > 5) throw std::invalid_argument("binary: rank > 5");
  std::vector<int64_t> shape(nd), as(nd, 0), bs(nd, 0);
  for (size_t i = 0; i < nd; ++i) {
    int ia = (int)i - (int)(nd - a.ndim()), ib = (int)i - (int)(nd - b.ndim());
    int64_t da = ia >= 0 ? (int64_t)a.shape(ia) : 1, db = ib >= 0 ? (int64_t)b.shape(ib) : 1;
    if (da != db && da != 1 && db != 1) throw std::invalid_argument("binary: shapes do not broadcast");
    shape[i] = std::max(da, db);
    if (da == 0 || db == 0) shape[i] = 0;
    as[i] = (ia >= 0 && da != 1) ? a.stride(ia) : 0;
    bs[i] = (ib >= 0 && db != 1) ? b.stride(ib) : 0;
  }
  std::vector<size_t> oshape(shape.begin(), shape.end());
  half_t* c;
  auto out = new_array<half_t>(oshape, &c);
  {
    nb::gil_scoped_release nogil;
    k::binary(bop, hp(a), as, hp(b), bs, reinterpret_cast<f16*>(c), shape);
  }
  return nb::cast(out);
}

nb::object unary(const std::string& op, const HArr& x, float param, bool inplace) {
  require_contig(x, "unary");
  k::Unary uop = unary_op(op);
  size_t n = x.size();
  if (inplace) {  // writes into x (tests in-place aliasing)
    f16* p = const_cast<f16*>(hp(x));
    nb::gil_scoped_release nogil;
    k::unary(uop, p, p, n, param);
    return nb::none();
  }
  half_t* y;
  auto out = new_array<half_t>(shape_of(x), &y);
  {
    nb::gil_scoped_release nogil;
    k::unary(uop, hp(x), reinterpret_cast<f16*>(y), n, param);
  }
  return nb::cast(out);
}

template <typename Fn>
nb::object map_f16(const HArr& x, Fn fn) {
  require_contig(x, "kernel");
  half_t* y;
  auto out = new_array<half_t>(shape_of(x), &y);
  {
    nb::gil_scoped_release nogil;
    fn(hp(x), reinterpret_cast<f16*>(y), x.size());
  }
  return nb::cast(out);
}

nb::object reduce(const std::string& op, const HArr& x, int axis) {
  require_contig(x, "reduce");
  k::Reduce rop = reduce_op(op);
  int64_t outer, len, inner;
  split_axis(x, axis, &outer, &len, &inner);
  std::vector<size_t> shape = shape_of(x);
  shape.erase(shape.begin() + (axis < 0 ? axis + (int)x.ndim() : axis));
  half_t* y;
  auto out = new_array<half_t>(shape, &y);
  {
    nb::gil_scoped_release nogil;
    k::reduce(rop, hp(x), reinterpret_cast<f16*>(y), outer, len, inner);
  }
  return nb::cast(out);
}

nb::object softmax(const HArr& x, int axis) {
  require_contig(x, "softmax");
  int64_t outer, len, inner;
  split_axis(x, axis, &outer, &len, &inner);
  half_t* y;
  auto out = new_array<half_t>(shape_of(x), &y);
  {
    nb::gil_scoped_release nogil;
    k::softmax(hp(x), reinterpret_cast<f16*>(y), outer, len, inner);
  }
  return nb::cast(out);
}

// y[idx] = flat(x)[offset + sum idx_i * strides_i] over `shape` (x contiguous, bounds checked here).
nb::object strided_copy(const AnyArr& x, int64_t offset, const std::vector<int64_t>& strides,
                        const std::vector<int64_t>& shape) {
  if (strides.size() != shape.size()) throw std::invalid_argument("strided_copy: rank mismatch");
  int64_t lo = offset, hi = offset, total = (int64_t)x.size();
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] <= 0) continue;
    int64_t ext = (shape[i] - 1) * strides[i];
    (ext < 0 ? lo : hi) += ext;
  }
  if (lo < 0 || hi >= total) throw std::out_of_range("strided_copy: out of bounds");
  std::vector<size_t> ys(shape.begin(), shape.end());
  void* y;
  nb::object out = new_like(x, ys, &y);
  {
    nb::gil_scoped_release nogil;
    k::strided_copy(x.data(), y, x.itemsize(), offset, strides, shape);
  }
  return out;
}

}  // namespace

void bind_testing_kernels(nb::module_& t) {
  t.def("binary", &binary, nb::arg("op"), nb::arg("a").noconvert(), nb::arg("b").noconvert());
  t.def("unary", &unary, nb::arg("op"), nb::arg("x").noconvert(), nb::arg("param") = 0.0f,
        nb::arg("inplace") = false);
  t.def("clip",
      [](const HArr& x, float lo, float hi) {
        return map_f16(x, [&](const f16* a, f16* b, size_t n) { k::clip(a, b, n, lo, hi); });
      },
      nb::arg("x").noconvert(), nb::arg("lo"), nb::arg("hi"));
  t.def("scale_bias",
      [](const HArr& x, float scale, float bias) {
        return map_f16(x, [&](const f16* a, f16* b, size_t n) { k::scale_bias(a, b, n, scale, bias); });
      },
      nb::arg("x").noconvert(), nb::arg("scale"), nb::arg("bias"));
  t.def("reduce", &reduce, nb::arg("op"), nb::arg("x").noconvert(), nb::arg("axis"));
  t.def("softmax", &softmax, nb::arg("x").noconvert(), nb::arg("axis") = -1);
  t.def("strided_copy", &strided_copy, nb::arg("x").noconvert(), nb::arg("offset"), nb::arg("strides"),
        nb::arg("shape"));
  t.def("force_isa", [](const std::string& name) { return k::force_isa(name.c_str()); }, nb::arg("name"),
        "'scalar', 'avx2', 'avx512', 'neon' or 'best'; False if not supported here");
  t.def("parallel_for_test",
      [](int64_t n, int64_t grain, bool throw_at_half) {
        // Returns how many items ran; optionally throws from inside a chunk (exception propagation).
        std::vector<int> hits((size_t)n, 0);
        {
          nb::gil_scoped_release nogil;
          orion::cpu::parallel_for(n, grain, [&](int64_t b, int64_t e) {
            for (int64_t i = b; i < e; ++i) {
              if (throw_at_half && i == n / 2) throw std::runtime_error("boom");
              orion::cpu::parallel_for(4, 1, [&](int64_t, int64_t) {});  // nested: inline
              hits[(size_t)i] += 1;
            }
          });
        }
        int64_t ok = 0;
        for (int h : hits) ok += (h == 1);
        return ok;
      },
      nb::arg("n"), nb::arg("grain") = 1, nb::arg("throw_at_half") = false);
}

}  // namespace orion::bindings
