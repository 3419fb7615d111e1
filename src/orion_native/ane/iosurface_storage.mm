// See iosurface_storage.h. Manual retain/release (-fno-objc-arc).
#include "ane/iosurface_storage.h"

#import <Foundation/Foundation.h>
#include <IOSurface/IOSurface.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>

#include "ane/ane_framework.h"
#include "common/error.h"

namespace orion::ane {

namespace {

// Per live surface: how many evaluations currently have it (0 = the CPU holds the lock).
std::mutex g_mu;
std::unordered_map<IOSurfaceRef, int>& device_users() {
  static auto* m = new std::unordered_map<IOSurfaceRef, int>();
  return *m;
}

void log_lock_failure(const char* fn, IOSurfaceRef s, int kr) {
  std::fprintf(stderr, "orion: warning: %s(<IOSurface %zu B>, 0, NULL) returned %d%s\n", fn, IOSurfaceGetAllocSize(s), kr,
               context().c_str());
}

class IOSurfaceStorage : public runtime::SurfaceStorage {
 public:
  explicit IOSurfaceStorage(IOSurfaceRef s) : surface_(s) {
    std::lock_guard<std::mutex> lk(g_mu);
    device_users()[s] = 0;
  }
  ~IOSurfaceStorage() override {
    {
      std::lock_guard<std::mutex> lk(g_mu);
      device_users().erase(surface_);
    }
    IOSurfaceUnlock(surface_, 0, nullptr);  // the CPU's lock (see iosurface_storage.h)
    CFRelease(surface_);                    // request wrappers hold their own retain
  }
  uint8_t* data() override { return static_cast<uint8_t*>(IOSurfaceGetBaseAddress(surface_)); }
  void* native_handle() override { return (void*)surface_; }

 private:
  IOSurfaceRef surface_;
};

NSNumber* num(size_t v) { return [NSNumber numberWithUnsignedLongLong:(unsigned long long)v]; }

}  // namespace

runtime::SurfacePtr make_iosurface(size_t bytes) {
  if (bytes == 0) throw_error(ErrorKind::Input, "surface size must be > 0 bytes");
  Pool pool;
  id<NSCopying> keys[] = {(id)kIOSurfaceWidth,       (id)kIOSurfaceHeight,    (id)kIOSurfaceBytesPerElement,
               (id)kIOSurfaceBytesPerRow, (id)kIOSurfaceAllocSize, (id)kIOSurfacePixelFormat};
  id values[] = {num(bytes), num(1), num(1), num(bytes), num(bytes), num(0)};
  NSDictionary* props = [NSDictionary dictionaryWithObjects:values forKeys:keys count:6];
  IOSurfaceRef s = IOSurfaceCreate((CFDictionaryRef)props);
  if (!s) throw_error(ErrorKind::Orion, "IOSurfaceCreate failed for " + std::to_string(bytes) + " bytes" + context());
  if (IOSurfaceGetAllocSize(s) < bytes) {
    size_t got = IOSurfaceGetAllocSize(s);
    CFRelease(s);
    throw_error(ErrorKind::Orion, "IOSurfaceCreate returned " + std::to_string(got) + " bytes, asked for " +
                                      std::to_string(bytes) + context());
  }
  // Locked for the CPU from here on; zero-filled like the simulator's surfaces.
  if (int kr = IOSurfaceLock(s, 0, nullptr)) log_lock_failure("IOSurfaceLock", s, kr);
  std::memset(IOSurfaceGetBaseAddress(s), 0, bytes);
  return std::make_shared<runtime::Surface>(bytes, std::make_unique<IOSurfaceStorage>(s));
}

DeviceAccess::DeviceAccess(const std::vector<runtime::Surface*>& in, const std::vector<runtime::Surface*>& out) {
  for (const auto* list : {&in, &out})
    for (auto* s : *list)
      if (void* h = s ? s->native_handle() : nullptr; h && std::find(surfaces_.begin(), surfaces_.end(), h) == surfaces_.end())
        surfaces_.push_back(h);
  std::lock_guard<std::mutex> lk(g_mu);
  for (void* h : surfaces_) {
    IOSurfaceRef s = (IOSurfaceRef)h;
    auto it = device_users().find(s);
    if (it == device_users().end() || it->second++ > 0) continue;
    if (int kr = IOSurfaceUnlock(s, 0, nullptr)) log_lock_failure("IOSurfaceUnlock", s, kr);
  }
}

DeviceAccess::~DeviceAccess() {
  std::lock_guard<std::mutex> lk(g_mu);
  for (void* h : surfaces_) {
    IOSurfaceRef s = (IOSurfaceRef)h;
    auto it = device_users().find(s);
    if (it == device_users().end() || --it->second > 0) continue;
    if (int kr = IOSurfaceLock(s, 0, nullptr)) log_lock_failure("IOSurfaceLock", s, kr);
  }
}

}  // namespace orion::ane
