// Element types shared by the MIL parser, the blob format and the simulator.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace orion {

// MIL element types (those a MIL tensor type can name). Order is internal only; never serialised.
// int4 and uint1..uint6 exist only as operands of constexpr ops (MILBlob sub-byte types, packed in the
// blob); inside the simulator each element takes one byte (int4 as int8, uintN as uint8).
enum class DType : uint8_t { fp16, fp32, int8, uint8, int16, uint16, int32, uint32, uint64, bool_, string,
                             int4, uint1, uint2, uint3, uint4, uint6 };

using Shape = std::vector<int64_t>;

// Bytes per element (string: 0, it has no tensor storage).
size_t dtype_size(DType t);
// MIL spelling: "fp16", "int32", "bool", ...
const char* dtype_name(DType t);
// Parses a MIL spelling; returns false when unknown.
bool dtype_from_name(const std::string& s, DType* out);
bool dtype_is_float(DType t);  // fp16, fp32
bool dtype_is_int(DType t);    // int8..uint64 and the sub-byte types
bool dtype_is_subbyte(DType t);  // int4, uint1, uint2, uint3, uint4, uint6
unsigned dtype_bits(DType t);   // bits per element as stored in a blob (4 for int4, 16 for fp16, 0 for string)
bool dtype_is_signed(DType t);  // int8/16/32, int4

int64_t shape_numel(const Shape& s);
std::string shape_str(const Shape& s);  // "[1, 768, 1, 256]"

}  // namespace orion
