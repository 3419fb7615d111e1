// IOSurface-like flat byte buffer: what a program's inputs and outputs are bound to. Zero-filled,
// 64-byte aligned. Tensors are stored packed [1, C, 1, S] from byte 0 (C14); the alloc size is what
// the hardware checks (C02, C04, C12). A big simulator surface is mapped zero pages, resident only where
// written: C12 sizes every input of a program like its largest (a shared layer program's: a 32 MB weight),
// and the padding past a small input's tensor is never touched.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>

namespace orion::runtime {

// Where a surface's bytes live: plain aligned memory (simulator) or an IOSurface (ANE backend).
class SurfaceStorage {
 public:
  virtual ~SurfaceStorage() = default;
  virtual uint8_t* data() = 0;
  virtual void* native_handle() { return nullptr; }  // IOSurfaceRef for the ANE backend
};

class Surface {
 public:
  explicit Surface(size_t alloc_size);  // aligned heap memory
  Surface(size_t alloc_size, std::unique_ptr<SurfaceStorage> storage);  // backend-provided memory
  ~Surface();
  Surface(const Surface&) = delete;
  Surface& operator=(const Surface&) = delete;

  size_t alloc_size() const { return size_; }
  // Bytes of it in memory now: the alloc size, or a mapped surface's resident pages (mincore).
  size_t resident_bytes() const;
  static constexpr size_t kMappedBytes = size_t(1) << 20;  // heap below, mapped pages from here
  uint8_t* data() { return data_; }
  const uint8_t* data() const { return data_; }
  uint64_t id() const { return id_; }
  void* native_handle() const { return storage_ ? storage_->native_handle() : nullptr; }

 private:
  std::unique_ptr<SurfaceStorage> storage_;
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
  size_t mapped_ = 0;  // bytes mapped (0: heap or backend memory)
  uint64_t id_ = 0;
};

using SurfacePtr = std::shared_ptr<Surface>;

// Refuses (InputError) a surface size of 0 or beyond any real device (1 TiB), for every backend's surfaces.
void check_surface_size(size_t alloc_size);

}  // namespace orion::runtime
