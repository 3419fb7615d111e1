// SHA-256 (FIPS 180-4). Program identifiers hash MIL text, weight bytes and options with it, as the
// ANE framework's _ANEHashEncoding does (docs/ane-framework.md).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace orion::runtime {

class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t n);
  void final(uint8_t out[32]);
  std::string hex_upper();  // finishes and returns 64 upper-case hex characters

 private:
  void block(const uint8_t* p);
  uint32_t h_[8];
  uint8_t buf_[64];
  size_t buf_len_ = 0;
  uint64_t total_ = 0;
};

std::string sha256_hex(const void* data, size_t n);

}  // namespace orion::runtime
