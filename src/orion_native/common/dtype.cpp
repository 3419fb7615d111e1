#include "common/dtype.h"

namespace orion {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::fp16: case DType::int16: case DType::uint16: return 2;
    case DType::fp32: case DType::int32: case DType::uint32: return 4;
    case DType::int8: case DType::uint8: case DType::bool_: return 1;
    case DType::int4: case DType::uint1: case DType::uint2: case DType::uint3: case DType::uint4: case DType::uint6:
      return 1;  // one byte per element in memory; packed only in blobs
    case DType::uint64: return 8;
    case DType::string: return 0;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::fp16: return "fp16";
    case DType::fp32: return "fp32";
    case DType::int8: return "int8";
    case DType::uint8: return "uint8";
    case DType::int16: return "int16";
    case DType::uint16: return "uint16";
    case DType::int32: return "int32";
    case DType::uint32: return "uint32";
    case DType::uint64: return "uint64";
    case DType::bool_: return "bool";
    case DType::string: return "string";
    case DType::int4: return "int4";
    case DType::uint1: return "uint1";
    case DType::uint2: return "uint2";
    case DType::uint3: return "uint3";
    case DType::uint4: return "uint4";
    case DType::uint6: return "uint6";
  }
  return "?";
}

bool dtype_from_name(const std::string& s, DType* out) {
  static const DType all[] = {DType::fp16, DType::fp32, DType::int8, DType::uint8, DType::int16, DType::uint16,
                              DType::int32, DType::uint32, DType::uint64, DType::bool_, DType::string,
                              DType::int4, DType::uint1, DType::uint2, DType::uint3, DType::uint4, DType::uint6};
  for (DType t : all)
    if (s == dtype_name(t)) { *out = t; return true; }
  return false;
}

bool dtype_is_float(DType t) { return t == DType::fp16 || t == DType::fp32; }
bool dtype_is_int(DType t) {
  return t == DType::int8 || t == DType::uint8 || t == DType::int16 || t == DType::uint16 || t == DType::int32 ||
         t == DType::uint32 || t == DType::uint64 || dtype_is_subbyte(t);
}
bool dtype_is_subbyte(DType t) {
  return t == DType::int4 || t == DType::uint1 || t == DType::uint2 || t == DType::uint3 || t == DType::uint4 ||
         t == DType::uint6;
}
unsigned dtype_bits(DType t) {
  switch (t) {
    case DType::uint1: return 1;
    case DType::uint2: return 2;
    case DType::uint3: return 3;
    case DType::int4: case DType::uint4: return 4;
    case DType::uint6: return 6;
    default: return (unsigned)dtype_size(t) * 8;
  }
}
bool dtype_is_signed(DType t) {
  return t == DType::int8 || t == DType::int16 || t == DType::int32 || t == DType::int4;
}

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

std::string shape_str(const Shape& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) r += ", ";
    r += std::to_string(s[i]);
  }
  return r + "]";
}

}  // namespace orion
