// MILBlob storage format v2 (layout in blob.h). Every offset computation is done with
// fits()/checked adds so that hostile u64 fields near 2^64 cannot wrap into a valid-looking range.
#include "blob/blob.h"

#include <cstdio>
#include <cstring>

#include "common/error.h"

namespace orion::blob {

bool blob_dtype_valid(uint32_t code) { return code >= 1 && code <= 17; }

const char* blob_dtype_name(BlobDType t) {
  switch (t) {
    case BlobDType::Float16: return "Float16";
    case BlobDType::Float32: return "Float32";
    case BlobDType::UInt8: return "UInt8";
    case BlobDType::Int8: return "Int8";
    case BlobDType::BFloat16: return "BFloat16";
    case BlobDType::Int16: return "Int16";
    case BlobDType::UInt16: return "UInt16";
    case BlobDType::Int4: return "Int4";
    case BlobDType::UInt1: return "UInt1";
    case BlobDType::UInt2: return "UInt2";
    case BlobDType::UInt4: return "UInt4";
    case BlobDType::UInt3: return "UInt3";
    case BlobDType::UInt6: return "UInt6";
    case BlobDType::Int32: return "Int32";
    case BlobDType::UInt32: return "UInt32";
    case BlobDType::Float8E4M3FN: return "Float8E4M3FN";
    case BlobDType::Float8E5M2: return "Float8E5M2";
  }
  return "unknown";
}

unsigned blob_dtype_bits(BlobDType t) {
  switch (t) {
    case BlobDType::Float32: case BlobDType::Int32: case BlobDType::UInt32: return 32;
    case BlobDType::Float16: case BlobDType::BFloat16: case BlobDType::Int16: case BlobDType::UInt16: return 16;
    case BlobDType::UInt8: case BlobDType::Int8: case BlobDType::Float8E4M3FN: case BlobDType::Float8E5M2: return 8;
    case BlobDType::UInt6: return 6;
    case BlobDType::Int4: case BlobDType::UInt4: return 4;
    case BlobDType::UInt3: return 3;
    case BlobDType::UInt2: return 2;
    case BlobDType::UInt1: return 1;
  }
  return 0;
}

bool payload_bytes(BlobDType t, uint64_t elements, uint64_t* bytes) {
  uint64_t bits = blob_dtype_bits(t);
  if (bits == 0 || elements > UINT64_MAX / bits) return false;
  uint64_t total = elements * bits;
  *bytes = total / 8 + (total % 8 != 0);  // ceil without the +7 that could wrap
  return true;
}

namespace {

uint32_t rd32(const uint8_t* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}
uint64_t rd64(const uint8_t* p) { return uint64_t(rd32(p)) | uint64_t(rd32(p + 4)) << 32; }
void wr32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = uint8_t(v >> (8 * i));
}
void wr64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = uint8_t(v >> (8 * i));
}

std::string hex(uint64_t v, int digits) {
  char buf[24];
  snprintf(buf, sizeof buf, "0x%0*llX", digits, (unsigned long long)v);
  return buf;
}
std::string num(uint64_t v) { return std::to_string(v); }
std::string at(uint64_t m) { return "blob metadata at offset " + num(m); }
std::string dtype_str(uint32_t code) {
  return std::string(blob_dtype_name(BlobDType(code))) + " (" + num(code) + ")";
}

[[noreturn]] void fail(const std::string& msg) { throw_error(ErrorKind::BlobFormat, msg); }

// off + len <= size, without computing off + len.
bool fits(uint64_t off, uint64_t len, uint64_t size) { return off <= size && len <= size - off; }

// Bytes of zero padding that bring `pos` to the next 64-byte boundary.
uint64_t pad_to_alignment(uint64_t pos) { return (kAlignment - pos % kAlignment) % kAlignment; }

