// MILBlob storage format v2 (coremltools' MILBlob/Blob/StorageFormat.hpp): reader with spec validation,
// writer. All integers little-endian. A file is a 64-byte storage header (u32 count of blobs, u32
// version = 2, reserved zeros), then per blob a 64-byte metadata record at a 64-aligned offset M
// (u32 sentinel 0xDEADBEEF, u32 BlobDType code, u64 payload size in bytes, u64 payload offset = M + 64,
// u64 unused bits in the last byte of a sub-byte payload, reserved zeros), the payload at M + 64 and
// zero padding up to the next multiple of 64 (none after the last payload). The MIL BLOBFILE offset is
// M, not the payload's offset (C08). Sub-byte payloads are row-major and packed LSB-first.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace orion::blob {

enum class BlobDType : uint32_t {
  Float16 = 1, Float32 = 2, UInt8 = 3, Int8 = 4, BFloat16 = 5, Int16 = 6, UInt16 = 7, Int4 = 8,
  UInt1 = 9, UInt2 = 10, UInt4 = 11, UInt3 = 12, UInt6 = 13, Int32 = 14, UInt32 = 15,
  Float8E4M3FN = 16, Float8E5M2 = 17,
};
bool blob_dtype_valid(uint32_t code);
const char* blob_dtype_name(BlobDType t);
unsigned blob_dtype_bits(BlobDType t);  // 16, 32, 8, 4, 1, ...

constexpr uint32_t kSentinel = 0xDEADBEEFu;
constexpr size_t kHeaderSize = 64, kMetadataSize = 64, kAlignment = 64;

struct Record {
  uint64_t metadata_offset = 0;  // = the MIL BLOBFILE offset
  BlobDType dtype = BlobDType::Float16;
  uint64_t size_in_bytes = 0;    // field as stored
  uint64_t data_offset = 0;      // field as stored (spec: metadata_offset + 64)
  uint64_t padding_bits = 0;
};

struct ReadOptions {
  // strict (C08 strict / C32 m1-m2 profiles): spec violations that upstream files commit
  // (count mismatch, offset != M+64, non-zero reserved) become errors instead of warnings.
  bool strict_spec = false;
  // C08 permissive: accept a record whose sentinel is wrong and read the payload at offset + 64.
  bool ignore_sentinel = false;
};

struct Blob {
  Record record;
  const uint8_t* payload = nullptr;  // = file + metadata_offset + 64 (where the M4 compiler reads it)
  size_t payload_size = 0;           // bytes available for the payload (= size_in_bytes when valid)
  std::vector<std::string> warnings; // spec deviations tolerated under the options
  // false when the sentinel was wrong and ignored (C08 permissive): the record fields are then
  // whatever bytes sit there, and payload_size is everything from metadata_offset + 64 to the end.
  bool metadata_valid = true;
};

// Locates the blob whose metadata record sits at `metadata_offset`.
// Throws orion::Error(BlobFormat) for: file shorter than the header, version != 2, offset not
// 64-aligned or < 64, metadata or payload past the end of the file, bad sentinel (unless
// ignore_sentinel), unknown dtype code. Messages name the offset and what was expected.
Blob read(const uint8_t* file, size_t file_size, uint64_t metadata_offset, const ReadOptions& opt = {});

// Walks the whole file from offset 64 (records every 64-aligned metadata block in sequence).
std::vector<Record> list(const uint8_t* file, size_t file_size, std::vector<std::string>* warnings = nullptr);
// Same, with ReadOptions::strict_spec turning the tolerated deviations into errors
// (ignore_sentinel does not apply: the chain cannot be followed past a bad record).
std::vector<Record> list(const uint8_t* file, size_t file_size, std::vector<std::string>* warnings,
                         const ReadOptions& opt);

// Payload bytes of `elements` values of type t: ceil(elements * bits / 8). False on u64 overflow.
bool payload_bytes(BlobDType t, uint64_t elements, uint64_t* bytes);

// Checks a blob against the MIL const that references it (its dtype is the declared one, and its size
// is the element count x the dtype's size): throws BlobFormat.
// For a blob read with an ignored bad sentinel only "enough payload bytes" is checked.
void check_declaration(const Blob& blob, BlobDType declared, uint64_t element_count);

struct Input {
  BlobDType dtype;
  const uint8_t* data;
  size_t size_in_bytes;     // sub-byte types: ceil(n*bits/8), already packed LSB-first
  uint64_t padding_bits = 0;
};

// Spec-exact file (true count, 64-byte alignment, u64 size/offset, zeroed reserved fields, no tail
// padding after the last payload), identical bytes to coremltools' _BlobStorageWriter.
// metadata_offsets (optional) receives each blob's MIL offset.
std::vector<uint8_t> write(const std::vector<Input>& blobs, std::vector<uint64_t>* metadata_offsets = nullptr);

// Two-step form of write() for callers that own the output buffer (no extra copy of large payloads):
// write_size validates the inputs and returns the file size; write_into fills exactly that many bytes.
size_t write_size(const std::vector<Input>& blobs, std::vector<uint64_t>* metadata_offsets = nullptr);
void write_into(const std::vector<Input>& blobs, uint8_t* out, size_t out_size);

}  // namespace orion::blob
