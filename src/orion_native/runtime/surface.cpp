#include "runtime/surface.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include <sys/mman.h>
#include <unistd.h>

#include "common/error.h"

namespace orion::runtime {

static std::atomic<uint64_t> g_next_surface_id{1};

void check_surface_size(size_t alloc_size) {
  if (alloc_size == 0) throw_error(ErrorKind::Input, "surface size must be > 0 bytes");
  if (alloc_size > (size_t(1) << 40)) throw_error(ErrorKind::Input, "surface size " + std::to_string(alloc_size) + " bytes is unreasonably large");
}

Surface::Surface(size_t alloc_size, bool mapped) : size_(alloc_size), id_(g_next_surface_id++) {
  check_surface_size(alloc_size);
  size_t rounded = (alloc_size + 63) / 64 * 64;
  if (mapped || rounded >= kMappedBytes) {  // zero pages from the OS, resident once written
    void* p = mmap(nullptr, rounded, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    data_ = static_cast<uint8_t*>(p);
    mapped_ = rounded;
    return;
  }
  data_ = static_cast<uint8_t*>(std::aligned_alloc(64, rounded));
  if (!data_) throw std::bad_alloc();
  std::memset(data_, 0, rounded);
}

void Surface::zero() {
  if (mapped_) {  // fresh zero pages over the same range: portable, unlike MADV_DONTNEED's semantics
    void* p = mmap(data_, mapped_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    return;
  }
  std::memset(data_, 0, size_);
}

size_t Surface::resident_bytes() const {
  if (!mapped_) return size_;
  const size_t page = (size_t)sysconf(_SC_PAGESIZE);
  const size_t pages = (mapped_ + page - 1) / page;
#if defined(__APPLE__)
  std::vector<char> in(pages);
#else
  std::vector<unsigned char> in(pages);
#endif
  if (mincore(data_, mapped_, in.data()) != 0) return size_;
  size_t n = 0;
  for (auto c : in) n += (c & 1);
  return std::min(size_, n * page);
}

Surface::Surface(size_t alloc_size, std::unique_ptr<SurfaceStorage> storage)
    : storage_(std::move(storage)), size_(alloc_size), id_(g_next_surface_id++) {
  if (!storage_ || !storage_->data()) throw_error(ErrorKind::Orion, "backend surface allocation failed");
  data_ = storage_->data();
}

void Surface::set_panels(std::vector<cpu::kernels::PanelsAt> parts) {
  std::sort(parts.begin(), parts.end(), [](const auto& a, const auto& b) { return a.offset < b.offset; });
  int64_t end = 0;
  for (const auto& p : parts) {
    if (!p.weight) throw_error(ErrorKind::Input, "surface panels: a part without a weight");
    if (p.width < 16 || p.width % 16 || p.ld < p.width || p.offset < end || p.offset % 2 ||
        p.offset + p.bytes() > (int64_t)size_)
      throw_error(ErrorKind::Input, "surface panels: a part at byte " + std::to_string(p.offset) + " (width " +
                                        std::to_string(p.width) + ", ld " + std::to_string(p.ld) + ", " +
                                        std::to_string(p.bytes()) + " bytes) must have width a multiple of 16, "
                                        "ld >= width, lie within the " + std::to_string(size_) +
                                        "-byte surface, 2-byte aligned, after the previous part");
    end = p.offset + p.bytes();
  }
  std::lock_guard<std::mutex> lk(panels_mu_);
  panels_ = std::move(parts);
  materialized_ = false;
}

void Surface::materialize_panels() {
  std::lock_guard<std::mutex> lk(panels_mu_);
  if (materialized_) return;
  for (const auto& p : panels_) p.weight->panels_into(reinterpret_cast<f16*>(data_ + p.offset), p.width, p.ld);
  materialized_ = true;
}

Surface::~Surface() {
  if (mapped_)
    munmap(data_, mapped_);
  else if (!storage_)
    std::free(data_);
}

}  // namespace orion::runtime