// Spec deviations that upstream files commit and compilers accept (count mismatch, offset field
// != M + 64, non-zero reserved fields): warnings, errors under strict_spec. Collected first so that a hard
// error elsewhere in the same record wins over a strict-mode deviation.
struct Deviations {
  std::vector<std::string> items;
  void add(std::string msg) { items.push_back(std::move(msg)); }
  void finish(bool strict, std::vector<std::string>* warnings) {
    if (strict && !items.empty()) fail(items.front() + " (strict spec)");
    if (warnings) warnings->insert(warnings->end(), items.begin(), items.end());
  }
};

// Storage header checks; returns the stored count.
uint32_t check_header(const uint8_t* file, size_t size, Deviations& dev) {
  if (size < kHeaderSize)
    fail("blob file is " + num(size) + " bytes, shorter than the 64-byte storage header");
  uint32_t version = rd32(file + 4);
  if (version != 2) fail("storage header at offset 4: version is " + num(version) + ", expected 2");
  for (uint64_t off = 8; off < kHeaderSize; off += 8) {
    uint64_t v = rd64(file + off);
    if (v) dev.add("storage header at offset " + num(off) + ": reserved field is " + hex(v, 16) + ", expected 0");
  }
  return rd32(file);
}

// Non-throwing: is there a well-formed record at m? Sets *end to the end of its payload.
bool probe(const uint8_t* file, uint64_t size, uint64_t m, uint64_t* end) {
  if (m < kHeaderSize || m % kAlignment || !fits(m, kMetadataSize, size)) return false;
  if (rd32(file + m) != kSentinel || !blob_dtype_valid(rd32(file + m + 4))) return false;
  uint64_t sz = rd64(file + m + 8);
  if (!fits(m + kMetadataSize, sz, size)) return false;
  *end = m + kMetadataSize + sz;
  return true;
}

// Number of well-formed records on the 64-aligned chain from offset 64 (stops at the first bad one).
uint64_t chain_length(const uint8_t* file, uint64_t size) {
  uint64_t n = 0, m = kHeaderSize, end = 0;
  while (probe(file, size, m, &end)) {
    ++n;
    uint64_t pad = pad_to_alignment(end);
    if (!fits(end, pad, size) || end + pad == size) break;
    m = end + pad;  // strictly increasing: end >= m + 64
  }
  return n;
}

void check_count(uint32_t count, uint64_t records, Deviations& dev) {
  if (count != records)
    dev.add("storage header at offset 0: count is " + num(count) + ", but the record chain from offset 64 holds " +
            num(records) + (records == 1 ? " record" : " records"));
}

// Checks the record at m (every check that concerns one record) and locates its payload at m + 64.
Blob parse_record(const uint8_t* file, uint64_t size, uint64_t m, bool ignore_sentinel, Deviations& dev,
                  std::vector<std::string>& notes) {
  if (m < kHeaderSize)
    fail("blob metadata offset " + num(m) +
         " points into the 64-byte storage header; expected the metadata record offset (64 for the first blob) [C08]");
  if (m % kAlignment) fail("blob metadata offset " + num(m) + " is not 64-byte aligned; expected a multiple of 64");
  if (!fits(m, kMetadataSize, size))
    fail(at(m) + ": the 64-byte record extends past the end of the " + num(size) + "-byte file");

  const uint8_t* p = file + m;
  Blob b;
  Record& r = b.record;
  r.metadata_offset = m;
  r.dtype = BlobDType(rd32(p + 4));  // may hold an unknown code only when metadata_valid is false
  r.size_in_bytes = rd64(p + 8);
  r.data_offset = rd64(p + 16);
  r.padding_bits = rd64(p + 24);
  b.payload = p + kMetadataSize;
  uint64_t avail = size - m - kMetadataSize;

  uint32_t sentinel = rd32(p);
  if (sentinel != kSentinel) {
    std::string msg = at(m) + ": sentinel is " + hex(sentinel, 8) + ", expected 0xDEADBEEF";
    if (!ignore_sentinel) fail(msg);
    // C08 permissive: the M4 compiler reads whatever follows; the fields are not trusted.
    notes.push_back(msg + "; ignored, payload taken at offset " + num(m + kMetadataSize) + " [C08]");
    b.metadata_valid = false;
    b.payload_size = size_t(avail);
    return b;
  }
  uint32_t code = rd32(p + 4);
  if (!blob_dtype_valid(code))
    fail(at(m) + ": mil_dtype (offset " + num(m + 4) + ") is " + num(code) + ", expected a BlobDataType code 1..17");
  if (r.size_in_bytes > avail)
    fail(at(m) + ": size_in_bytes (offset " + num(m + 8) + ") is " + num(r.size_in_bytes) + ", but only " + num(avail) +
         " bytes follow the record at offset " + num(m + kMetadataSize) + " in the " + num(size) + "-byte file");
  if (r.data_offset != m + kMetadataSize)
    dev.add(at(m) + ": offset field (offset " + num(m + 16) + ") is " + num(r.data_offset) + ", expected " +
            num(m + kMetadataSize) + " (metadata offset + 64); payload taken at " + num(m + kMetadataSize));
  for (uint64_t off = 32; off < kMetadataSize; off += 8) {
    uint64_t v = rd64(p + off);
    if (v) dev.add(at(m) + ": reserved field at offset " + num(m + off) + " is " + hex(v, 16) + ", expected 0");
  }
  b.payload_size = size_t(r.size_in_bytes);
  return b;
}

}  // namespace

