// numpy <-> native helpers for the runtime bindings: dtype mapping, contiguity checks, and fresh
// numpy arrays owned by a capsule.
#pragma once
#include <nanobind/ndarray.h>

#include <cstring>
#include <string>

#include "common/dtype.h"
#include "common/error.h"

namespace orion::bindings {

namespace nb = nanobind;
using AnyArray = nb::ndarray<nb::ro, nb::device::cpu>;

inline nb::dlpack::dtype dl_dtype(DType t) {
  using nb::dlpack::dtype_code;
  switch (t) {
    case DType::fp16: return {(uint8_t)dtype_code::Float, 16, 1};
    case DType::fp32: return {(uint8_t)dtype_code::Float, 32, 1};
    case DType::int32: return {(uint8_t)dtype_code::Int, 32, 1};
    case DType::int8: return {(uint8_t)dtype_code::Int, 8, 1};
    case DType::uint8: return {(uint8_t)dtype_code::UInt, 8, 1};
    case DType::int16: return {(uint8_t)dtype_code::Int, 16, 1};
    case DType::uint16: return {(uint8_t)dtype_code::UInt, 16, 1};
    case DType::uint32: return {(uint8_t)dtype_code::UInt, 32, 1};
    case DType::uint64: return {(uint8_t)dtype_code::UInt, 64, 1};
    case DType::bool_: return {(uint8_t)dtype_code::Bool, 8, 1};
    default: return {(uint8_t)dtype_code::UInt, 8, 1};
  }
}

// Returns false for dtypes orion has no name for.
inline bool dtype_of(const nb::dlpack::dtype& d, DType* out) {
  static const DType all[] = {DType::fp16, DType::fp32, DType::int32, DType::int8, DType::uint8,
                              DType::int16, DType::uint16, DType::uint32, DType::uint64, DType::bool_};
  for (DType t : all)
    if (dl_dtype(t) == d) { *out = t; return true; }
  return false;
}

inline std::string dl_name(const nb::dlpack::dtype& d) {
  static const char* codes[] = {"int", "uint", "float", "?", "bfloat", "complex", "bool"};
  return std::string(d.code < 7 ? codes[d.code] : "?") + std::to_string(d.bits);
}

inline bool c_contiguous(const AnyArray& a) {
  int64_t expect = 1;
  for (size_t i = a.ndim(); i-- > 0;) {
    if (a.shape(i) != 1 && a.stride(i) != expect) return false;
    expect *= (int64_t)a.shape(i);
  }
  return true;
}

inline Shape shape_of(const AnyArray& a) {
  Shape s;
  for (size_t i = 0; i < a.ndim(); ++i) s.push_back((int64_t)a.shape(i));
  return s;
}

// A new numpy array of `shape`/`dtype` whose memory is filled by the caller via *data.
inline nb::object new_array(DType t, const Shape& shape, void** data) {
  size_t bytes = (size_t)shape_numel(shape) * dtype_size(t);
  auto* buf = new uint8_t[bytes ? bytes : 1];
  nb::capsule owner(buf, [](void* p) noexcept { delete[] static_cast<uint8_t*>(p); });
  size_t dims[8];
  for (size_t i = 0; i < shape.size() && i < 8; ++i) dims[i] = (size_t)shape[i];
  *data = buf;
  return nb::cast(nb::ndarray<nb::numpy>(buf, shape.size(), dims, owner, nullptr, dl_dtype(t)));
}

}  // namespace orion::bindings
