// Number literal text <-> values for the MIL parser and printer: strict decimal / C99 hex-float
// reading (locale-independent, exact), integer ranges per dtype, and shortest round-trip printing
// of fp16/fp32 values (never "%f", which turns small constants into 0.000000).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

#include "common/dtype.h"

namespace orion::mil {

struct NumberText {
  bool is_int = false;        // decimal or hex digits only (no '.', exponent)
  bool int_overflow = false;  // is_int and the magnitude does not fit in uint64
  uint64_t magnitude = 0;     // is_int: the value (sign is a separate token)
  double value = 0;           // correctly rounded value (0 on underflow)
  bool float_overflow = false;  // too large even for double
};

// Parses an unsigned number token (`12`, `0x1F`, `1.5e-3`, `.5`, `0x1.554p-10`). Returns false with a
// reason in *why when the text is not a well-formed number.
bool parse_number(std::string_view text, NumberText* out, std::string* why);

// Signed integer literal checked against the dtype's range (uint64 values are stored bit-cast in
// int64). Returns false when out of range.
bool int_in_range(bool negative, uint64_t magnitude, DType t, int64_t* out);
std::string int_range_str(DType t);  // "[-128, 127]"

// Value after storage in the dtype: fp16 via double->float->f32_to_f16 (as the simulator rounds),
// fp32 via double->float. Finite values beyond the dtype's range become +-inf.
double round_to_dtype(double v, DType t);
// Shortest decimal that rounds back to the same dtype value: "0.125", "1e-05", "-0.5", "inf",
// "-inf", "nan"; integral values below 1e16 print exactly ("1.0", "65504.0"). t: fp16 or fp32.
std::string format_float(double v, DType t);

}  // namespace orion::mil