Blob read(const uint8_t* file, size_t file_size, uint64_t metadata_offset, const ReadOptions& opt) {
  Deviations dev;
  std::vector<std::string> notes;
  uint32_t count = check_header(file, file_size, dev);
  Blob b = parse_record(file, file_size, metadata_offset, opt.ignore_sentinel, dev, notes);
  check_count(count, chain_length(file, file_size), dev);
  dev.finish(opt.strict_spec, &b.warnings);
  b.warnings.insert(b.warnings.end(), notes.begin(), notes.end());
  return b;
}

std::vector<Record> list(const uint8_t* file, size_t file_size, std::vector<std::string>* warnings) {
  return list(file, file_size, warnings, ReadOptions{});
}

std::vector<Record> list(const uint8_t* file, size_t file_size, std::vector<std::string>* warnings,
                         const ReadOptions& opt) {
  Deviations dev;
  std::vector<std::string> notes;
  std::vector<Record> out;
  uint32_t count = check_header(file, file_size, dev);
  uint64_t size = file_size, m = kHeaderSize;
  while (m < size) {
    Blob b = parse_record(file, size, m, /*ignore_sentinel=*/false, dev, notes);
    out.push_back(b.record);
    uint64_t end = m + kMetadataSize + b.record.size_in_bytes;  // <= size, checked by parse_record
    if (end == size) break;
    uint64_t pad = pad_to_alignment(end);
    if (!fits(end, pad, size) || end + pad == size) {
      // No room for another record: bytes after the last payload (the writer leaves none).
      notes.push_back("file has " + num(size - end) + " bytes after the last payload (which ends at offset " +
                      num(end) + "); expected none");
      break;
    }
    m = end + pad;
  }
  check_count(count, out.size(), dev);
  dev.finish(opt.strict_spec, warnings);
  if (warnings) warnings->insert(warnings->end(), notes.begin(), notes.end());
  return out;
}

void check_declaration(const Blob& blob, BlobDType declared, uint64_t element_count) {
  const Record& r = blob.record;
  uint64_t m = r.metadata_offset;
  uint32_t want_code = uint32_t(declared);
  if (!blob_dtype_valid(want_code)) fail("declared dtype code " + num(want_code) + " is not a BlobDataType code 1..17");
  uint64_t want = 0;
  if (!payload_bytes(declared, element_count, &want))
    fail(at(m) + ": the declared " + num(element_count) + " " + blob_dtype_name(declared) +
         " elements overflow a 64-bit byte count");
  if (!blob.metadata_valid) {
    if (want > blob.payload_size)
      fail(at(m) + ": the declaration needs " + num(want) + " payload bytes at offset " + num(m + kMetadataSize) +
           ", but only " + num(blob.payload_size) + " remain in the file");
    return;
  }
  if (r.dtype != declared)
    fail(at(m) + ": mil_dtype (offset " + num(m + 4) + ") is " + dtype_str(uint32_t(r.dtype)) + ", expected " +
         dtype_str(want_code) + " as declared");
  if (r.size_in_bytes != want)
    fail(at(m) + ": size_in_bytes (offset " + num(m + 8) + ") is " + num(r.size_in_bytes) + ", expected " + num(want) +
         " (" + num(element_count) + " " + blob_dtype_name(declared) + " elements as declared)");
}

