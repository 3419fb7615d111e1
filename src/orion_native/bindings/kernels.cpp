// Product entry points over the CPU kernels (cpu/): the Python layer's fp16 math (GEMM for the engine's
// CPU classifier and passes, fp16 <-> fp32 conversion) and the thread pool. Inputs may be strided views
// (leading dimensions); outputs are fresh dense arrays. Kernels run with the GIL released. The hooks
// tests and benchmarks use to reach single kernels are in testing_kernels.cpp (_native.testing).
#include <nanobind/ndarray.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "bindings/bindings.h"
#include "bindings/half_arrays.h"
#include "cpu/kernels/compressed.h"
#include "cpu/kernels/kernels.h"
#include "cpu/threadpool.h"

namespace orion::bindings {
namespace {

namespace k = orion::cpu::kernels;

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

// C = A b for a packed A (caller-owned panels, or a compressed weight's) as [16 ceil(M / 16), N] (or its transpose):
// rows past A's M - a compressed weight's last panel's padding - are zero, as they are in padded panels.
template <typename T>
void packed_product_into(const k::PackedA& pa, const k::GemmShape& g, const f16* pb, T* c, int64_t rows, bool trans_out) {
  nb::gil_scoped_release nogil;
  if (rows > pa.M) {
    if (!trans_out) std::fill(c + pa.M * g.N, c + rows * g.N, T{});
    else for (int64_t j = 0; j < g.N; ++j) std::fill(c + j * rows + pa.M, c + (j + 1) * rows, T{});
  }
  k::gemm_packed_f16(pa, g, 1, &pb, &c, trans_out);
}

nb::object packed_product(const k::PackedA& pa, const HArr& b, bool f32_out, bool trans_out) {
  Operand B = operand(b, "b");
  if (b.ndim() != 2) throw std::invalid_argument("gemm_panels_f16: b must be 2-D [K, N]");
  if (B.rows != pa.K) throw std::invalid_argument("gemm_panels_f16: inner dimensions differ");
  const int64_t rows = (pa.M + 15) / 16 * 16;
  k::GemmShape g;
  g.N = B.cols;
  g.ldb = B.ld;
  g.ldc = trans_out ? rows : g.N;
  std::vector<size_t> shape{(size_t)rows, (size_t)g.N};
  if (trans_out) std::swap(shape[0], shape[1]);
  if (f32_out) {
    float* c;
    auto out = new_array<float>(shape, &c);
    packed_product_into(pa, g, hp(b), c, rows, trans_out);
    return nb::cast(out);
  }
  half_t* c;
  auto out = new_array<half_t>(shape, &c);
  packed_product_into(pa, g, hp(b), reinterpret_cast<f16*>(c), rows, trans_out);
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
  k::PackedA pa;
  pa.M = (int64_t)panels.shape(0) * 16;
  pa.K = (int64_t)panels.shape(1);
  pa.view = hp(panels);
  return packed_product(pa, b, f32_out, trans_out);
}

using F32In = nb::ndarray<const float, nb::ndim<2>, nb::device::cpu>;
using F32Out = nb::ndarray<float, nb::ndim<2>, nb::device::cpu>;

// A 2-D fp32 operand as (transposed?, leading dimension): rows contiguous (a C-order array or a row slice)
// or columns contiguous (the transpose of one: numpy's .T, read in place).
std::pair<bool, int64_t> f32_layout(const F32In& a, const char* what) {
  int64_t r = (int64_t)a.shape(0), c = (int64_t)a.shape(1);
  if (a.stride(1) == 1 || c <= 1) return {false, std::max<int64_t>(r > 1 ? a.stride(0) : c, c)};
  if (a.stride(0) == 1 || r <= 1) return {true, std::max<int64_t>(c > 1 ? a.stride(1) : r, r)};
  throw std::invalid_argument(std::string("gemm_f32: ") + what + " must have contiguous rows or columns");
}

void gemm_f32(const F32In& a, const F32In& b, F32Out& out) {
  auto [ta, lda] = f32_layout(a, "a");
  auto [tb, ldb] = f32_layout(b, "b");
  k::GemmShape g;
  g.M = (int64_t)a.shape(0);
  g.K = (int64_t)a.shape(1);
  g.N = (int64_t)b.shape(1);
  if ((int64_t)b.shape(0) != g.K) throw std::invalid_argument("gemm_f32: inner dimensions differ");
  if ((int64_t)out.shape(0) != g.M || (int64_t)out.shape(1) != g.N)
    throw std::invalid_argument("gemm_f32: out must be [a rows, b columns]");
  if (out.stride(1) != 1 && g.N > 1) throw std::invalid_argument("gemm_f32: out rows must be contiguous");
  g.trans_a = ta;
  g.trans_b = tb;
  g.lda = lda;
  g.ldb = ldb;
  g.ldc = std::max<int64_t>(g.M > 1 ? out.stride(0) : g.N, g.N);
  nb::gil_scoped_release nogil;
  k::gemm_f32(g, a.data(), b.data(), out.data());
}

using F32Flat = nb::ndarray<float, nb::device::cpu, nb::c_contig>;
using F32FlatIn = nb::ndarray<const float, nb::device::cpu, nb::c_contig>;

void adamw_update(F32Flat& p, const F32FlatIn& g, F32Flat& m, F32Flat& v, float b1, float b2, float ga, float gb,
                  float k, float eps, float decay) {
  size_t n = p.size();
  if (g.size() != n || m.size() != n || v.size() != n)
    throw std::invalid_argument("adamw_update: p, g, m and v must have the same number of elements");
  k::AdamWCoef c{b1, b2, ga, gb, k, eps, decay};
  float* pp = p.data();
  float* pm = m.data();
  float* pv = v.data();
  const float* pg = g.data();
  nb::gil_scoped_release nogil;
  k::adamw_update(pp, pg, pm, pv, n, c);
}

// y = x with its dims permuted (numpy's ascontiguousarray(x.transpose(perm))) for any element size: the tiled
// transpose of cpu/kernels/layout.cpp, threaded (numpy's strided copy of a weight's fp16 panels is 2x slower).
nb::object transpose(const nb::ndarray<nb::ro, nb::device::cpu>& x, const std::vector<int64_t>& perm) {
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

// Read-only input taken too: a weight memory-mapped from the weight cache is converted in place.
nb::object convert(const nb::ndarray<nb::ro, nb::device::cpu>& x) {
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

using U8In = nb::ndarray<const uint8_t, nb::device::cpu, nb::c_contig>;
using HIn = nb::ndarray<const half_t, nb::device::cpu, nb::c_contig>;
using HOut = nb::ndarray<half_t, nb::device::cpu, nb::c_contig>;

// A compressed weight as the constexpr ops' kernels hold it (cpu/kernels/compressed.h), from its codes (one
// byte per element, row-major [M][K]) and the parameter grid: checked here, so no size is taken on trust.
std::shared_ptr<k::CompressedWeight> compressed_weight(const std::string& kind, const U8In& codes, int64_t M, int64_t K,
                                                       unsigned bits, bool is_signed, int64_t rows_per_block,
                                                       int64_t blocks_per_row, const HIn& lut, const F32FlatIn& scale,
                                                       const F32FlatIn& offset) {
  auto fail = [](const std::string& what) { throw std::invalid_argument("compressed_weight: " + what); };
  if (kind != "lut" && kind != "shift_scale") fail("kind must be 'lut' or 'shift_scale', got '" + kind + "'");
  if (bits < 1 || bits > 8) fail("bits must be 1..8, got " + std::to_string(bits));
  if (M < 1 || K < 1 || (codes.size() && (int64_t)codes.size() != M * K))
    fail("codes must hold M x K = " + std::to_string(M) + " x " + std::to_string(K) + " bytes (or none: all 0, "
         "for set_rows), got " + std::to_string(codes.size()));
  if (rows_per_block < 1 || M % rows_per_block || blocks_per_row < 1 || K % blocks_per_row)
    fail("rows_per_block must divide M and blocks_per_row must divide K");
  const int64_t blocks = M / rows_per_block * blocks_per_row;
  auto w = std::make_shared<k::CompressedWeight>();
  w->kind = kind == "lut" ? k::CompressedWeight::Kind::lut : k::CompressedWeight::Kind::shift_scale;
  w->M = M;
  w->K = K;
  w->bits = bits;
  w->is_signed = kind != "lut" && is_signed;
  w->rows_per_block = rows_per_block;
  w->blocks_per_row = blocks_per_row;
  w->cols_per_block = K / blocks_per_row;
  if (kind == "lut") {
    if ((int64_t)lut.size() != blocks << bits) fail("lut must hold " + std::to_string(blocks << bits) + " fp16 entries");
    const f16* t = reinterpret_cast<const f16*>(lut.data());
    w->lut.assign(t, t + lut.size());
  } else {
    if ((int64_t)scale.size() != blocks || (offset.size() && (int64_t)offset.size() != blocks))
      fail("scale (and offset, if any) must hold one value per block (" + std::to_string(blocks) + ")");
    w->scale.assign(scale.data(), scale.data() + scale.size());
    w->offset.assign(offset.data(), offset.data() + offset.size());
  }
  {
    nb::gil_scoped_release nogil;
    if (codes.size())
      w->set_codes(codes.data());
    else
      w->zero_codes();
  }
  return w;
}

void set_rows(k::CompressedWeight& w, int64_t row0, const U8In& codes) {
  if (codes.size() % (size_t)w.K)
    throw std::invalid_argument("set_rows: codes must hold whole rows of K = " + std::to_string(w.K) + " bytes");
  const int64_t n = (int64_t)codes.size() / w.K;
  nb::gil_scoped_release nogil;
  w.set_code_rows(row0, n, codes.data());  // checks the rows are whole panels of the weight
}

// fp16 values of shift/scale codes in their file's layout (cpu/kernels/compressed.h, shift_scale_dense): codes int8
// or uint8 [M, ...] C-contiguous, rows of K = size / M; scale (and offset, or none) float32 [M / rows_per_block,
// blocks_per_row] flattened. The result has the codes' shape.
nb::object shift_scale_f16(const nb::ndarray<nb::ro, nb::device::cpu, nb::c_contig>& codes, const F32FlatIn& scale,
                           const F32FlatIn& offset, int64_t rows_per_block, int64_t blocks_per_row) {
  auto fail = [](const std::string& what) { throw std::invalid_argument("shift_scale_f16: " + what); };
  const bool is_signed = codes.dtype() == nb::dtype<int8_t>();
  if (!is_signed && codes.dtype() != nb::dtype<uint8_t>()) fail("codes must be int8 or uint8");
  if (codes.ndim() < 1 || codes.shape(0) < 1 || codes.size() == 0) fail("codes must have at least one row");
  const int64_t M = (int64_t)codes.shape(0), K = (int64_t)codes.size() / M;
  if (rows_per_block < 1 || M % rows_per_block || blocks_per_row < 1 || K % blocks_per_row)
    fail("rows_per_block must divide the " + std::to_string(M) + " rows and blocks_per_row the row length " +
         std::to_string(K));
  const int64_t blocks = M / rows_per_block * blocks_per_row;
  if ((int64_t)scale.size() != blocks || (offset.size() && (int64_t)offset.size() != blocks))
    fail("scale (and offset, if any) must hold one value per block (" + std::to_string(blocks) + ")");
  std::vector<size_t> shape(codes.ndim());
  for (size_t i = 0; i < codes.ndim(); ++i) shape[i] = codes.shape(i);
  half_t* y;
  auto out = new_array<half_t>(shape, &y);
  {
    nb::gil_scoped_release nogil;
    k::shift_scale_dense(static_cast<const uint8_t*>(codes.data()), is_signed, M, K, scale.data(),
                         offset.size() ? offset.data() : nullptr, rows_per_block, blocks_per_row,
                         reinterpret_cast<f16*>(y));
  }
  return nb::cast(out);
}

// fp16 values of a LUT weight in its file's layout (cpu/kernels/compressed.h, lut_dense): `bits`-wide codes packed
// LSB-first, row-major [M, K]; tables fp16 [M / rows_per_table, 2^bits]. Returns [M, K].
nb::object lut_f16(const U8In& packed, unsigned bits, int64_t M, int64_t K, const HIn& lut, int64_t rows_per_table) {
  auto fail = [](const std::string& what) { throw std::invalid_argument("lut_f16: " + what); };
  if (bits < 1 || bits > 8) fail("bits must be 1..8, got " + std::to_string(bits));
  if (M < 1 || K < 1) fail("M and K must be positive");
  if ((int64_t)packed.size() != (M * K * (int64_t)bits + 7) / 8)
    fail("packed must hold ceil(M K bits / 8) = " + std::to_string((M * K * (int64_t)bits + 7) / 8) + " bytes, got " +
         std::to_string(packed.size()));
  if (rows_per_table < 1 || M % rows_per_table) fail("rows_per_table must divide M = " + std::to_string(M));
  if ((int64_t)lut.size() != (M / rows_per_table) << bits)
    fail("lut must hold " + std::to_string((M / rows_per_table) << bits) + " fp16 entries (a table per " +
         std::to_string(rows_per_table) + " rows)");
  half_t* y;
  auto out = new_array<half_t>({(size_t)M, (size_t)K}, &y);
  {
    nb::gil_scoped_release nogil;
    k::lut_dense(packed.data(), bits, M, K, reinterpret_cast<const f16*>(lut.data()), rows_per_table,
                 reinterpret_cast<f16*>(y));
  }
  return nb::cast(out);
}

// Symmetric 8-bit quantization of fp16 rows (cpu/kernels/quantize.cpp): w C-contiguous [n, d] (read-only taken:
// a mapped weight); scale float32 [n].
using HRo = nb::ndarray<nb::ro, const half_t, nb::ndim<2>, nb::device::cpu, nb::c_contig>;

nb::object absmax_rows(const HRo& w) {
  const int64_t n = (int64_t)w.shape(0), d = (int64_t)w.shape(1);
  float* y;
  auto out = new_array<float>({(size_t)n}, &y);
  {
    nb::gil_scoped_release nogil;
    k::absmax_rows_f16(reinterpret_cast<const f16*>(w.data()), n, d, y);
  }
  return nb::cast(out);
}

nb::object quantize_rows(const HRo& w, const F32FlatIn& scale) {
  const int64_t n = (int64_t)w.shape(0), d = (int64_t)w.shape(1);
  if ((int64_t)scale.size() != n) throw std::invalid_argument("quantize_rows_s8: scale must hold one value a row");
  for (int64_t r = 0; r < n; ++r)
    if (!(scale.data()[r] > 0.0f) || std::isinf(scale.data()[r]))
      throw std::invalid_argument("quantize_rows_s8: scales must be positive and finite");
  int8_t* y;
  auto out = new_array<int8_t>({(size_t)n, (size_t)d}, &y);
  {
    nb::gil_scoped_release nogil;
    k::quantize_rows_s8(reinterpret_cast<const f16*>(w.data()), n, d, scale.data(), y);
  }
  return nb::cast(out);
}

// gemm_panels_f16 with the weight read from its compressed form (a panel decoded at a time, or int8 / 4-bit LUT
// codes decoded in the GEMV's registers): the same results as on the panels of its decoded values.
nb::object gemm_compressed(std::shared_ptr<k::CompressedWeight> w, const HArr& b, bool f32_out, bool trans_out) {
  const int64_t M = w->M, K = w->K;
  return packed_product(k::pack_a(std::shared_ptr<const k::PanelSource>(std::move(w)), M, K), b, f32_out, trans_out);
}

void panels_into(const k::CompressedWeight& w, HOut& dst, int64_t width) {
  if (width < 16 || width % 16) throw std::invalid_argument("panels_into: width must be a multiple of 16");
  const int64_t ld = dst.ndim() == 3 ? (int64_t)dst.shape(2) : 0;
  if (!w.panels_fit(width, ld, (int64_t)dst.size()))
    throw std::invalid_argument("panels_into: dst must be [ceil(M / width), K, ld >= width] = [" +
                                std::to_string((w.M + width - 1) / width) + ", " + std::to_string(w.K) + ", >= " +
                                std::to_string(width) + "] fp16 values");
  f16* out = reinterpret_cast<f16*>(dst.data());
  nb::gil_scoped_release nogil;
  w.panels_into(out, width, ld);
}

}  // namespace

void bind_kernels(nb::module_& m) {
  nb::class_<k::CompressedWeight>(m, "CompressedWeight",
                                  "A compressed [M, K] weight as the simulator's kernels hold it (codes in 16-row panel "
                                  "order + tables or scales per block); decodes exactly as the constexpr op.")
      .def_prop_ro("nbytes", [](const k::CompressedWeight& w) { return w.bytes(); })
      .def_prop_ro("shape", [](const k::CompressedWeight& w) { return std::vector<int64_t>{w.M, w.K}; })
      .def("set_rows", &set_rows, nb::arg("row0"), nb::arg("codes").noconvert(),
           "Rows row0.. of the codes (uint8, one a element, row-major [n][K]; two's complement when signed), "
           "row0 a multiple of 16 and n too unless they end at M: a big weight built a block of rows at a time "
           "(start from compressed_weight with no codes).")
      .def("panels_into", &panels_into, nb::arg("dst").noconvert(), nb::arg("width"),
           "Decodes every row into dst, C-contiguous fp16 [ceil(M / width), K, ld >= width] (a weight input's "
           "column panels, rows padded to ld: only [..., :width] is written), with the GIL released.");
  m.def("compressed_weight", &compressed_weight, nb::arg("kind"), nb::arg("codes").noconvert(), nb::arg("M"),
        nb::arg("K"), nb::arg("bits"), nb::arg("is_signed"), nb::arg("rows_per_block"), nb::arg("blocks_per_row"),
        nb::arg("lut").noconvert(), nb::arg("scale").noconvert(), nb::arg("offset").noconvert(),
        "A CompressedWeight from codes (uint8, one a element, row-major [M][K]; two's complement when signed) and "
        "its parameter grid: 'lut' tables (fp16 [blocks << bits]) or 'shift_scale' scale/offset (float32 [blocks]).");
  m.def("shift_scale_f16", &shift_scale_f16, nb::arg("codes").noconvert(), nb::arg("scale").noconvert(),
        nb::arg("offset").noconvert(), nb::arg("rows_per_block"), nb::arg("blocks_per_row"),
        "fp16(float(code - offset) * scale) of int8 / uint8 codes [M, ...] (C-contiguous; rows of K = size / M) with "
        "scale and offset (float32, or offset empty: 0) per block of rows_per_block rows x K / blocks_per_row "
        "columns, [M / rows_per_block, blocks_per_row] flattened: the constexpr shift/scale ops' values, threaded.");
  m.def("lut_f16", &lut_f16, nb::arg("packed").noconvert(), nb::arg("bits"), nb::arg("M"), nb::arg("K"),
        nb::arg("lut").noconvert(), nb::arg("rows_per_table"),
        "fp16 [M, K]: lut[r // rows_per_table][code] of bits-wide codes packed LSB-first row-major (MILBlob's "
        "layout) with tables fp16 [M / rows_per_table, 2**bits]: constexpr_lut_to_dense's values, threaded.");
  m.def("absmax_rows_f16", &absmax_rows, nb::arg("w").noconvert(),
        "max |w| of each row of a C-contiguous fp16 [n, d] array, float32 [n] (NaN for a row holding one).");
  m.def("quantize_rows_s8", &quantize_rows, nb::arg("w").noconvert(), nb::arg("scale").noconvert(),
        "int8 [n, d]: clip(rint(w / scale[r]), -127, 127) of fp16 rows in float32 arithmetic (quantize_int8's codes).");
  m.def("gemm_f16", &gemm, nb::arg("a").noconvert(), nb::arg("b").noconvert(), nb::arg("trans_a") = false,
        nb::arg("trans_b") = false, nb::arg("f32_out") = false, nb::arg("ldc_pad") = 0,
        "C = op(a) @ op(b) on fp16 arrays (2-D or 3-D; batch 1 broadcasts) with the simulator's GEMM: fp32 "
        "accumulation, one rounding (or fp32 output with f32_out).");
  m.def("gemm_f32", &gemm_f32, nb::arg("a").noconvert(), nb::arg("b").noconvert(), nb::arg("out").noconvert(),
        "out = a @ b on 2-D float32 arrays (rows or columns contiguous: a transposed view is read in place; "
        "out's rows contiguous) with the simulator's blocked GEMM: each element the in-order fp32 fma chain "
        "over k from +0, independent of threads and ISA. Runs with the GIL released.");
  m.def("adamw_update", &adamw_update, nb::arg("p").noconvert(), nb::arg("g").noconvert(), nb::arg("m").noconvert(),
        nb::arg("v").noconvert(), nb::arg("b1"), nb::arg("b2"), nb::arg("ga"), nb::arg("gb"), nb::arg("k"),
        nb::arg("eps"), nb::arg("decay"),
        "AdamW in place on C-contiguous float32 arrays, one pass: m = b1 m + ga g; v = b2 v + gb g^2; p = decay p; "
        "p -= k m / (sqrt(v) + eps), each operation rounded to fp32 in that order (coefficients as fp32).");
  m.def("gemm_panels_f16", &gemm_compressed, nb::arg("weight"), nb::arg("b").noconvert(), nb::arg("f32_out") = false,
        nb::arg("trans_out") = false,
        "gemm_panels_f16 with A a CompressedWeight [M, K], read in its compressed form: the same results as on the "
        "panels of its decoded values (C has 16 ceil(M / 16) rows, those past M zero).");
  m.def("gemm_panels_f16", &gemm_panels, nb::arg("panels").noconvert(), nb::arg("b").noconvert(),
        nb::arg("f32_out") = false, nb::arg("trans_out") = false,
        "C [16 P, N] = A @ b with A as its 16-row panels [P, K, 16] (k-major per panel; C-contiguous): the "
        "simulator's packed-weight GEMM, same results as gemm_f16 on A. trans_out: C^T [N, 16 P] instead.");
  m.def("transpose", &transpose, nb::arg("x").noconvert(), nb::arg("perm"),
        "x (C-contiguous, any dtype) with its dims permuted, as a new C-contiguous array, with the GIL released.");
  m.def("convert_fp", &convert, nb::arg("x").noconvert(),
        "float16 -> float32 or float32 -> float16 (round to nearest even), vectorised.");
  m.def("kernel_isa", [] { return std::string(k::isa_name()); }, "The SIMD kernel table in use: avx512, avx2, neon or scalar.");
  m.def("set_num_threads", [](int n) { orion::cpu::set_num_threads(n); }, nb::arg("n"),
        "Threads of the simulator's pool (kernels and plan execution).");
  m.def("num_threads", [] { return orion::cpu::num_threads(); });
}

}  // namespace orion::bindings
