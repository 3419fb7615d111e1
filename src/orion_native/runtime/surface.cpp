#include "runtime/surface.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>

#include "common/error.h"

namespace orion::runtime {

static std::atomic<uint64_t> g_next_surface_id{1};

void check_surface_size(size_t alloc_size) {
  if (alloc_size == 0) throw_error(ErrorKind::Input, "surface size must be > 0 bytes");
  if (alloc_size > (size_t(1) << 40)) throw_error(ErrorKind::Input, "surface size " + std::to_string(alloc_size) + " bytes is unreasonably large");
}

Surface::Surface(size_t alloc_size) : size_(alloc_size), id_(g_next_surface_id++) {
  check_surface_size(alloc_size);
  size_t rounded = (alloc_size + 63) / 64 * 64;
  data_ = static_cast<uint8_t*>(std::aligned_alloc(64, rounded));
  if (!data_) throw std::bad_alloc();
  std::memset(data_, 0, rounded);
}

Surface::Surface(size_t alloc_size, std::unique_ptr<SurfaceStorage> storage)
    : storage_(std::move(storage)), size_(alloc_size), id_(g_next_surface_id++) {
  if (!storage_ || !storage_->data()) throw_error(ErrorKind::Orion, "backend surface allocation failed");
  data_ = storage_->data();
}

Surface::~Surface() {
  if (!storage_) std::free(data_);
}

}  // namespace orion::runtime