size_t write_size(const std::vector<Input>& blobs, std::vector<uint64_t>* metadata_offsets) {
  if (blobs.size() > UINT32_MAX) fail("blob writer: " + num(blobs.size()) + " blobs do not fit the u32 count field");
  if (metadata_offsets) metadata_offsets->clear();
  uint64_t pos = kHeaderSize;
  for (size_t i = 0; i < blobs.size(); ++i) {
    const Input& in = blobs[i];
    std::string who = "blob writer, input " + num(i) + ": ";
    uint32_t code = uint32_t(in.dtype);
    if (!blob_dtype_valid(code)) fail(who + "dtype code " + num(code) + " is not a BlobDataType code 1..17");
    unsigned bits = blob_dtype_bits(in.dtype);
    if (bits % 8 == 0) {
      if (in.size_in_bytes % (bits / 8))
        fail(who + "size " + num(in.size_in_bytes) + " is not a multiple of the " + num(bits / 8) + "-byte " +
             blob_dtype_name(in.dtype) + " element");
      if (in.padding_bits) fail(who + "padding_bits is " + num(in.padding_bits) + ", expected 0 for " + blob_dtype_name(in.dtype));
    } else if (in.padding_bits >= 8 || (in.size_in_bytes == 0 && in.padding_bits)) {
      fail(who + "padding_bits is " + num(in.padding_bits) + ", expected 0..7 unused bits of the last byte");
    }
    if (in.size_in_bytes && !in.data) fail(who + "no data for " + num(in.size_in_bytes) + " bytes");
    uint64_t pad = pad_to_alignment(pos);
    if (pos > UINT64_MAX - pad - kMetadataSize || in.size_in_bytes > UINT64_MAX - pad - kMetadataSize - pos)
      fail(who + "file size overflows 64 bits");
    pos += pad;
    if (metadata_offsets) metadata_offsets->push_back(pos);
    pos += kMetadataSize + in.size_in_bytes;
  }
  if (pos > SIZE_MAX) fail("blob writer: file of " + num(pos) + " bytes does not fit in memory");
  return size_t(pos);
}

void write_into(const std::vector<Input>& blobs, uint8_t* out, size_t out_size) {
  std::vector<uint64_t> offsets;
  size_t total = write_size(blobs, &offsets);
  if (out_size != total) fail("blob writer: output buffer is " + num(out_size) + " bytes, expected " + num(total));
  // Only header, metadata and padding are zeroed; payloads are copied once.
  std::memset(out, 0, kHeaderSize);
  wr32(out, uint32_t(blobs.size()));
  wr32(out + 4, 2);
  uint64_t pos = kHeaderSize;
  for (size_t i = 0; i < blobs.size(); ++i) {
    uint64_t m = offsets[i];
    std::memset(out + pos, 0, m - pos + kMetadataSize);  // inter-blob padding + metadata record
    uint8_t* p = out + m;
    wr32(p, kSentinel);
    wr32(p + 4, uint32_t(blobs[i].dtype));
    wr64(p + 8, blobs[i].size_in_bytes);
    wr64(p + 16, m + kMetadataSize);
    wr64(p + 24, blobs[i].padding_bits);
    if (blobs[i].size_in_bytes) std::memcpy(p + kMetadataSize, blobs[i].data, blobs[i].size_in_bytes);
    pos = m + kMetadataSize + blobs[i].size_in_bytes;
  }
}

std::vector<uint8_t> write(const std::vector<Input>& blobs, std::vector<uint64_t>* metadata_offsets) {
  std::vector<uint8_t> out(write_size(blobs, metadata_offsets));
  write_into(blobs, out.data(), out.size());
  return out;
}

}  // namespace orion::blob
