// float16 numpy arrays for the kernel bindings (kernels.cpp, testing_kernels.cpp): numpy float16 arrays
// cross zero-copy through a 16-bit storage type; results are fresh dense arrays owned by a capsule.
#pragma once
#include <nanobind/ndarray.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "bindings/bindings.h"
#include "common/fp16.h"

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

using HArr = nb::ndarray<const half_t, nb::device::cpu>;
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

// Generic-dtype result array of the same dtype as `like`.
template <class Arr>
inline nb::object new_like(const Arr& like, const std::vector<size_t>& shape, void** data) {
  size_t n = 1, es = like.itemsize();
  for (size_t s : shape) n *= s;
  uint8_t* p = new uint8_t[(n ? n : 1) * es];
  *data = p;
  nb::capsule owner(p, [](void* q) noexcept { delete[] static_cast<uint8_t*>(q); });
  return nb::cast(nb::ndarray<nb::numpy>(p, shape.size(), shape.data(), owner, nullptr, like.dtype()));
}

inline const f16* hp(const HArr& a) { return reinterpret_cast<const f16*>(a.data()); }

inline bool contiguous(const HArr& a) {
  int64_t s = 1;
  for (size_t i = a.ndim(); i-- > 0;) {
    if (a.shape(i) != 1 && a.stride(i) != s) return false;
    s *= (int64_t)a.shape(i);
  }
  return true;
}

inline void require_contig(const HArr& a, const char* what) {
  if (!contiguous(a)) throw std::invalid_argument(std::string(what) + ": array must be C-contiguous");
}

}  // namespace orion::bindings
