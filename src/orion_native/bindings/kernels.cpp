// Underscore-prefixed test/benchmark hooks over sim/kernels (not public API). numpy float16 arrays
// cross zero-copy through a 16-bit storage type; inputs may be strided views (leading dimensions),
// outputs are fresh dense arrays. Kernels run with the GIL released.
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "bindings/bindings.h"
#include "cpu/kernels/kernels.h"
#include "cpu/threadpool.h"

namespace orion::bindings {
struct half_t {
  uint16_t bits;
};
}  // namespace orion::bindings

namespace nanobind::detail {
template <>
struct dtype_traits<orion::bindings::half_t> {
  static constexpr dlpack::dtype value{(uint8_t)dlpack::dtype_code::Float, 16, 1};
  static constexpr auto name = const_name("float16");
};
}  // namespace nanobind::detail

namespace orion::bindings {
namespace {

namespace k = orion::cpu::kernels;
using HArr = nb::ndarray<const half_t, nb::device::cpu>;
using FArr = nb::ndarray<const float, nb::device::cpu>;
using AnyArr = nb::ndarray<nb::device::cpu>;

template <typename T>
nb::ndarray<nb::numpy, T> new_array(const std::vector<size_t>& shape, T** data) {
  size_t n = 1;
  for (size_t s : shape) n *= s;
  T* p = new T[n ? n : 1];
  *data = p;
  nb::capsule owner(p, [](void* q) noexcept { delete[] static_cast<T*>(q); });
  return nb::ndarray<nb::numpy, T>(p, shape.size(), shape.data(), owner);
}

const f16* hp(const HArr& a) { return reinterpret_cast<const f16*>(a.data()); }

std::vector<size_t> shape_of(const HArr& a) {
  std::vector<size_t> s(a.ndim());
  for (size_t i = 0; i < a.ndim(); ++i) s[i] = a.shape(i);
  return s;
}

bool contiguous(const HArr& a) {
  int64_t s = 1;
  for (size_t i = a.ndim(); i-- > 0;) {
    if (a.shape(i) != 1 && a.stride(i) != s) return false;
    s *= (int64_t)a.shape(i);
  }
  return true;
}

void require_contig(const HArr& a, const char* what) {
  if (!contiguous(a)) throw std::invalid_argument(std::string(what) + ": array must be C-contiguous");
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

// A 2-D or 3-D operand: rows may be padded (leading dimension = row stride), inner stride must be 1.
struct Operand {
  int64_t batch, rows, cols, ld, bstride;
};
Operand operand(const HArr& a, const char* what) {
  if (a.ndim() != 2 && a.ndim() != 3) throw std::invalid_argument(std::string(what) + ": must be 2-D or 3-D");
  int o = (int)a.ndim() - 2;
  Operand r{o ? (int64_t)a.shape(0) : 1, (int64_t)a.shape(o), (int64_t)a.shape(o + 1), a.stride(o),
            o ? a.stride(0) : 0};
  if (a.stride(o + 1) != 1 && r.cols > 1 && r.rows > 0) throw std::invalid_argument(std::string(what) + ": inner stride must be 1");
  if (r.rows <= 1) r.ld = std::max<int64_t>(r.ld, r.cols);
  return r;
}

nb::object gemm(const HArr& a, const HArr& b, bool trans_a, bool trans_b, bool f32_out, int64_t ldc_pad) {
  Operand A = operand(a, "a"), B = operand(b, "b");
  int64_t batch = std::max(A.batch, B.batch);
  if ((A.batch != batch && A.batch != 1) || (B.batch != batch && B.batch != 1))
    throw std::invalid_argument("gemm: batch mismatch");
  k::GemmShape g;
  g.trans_a = trans_a;
  g.trans_b = trans_b;
  g.M = trans_a ? A.cols : A.rows;
  g.K = trans_a ? A.rows : A.cols;
  int64_t kb = trans_b ? B.cols : B.rows;
  g.N = trans_b ? B.rows : B.cols;
  if (kb != g.K) throw std::invalid_argument("gemm: inner dimensions differ");
  g.lda = A.ld;
  g.ldb = B.ld;
  g.ldc = g.N + std::max<int64_t>(ldc_pad, 0);
  std::vector<size_t> shape;
  if (a.ndim() == 3 || b.ndim() == 3) shape.push_back((size_t)batch);
  shape.push_back((size_t)g.M);
  shape.push_back((size_t)g.ldc);
  std::vector<const f16*> pa(batch), pb(batch);
  for (int64_t i = 0; i < batch; ++i) {
    pa[i] = hp(a) + (A.batch > 1 ? i * A.bstride : 0);
    pb[i] = hp(b) + (B.batch > 1 ? i * B.bstride : 0);
  }
  size_t per = (size_t)(g.M * g.ldc);
  if (f32_out) {
    float* c;
    auto out = new_array<float>(shape, &c);
    std::memset(c, 0xff, per * batch * sizeof(float));  // padding sentinel (NaN)
    std::vector<float*> pc(batch);
    for (int64_t i = 0; i < batch; ++i) pc[i] = c + i * per;
    {
      nb::gil_scoped_release nogil;
      k::gemm_f16_f32out(g, batch, pa.data(), pb.data(), pc.data());
    }
    return nb::cast(out);
  }
  half_t* c;
  auto out = new_array<half_t>(shape, &c);
  std::memset(c, 0xff, per * batch * sizeof(half_t));
  std::vector<f16*> pc(batch);
  for (int64_t i = 0; i < batch; ++i) pc[i] = reinterpret_cast<f16*>(c) + i * per;
  {
    nb::gil_scoped_release nogil;
    k::gemm_f16(g, batch, pa.data(), pb.data(), pc.data());
  }
  return nb::cast(out);
}

// C [P * 16, N] = A @ b with A given as its 16-row panels [P, K, 16] (row 16 p + r of A at k is
// panels[p, k, r]): the packed layout the simulator streams for constant weights, here owned by the
// caller (the engine's CPU classifier), so a matrix-vector product runs the multi-panel route.
// trans_out: C^T [N, P * 16] written directly (the classifier's logits, one row per column: a transposing
// copy of a [V, 16] fp32 result cost ~2 ms per batched decode step).
nb::object gemm_panels(const HArr& panels, const HArr& b, bool f32_out, bool trans_out) {
  if (panels.ndim() != 3 || panels.shape(2) != 16)
    throw std::invalid_argument("gemm_panels_f16: panels must be [P, K, 16]");
  require_contig(panels, "gemm_panels_f16: panels");
  Operand B = operand(b, "b");
  if (b.ndim() != 2) throw std::invalid_argument("gemm_panels_f16: b must be 2-D [K, N]");
  k::PackedA pa;
  pa.M = (int64_t)panels.shape(0) * 16;
  pa.K = (int64_t)panels.shape(1);
  pa.view = hp(panels);
  if (B.rows != pa.K) throw std::invalid_argument("gemm_panels_f16: inner dimensions differ");
  k::GemmShape g;
  g.N = B.cols;
  g.ldb = B.ld;
  g.ldc = trans_out ? pa.M : g.N;
  std::vector<size_t> shape{(size_t)pa.M, (size_t)g.N};
  if (trans_out) std::swap(shape[0], shape[1]);
  const f16* pb = hp(b);
  if (f32_out) {
    float* c;
    auto out = new_array<float>(shape, &c);
    {
      nb::gil_scoped_release nogil;
      k::gemm_packed_f16(pa, g, 1, &pb, &c, trans_out);
    }
    return nb::cast(out);
  }
  half_t* c;
  auto out = new_array<half_t>(shape, &c);
  f16* pc = reinterpret_cast<f16*>(c);
  {
    nb::gil_scoped_release nogil;
    k::gemm_packed_f16(pa, g, 1, &pb, &pc, trans_out);
  }
  return nb::cast(out);
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

// Generic-dtype result array of the same dtype as `like`.
nb::object new_like(const AnyArr& like, const std::vector<size_t>& shape, void** data) {
  size_t n = 1, es = like.itemsize();
  for (size_t s : shape) n *= s;
  uint8_t* p = new uint8_t[(n ? n : 1) * es];
  *data = p;
  nb::capsule owner(p, [](void* q) noexcept { delete[] static_cast<uint8_t*>(q); });
  return nb::cast(nb::ndarray<nb::numpy>(p, shape.size(), shape.data(), owner, nullptr, like.dtype()));
}

nb::object transpose(const AnyArr& x, const std::vector<int64_t>& perm) {
  int64_t s = 1;
  for (size_t i = x.ndim(); i-- > 0;) {
    if (x.shape(i) != 1 && x.stride(i) != s) throw std::invalid_argument("transpose: array must be C-contiguous");
    s *= (int64_t)x.shape(i);
  }
  std::vector<int64_t> xs(x.ndim());
  std::vector<size_t> ys(x.ndim());
  for (size_t i = 0; i < x.ndim(); ++i) xs[i] = (int64_t)x.shape(i);
  if (perm.size() != x.ndim()) throw std::invalid_argument("transpose: perm length");
  for (size_t i = 0; i < perm.size(); ++i) {
    if (perm[i] < 0 || perm[i] >= (int64_t)x.ndim()) throw std::invalid_argument("transpose: bad perm");
    ys[i] = x.shape((size_t)perm[i]);
  }
  void* y;
  nb::object out = new_like(x, ys, &y);
  {
    nb::gil_scoped_release nogil;
    k::transpose(x.data(), y, x.itemsize(), xs, perm);
  }
  return out;
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

nb::object convert(const AnyArr& x) {
  int64_t s = 1;
  for (size_t i = x.ndim(); i-- > 0;) {
    if (x.shape(i) != 1 && x.stride(i) != s) throw std::invalid_argument("convert: array must be C-contiguous");
    s *= (int64_t)x.shape(i);
  }
  std::vector<size_t> shape(x.ndim());
  for (size_t i = 0; i < x.ndim(); ++i) shape[i] = x.shape(i);
  if (x.dtype() == nb::dtype<half_t>()) {
    float* y;
    auto out = new_array<float>(shape, &y);
    {
      nb::gil_scoped_release nogil;
      k::f16_to_f32(static_cast<const f16*>(x.data()), y, x.size());
    }
    return nb::cast(out);
  }
  if (x.dtype() == nb::dtype<float>()) {
    half_t* y;
    auto out = new_array<half_t>(shape, &y);
    {
      nb::gil_scoped_release nogil;
      k::f32_to_f16(static_cast<const float*>(x.data()), reinterpret_cast<f16*>(y), x.size());
    }
    return nb::cast(out);
  }
  throw std::invalid_argument("convert: expects float16 or float32");
}

}  // namespace

void bind_kernels(nb::module_& m, nb::module_& t) {
  // Product entry points (the Python layer's CPU-side fp16 math, the thread pool); the hooks that tests and
  // benchmarks use to reach single kernels are in the `testing` submodule.
  m.def("gemm_f16", &gemm, nb::arg("a").noconvert(), nb::arg("b").noconvert(), nb::arg("trans_a") = false,
        nb::arg("trans_b") = false, nb::arg("f32_out") = false, nb::arg("ldc_pad") = 0,
        "C = op(a) @ op(b) on fp16 arrays (2-D or 3-D; batch 1 broadcasts) with the simulator's GEMM: fp32 "
        "accumulation, one rounding (or fp32 output with f32_out).");
  m.def("gemm_panels_f16", &gemm_panels, nb::arg("panels").noconvert(), nb::arg("b").noconvert(),
        nb::arg("f32_out") = false, nb::arg("trans_out") = false,
        "C [16 P, N] = A @ b with A as its 16-row panels [P, K, 16] (k-major per panel; C-contiguous): the "
        "simulator's packed-weight GEMM, same results as gemm_f16 on A. trans_out: C^T [N, 16 P] instead.");
  m.def("convert_fp", &convert, nb::arg("x").noconvert(),
        "float16 -> float32 or float32 -> float16 (round to nearest even), vectorised.");
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
  t.def("transpose", &transpose, nb::arg("x").noconvert(), nb::arg("perm"));
  t.def("strided_copy", &strided_copy, nb::arg("x").noconvert(), nb::arg("offset"), nb::arg("strides"),
        nb::arg("shape"));
  m.def("kernel_isa", [] { return std::string(k::isa_name()); }, "The SIMD kernel table in use: avx512, avx2, neon or scalar.");
  t.def("force_isa", [](const std::string& name) { return k::force_isa(name.c_str()); }, nb::arg("name"),
        "'scalar', 'avx2', 'avx512', 'neon' or 'best'; False if not supported here");
  m.def("set_num_threads", [](int n) { orion::cpu::set_num_threads(n); }, nb::arg("n"),
        "Threads of the simulator's pool (kernels and plan execution).");
  m.def("num_threads", [] { return orion::cpu::num_threads(); });
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
