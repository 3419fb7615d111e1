// See iosurface_storage.h. Manual retain/release (-fno-objc-arc).
#include "ane/iosurface_storage.h"

#import <Foundation/Foundation.h>
#include <IOSurface/IOSurface.h>

#include <cstring>
#include <string>

#include "ane/ane_framework.h"
#include "common/error.h"

namespace orion::ane {

namespace {

class IOSurfaceStorage : public runtime::SurfaceStorage {
 public:
  explicit IOSurfaceStorage(IOSurfaceRef s) : surface_(s) {}
  ~IOSurfaceStorage() override { CFRelease(surface_); }  // request wrappers hold their own retain
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
  // Zero-filled like the simulator's surfaces.
  IOSurfaceLock(s, 0, nullptr);
  std::memset(IOSurfaceGetBaseAddress(s), 0, bytes);
  IOSurfaceUnlock(s, 0, nullptr);
  return std::make_shared<runtime::Surface>(bytes, std::make_unique<IOSurfaceStorage>(s));
}

void surface_cpu_wrote(void* iosurface) {
  IOSurfaceRef s = (IOSurfaceRef)iosurface;
  IOSurfaceLock(s, 0, nullptr);
  IOSurfaceUnlock(s, 0, nullptr);
}

void surface_cpu_will_read(void* iosurface) {
  IOSurfaceRef s = (IOSurfaceRef)iosurface;
  IOSurfaceLock(s, kIOSurfaceLockReadOnly, nullptr);
  IOSurfaceUnlock(s, kIOSurfaceLockReadOnly, nullptr);
}

}  // namespace orion::ane
