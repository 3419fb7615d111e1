#include "mil/numbers.h"

#include <charconv>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <system_error>

#include "common/fp16.h"

namespace orion::mil {

namespace {

int hex_val(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Decimal exponent digits, saturated so "1e99999999999999999999" cannot overflow.
int64_t read_exponent(std::string_view s) {
  bool neg = false;
  size_t i = 0;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) neg = s[i++] == '-';
  int64_t e = 0;
  for (; i < s.size(); ++i) e = e > 1000000000000LL ? e : e * 10 + (s[i] - '0');
  return neg ? -e : e;
}

// Safe double -> float (out-of-range conversion is undefined behaviour in C++).
float to_float(double v) {
  // Halfway between FLT_MAX and 2^128: at or above it, round-to-nearest-even gives inf.
  const double lim = 0x1.ffffffp127;
  if (std::isfinite(v) && std::fabs(v) >= lim) return v > 0 ? INFINITY : -INFINITY;
  return (float)v;
}

}  // namespace

bool parse_number(std::string_view s, NumberText* out, std::string* why) {
  *out = NumberText{};
  bool hex = s.size() >= 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X');
  size_t i = hex ? 2 : 0;
  auto is_mdigit = [&](char c) { return hex ? hex_val(c) >= 0 : (c >= '0' && c <= '9'); };
  size_t int_begin = i;
  while (i < s.size() && is_mdigit(s[i])) ++i;
  size_t int_end = i, frac_begin = i, frac_end = i;
  bool dot = false, has_exp = false;
  if (i < s.size() && s[i] == '.') {
    dot = true;
    frac_begin = ++i;
    while (i < s.size() && is_mdigit(s[i])) ++i;
    frac_end = i;
  }
  if (int_end == int_begin && frac_end == frac_begin) {
    *why = "no digits";
    return false;
  }
  size_t exp_begin = i;
  char exp_ch = hex ? 'p' : 'e';
  if (i < s.size() && (s[i] == exp_ch || s[i] == exp_ch - 32)) {
    has_exp = true;
    exp_begin = ++i;
    if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
    size_t d0 = i;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i;
    if (i == d0) {
      *why = "exponent has no digits";
      return false;
    }
  }
  if (i != s.size()) {
    *why = std::string("unexpected '") + s[i] + "'";
    return false;
  }
  if (hex && dot && !has_exp) {
    *why = "hex float needs a 'p' exponent (C99 form 0x1.8p-3)";
    return false;
  }
  out->is_int = !dot && !has_exp;
  if (out->is_int) {
    uint64_t m = 0;
    unsigned base = hex ? 16 : 10;
    for (size_t k = int_begin; k < int_end; ++k) {
      uint64_t d = (uint64_t)hex_val(s[k]);
      if (m > (UINT64_MAX - d) / base) {
        out->int_overflow = true;
        break;
      }
      m = m * base + d;
    }
    out->magnitude = m;
  }
  std::string_view body = s.substr(hex ? 2 : 0);
  double v = 0;
  auto r = std::from_chars(body.data(), body.data() + body.size(), v,
                           hex ? std::chars_format::hex : std::chars_format::general);
  if (r.ec == std::errc::result_out_of_range) {
    // Overflow or underflow? Position of the leading non-zero digit plus the exponent decides;
    // from_chars only reports out-of-range far from 1, so the sign of this estimate is reliable.
    int64_t lead = 0;
    size_t k = int_begin;
    while (k < int_end && s[k] == '0') ++k;
    if (k < int_end) {
      lead = (int64_t)(int_end - k) - 1;
    } else {
      size_t z = frac_begin;
      while (z < frac_end && s[z] == '0') ++z;
      lead = -(int64_t)(z - frac_begin) - 1;
    }
    if (hex) lead *= 4;
    if (has_exp) lead += read_exponent(s.substr(exp_begin));
    if (lead < 0) {
      v = 0;
    } else {
      out->float_overflow = true;
      v = INFINITY;
    }
  } else if (r.ec != std::errc() || r.ptr != body.data() + body.size()) {
    *why = "not a number";
    return false;
  }
  out->value = v;
  return true;
}

bool int_in_range(bool negative, uint64_t m, DType t, int64_t* out) {
  int64_t lo = 0;
  uint64_t hi = 0;
  switch (t) {
    case DType::int8: lo = -128; hi = 127; break;
    case DType::uint8: hi = 255; break;
    case DType::int16: lo = -32768; hi = 32767; break;
    case DType::uint16: hi = 65535; break;
    case DType::int32: lo = INT32_MIN; hi = INT32_MAX; break;
    case DType::uint32: hi = UINT32_MAX; break;
    case DType::uint64: hi = UINT64_MAX; break;
    case DType::int4: lo = -8; hi = 7; break;
    case DType::uint1: case DType::uint2: case DType::uint3: case DType::uint4: case DType::uint6:
      hi = (1u << dtype_bits(t)) - 1; break;
    default: return false;
  }
  if (negative) {
    if (m > (uint64_t)(-lo)) return false;
    *out = -(int64_t)m;
  } else {
    if (m > hi) return false;
    *out = (int64_t)m;  // uint64 above INT64_MAX wraps: bit-cast storage
  }
  return true;
}

std::string int_range_str(DType t) {
  switch (t) {
    case DType::int8: return "[-128, 127]";
    case DType::uint8: return "[0, 255]";
    case DType::int16: return "[-32768, 32767]";
    case DType::uint16: return "[0, 65535]";
    case DType::int32: return "[-2147483648, 2147483647]";
    case DType::uint32: return "[0, 4294967295]";
    case DType::uint64: return "[0, 18446744073709551615]";
    case DType::int4: return "[-8, 7]";
    case DType::uint1: case DType::uint2: case DType::uint3: case DType::uint4: case DType::uint6:
      return "[0, " + std::to_string((1u << dtype_bits(t)) - 1) + "]";
    default: return "[]";
  }
}

double round_to_dtype(double v, DType t) {
  if (t == DType::fp16) return (double)f16_to_f32(f32_to_f16(to_float(v)));
  if (t == DType::fp32) return (double)to_float(v);
  return v;
}

std::string format_float(double v, DType t) {
  double r = round_to_dtype(v, t);
  if (std::isnan(r)) return "nan";
  if (std::isinf(r)) return r > 0 ? "inf" : "-inf";
  if (r == 0) return std::signbit(r) ? "-0.0" : "0.0";
  char buf[64];
  // Integral values print exactly ("65504.0", not the shorter but misleading "6.55e+04").
  if (r == std::floor(r) && std::fabs(r) < 1e16) {
    auto res = std::to_chars(buf, buf + sizeof buf, (int64_t)r);
    return std::string(buf, (size_t)(res.ptr - buf)) + ".0";
  }
  size_t n = 0;
  for (int p = 1; p <= 17; ++p) {
    auto res = std::to_chars(buf, buf + sizeof buf, r, std::chars_format::general, p);
    n = (size_t)(res.ptr - buf);
    double back = 0;
    const char* b = buf[0] == '-' ? buf + 1 : buf;  // from_chars accepts '-', but be explicit
    auto pr = std::from_chars(b, buf + n, back, std::chars_format::general);
    if (pr.ec != std::errc()) continue;
    if (buf[0] == '-') back = -back;
    if (round_to_dtype(back, t) == r) break;
  }
  std::string s(buf, n);
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

}  // namespace orion::mil
