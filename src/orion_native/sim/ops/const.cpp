// const: inline literals and BLOBFILE weights become plan-owned storage at build time (C07: the
// ANE bakes weights at compile, later file changes have no effect). Floats are rounded to fp16 here.
#include <cmath>
#include <cstring>

#include "blob/blob.h"
#include "common/error.h"
#include "cpu/kernels/kernels.h"
#include "sim/ops/op.h"

namespace orion::sim::ops {

namespace {

// double -> fp16 with one correct rounding: round to odd into fp32 first (24 bits >> 11 + 2), so the
// second rounding cannot hit a false tie.
f16 double_to_f16(double v) {
  float f = (float)v;
  if (std::isfinite(v) && std::isfinite(f) && (double)f != v) {
    if (std::fabs((double)f) > std::fabs(v)) f = std::nextafter(f, 0.0f);
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    bits |= 1u;
    std::memcpy(&f, &bits, 4);
  }
  return f32_to_f16(f);
}

bool blob_dtype_of(DType d, blob::BlobDType* out) {
  switch (d) {
    case DType::fp16: *out = blob::BlobDType::Float16; return true;
    case DType::fp32: *out = blob::BlobDType::Float32; return true;
    case DType::int8: *out = blob::BlobDType::Int8; return true;
    case DType::uint8: *out = blob::BlobDType::UInt8; return true;
    case DType::int16: *out = blob::BlobDType::Int16; return true;
    case DType::uint16: *out = blob::BlobDType::UInt16; return true;
    case DType::int32: *out = blob::BlobDType::Int32; return true;
    case DType::uint32: *out = blob::BlobDType::UInt32; return true;
    case DType::int4: *out = blob::BlobDType::Int4; return true;
    case DType::uint1: *out = blob::BlobDType::UInt1; return true;
    case DType::uint2: *out = blob::BlobDType::UInt2; return true;
    case DType::uint3: *out = blob::BlobDType::UInt3; return true;
    case DType::uint4: *out = blob::BlobDType::UInt4; return true;
    case DType::uint6: *out = blob::BlobDType::UInt6; return true;
    default: return false;
  }
}

[[noreturn]] void fail(const std::string& c, const std::string& stmt, const std::string& msg) {
  throw_compile(c, stmt, "InvalidMILProgram: " + msg);
}

}  // namespace

void unpack_bits(const uint8_t* packed, unsigned bits, bool is_signed, size_t n, uint8_t* out) {
  // MILBlob sub-byte layout: row-major, LSB-first, two's complement for int4 (blob/blob.h)
  const unsigned mask = (1u << bits) - 1, sign = 1u << (bits - 1);
  for (size_t i = 0; i < n; ++i) {
    size_t bit = i * bits, byte = bit >> 3;
    unsigned sh = bit & 7, v = packed[byte];
    if (sh + bits > 8) v |= (unsigned)packed[byte + 1] << 8;  // a 3/6-bit value may straddle two bytes
    v = (v >> sh) & mask;
    out[i] = is_signed && (v & sign) ? (uint8_t)(int8_t)((int)v - (int)(1u << bits)) : (uint8_t)v;
  }
}

std::shared_ptr<ConstData> const_from_literal(const mil::Literal& lit, const std::string& stmt) {
  auto cd = std::make_shared<ConstData>();
  DType d = lit.type.dtype;
  int64_t n = shape_numel(lit.type.shape);
  std::string ty = type_str(d, lit.type.shape);
  if (d == DType::string) {
    if (lit.s.size() != 1 || n != 1) fail("", stmt, "only scalar string literals are supported, got " + ty);
    cd->str = lit.s[0];
    return cd;
  }
  size_t have = dtype_is_float(d) ? lit.f.size() : lit.i.size();
  if ((int64_t)have != n)
    fail("", stmt, "literal of type " + ty + " lists " + std::to_string(have) + " values, expected " + std::to_string(n));
  cd->bytes.resize((size_t)n * storage_size(d));
  if (dtype_is_float(d)) {
    f16* p = (f16*)cd->bytes.data();
    for (int64_t i = 0; i < n; ++i) p[i] = double_to_f16(lit.f[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) store_int(cd->bytes.data(), d, i, lit.i[i]);
  }
  return cd;
}

std::shared_ptr<ConstData> const_from_blob(const mil::Literal& lit, const WeightLookup& w, const std::string& stmt) {
  const Profile& prof = *w.profile;
  const std::string& path = lit.blob_path;
  const uint64_t off = lit.blob_offset;
  DType d = lit.type.dtype;
  int64_t n = shape_numel(lit.type.shape);
  blob::BlobDType bd;
  if (!blob_dtype_of(d, &bd)) fail("", stmt, std::string("BLOBFILE tensors of dtype ") + dtype_name(d) + " are not supported");

  const WeightFile* file = nullptr;
  for (const auto& f : *w.files) if (f.path == path) file = &f;
  if (!file) {
    std::string keys;
    for (const auto& f : *w.files) keys += (keys.empty() ? "'" : ", '") + f.path + "'";
    fail("", stmt, "BLOBFILE path '" + path + "' is not in the weight dictionary (keys: " + (keys.empty() ? "none" : keys) + ")");
  }
  if (file->size == 0 || !file->data) fail("C11", stmt, "weight dictionary entry '" + path + "' is empty");

  const uint8_t* data = file->data;
  const size_t size = file->size;
  std::string where = "weight file '" + path + "' offset " + std::to_string(off);
  auto sentinel_ok = [&] {
    uint32_t s = 0;
    if (off >= 64 && off % 64 == 0 && off + 4 <= size) std::memcpy(&s, data + off, 4);
    return s == blob::kSentinel;
  };
  blob::ReadOptions opt;
  opt.strict_spec = prof.legacy_chip();  // C32: M1/M2 reject the sloppy upstream multi-blob files
  auto warn = [&](const char* id, const std::string& m) {
    if (w.warnings) w.warnings->push_back({id, "AneSimWarning: " + where + ": " + m + " [" + id + "]"});
  };
  const uint8_t* payload = nullptr;
  if (!sentinel_ok()) {
    // C08: the MIL offset must point at the blob's metadata record (64 for the first blob).
    if (prof.strict())
      fail("C08", stmt, where + " does not point at a blob metadata record (no 0xDEADBEEF sentinel there); "
                             "the BLOBFILE offset must point at the metadata record, 64 for the first blob");
    // permissive: reproduce the M4 compiler, which takes the payload at offset + 64 regardless.
    uint64_t need = 0;
    blob::payload_bytes(bd, (uint64_t)n, &need);  // no overflow: n is a checked element count
    if (off > size || size - off < 64 || size - off - 64 < need)
      fail("C08", stmt, where + ": no blob metadata record there, and offset + 64 leaves fewer than " +
                            std::to_string(need) + " payload bytes");
    payload = data + off + 64;
    warn("C08", "no metadata record at this offset; payload read at offset " + std::to_string(off + 64) +
                    " regardless (silent garbage on hardware)");
  } else {
    blob::Blob b;
    try {
      b = blob::read(data, size, off, opt);
      blob::check_declaration(b, bd, (uint64_t)n);
    } catch (const Error& e) {
      if (e.kind != ErrorKind::BlobFormat) throw;
      std::string c;
      if (opt.strict_spec) {  // would M3+ have accepted it? then this is the M1/M2 strictness (C32)
        try {
          blob::Blob b2 = blob::read(data, size, off, blob::ReadOptions{});
          blob::check_declaration(b2, bd, (uint64_t)n);
          c = "C32";
        } catch (const Error&) {
        }
      }
      fail(c, stmt, where + ": " + e.what());
    }
    payload = b.payload;
    for (const auto& m : b.warnings) warn("C32", m);  // spec deviations M3-M5 tolerate (C32)
  }

  auto cd = std::make_shared<ConstData>();
  cd->blob_path = path;
  if (w.borrow) {  // check_program: every check above ran; no snapshot is kept, so no copy is made
    cd->elided = true;
    cd->view = payload;
    cd->view_dtype = d;
    cd->nbytes = (size_t)n * storage_size(d);
    return cd;
  }
  cd->bytes.resize((size_t)n * storage_size(d));
  if (dtype_is_subbyte(d)) {  // one byte per element in the plan (the constexpr op repacks what it keeps)
    unpack_bits(payload, dtype_bits(d), dtype_is_signed(d), (size_t)n, cd->bytes.data());
  } else if (d == DType::fp32) {  // fp32 weights are stored as fp16 in the plan (C37)
    std::vector<float> tmp((size_t)n);
    std::memcpy(tmp.data(), payload, (size_t)n * 4);
    cpu::kernels::f32_to_f16(tmp.data(), (f16*)cd->bytes.data(), (size_t)n);
  } else {
    std::memcpy(cd->bytes.data(), payload, cd->bytes.size());
  }
  return cd;
}

// `TYPE n = const()[name = ..., val = LITERAL]`: the builder turns the literal into a const value.
void const_infer(OpCtx& ctx) {
  const Value& v = ctx.v("val");
  ctx.out_dtype = v.dtype;
  ctx.out_shape = v.shape;
  ctx.folded = v.cdata;
}

}  // namespace orion::sim::ops
