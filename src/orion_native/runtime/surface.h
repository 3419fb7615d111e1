// IOSurface-like flat byte buffer: what a program's inputs and outputs are bound to. Zero-filled,
// 64-byte aligned. Tensors are stored packed [1, C, 1, S] from byte 0 (C14); the alloc size is what
// the hardware checks (C02, C04, C12). A big simulator surface is mapped zero pages, resident only where
// written: C12 sizes every input of a program like its largest (a shared layer program's: a 32 MB weight),
// and the padding past a small input's tensor is never touched.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "cpu/kernels/compressed.h"

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
  // Aligned heap memory below kMappedBytes, mapped zero pages from there - or whatever its size with `mapped`
  // (a surface whose panels stand for its bytes: never written on the simulator).
  explicit Surface(size_t alloc_size, bool mapped = false);
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
  // All bytes zero again; a mapped surface gives its pages back (resident_bytes 0).
  void zero();
  void* native_handle() const { return storage_ ? storage_->native_handle() : nullptr; }

  // Compressed weights standing for parts of its bytes (a streamed layer's weight input): a simulator program
  // whose every reader of the input is a panel GEMM reads them and never the bytes, which stay zero pages; for any
  // other reader - another backend, another program - the runtime decodes them into the bytes first, once
  // (materialize_panels). Refused (InputError) unless each part lies within the surface, 2-byte aligned, with
  // width a multiple of 16, ld >= width, and no two parts overlap.
  void set_panels(std::vector<cpu::kernels::PanelsAt> parts);
  const std::vector<cpu::kernels::PanelsAt>& panels() const { return panels_; }
  void materialize_panels();

 private:
  std::unique_ptr<SurfaceStorage> storage_;
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
  size_t mapped_ = 0;  // bytes mapped (0: heap or backend memory)
  uint64_t id_ = 0;
  std::vector<cpu::kernels::PanelsAt> panels_;
  std::mutex panels_mu_;
  bool materialized_ = false;
};

using SurfacePtr = std::shared_ptr<Surface>;

// Refuses (InputError) a surface size of 0 or beyond any real device (1 TiB), for every backend's surfaces.
void check_surface_size(size_t alloc_size);

}  // namespace orion::runtime
