// IOSurface-backed surface storage for the ANE backend: a flat 1-D byte buffer
// (width = bytes, height 1, 1 byte per element, bytes-per-row = bytes, alloc size = bytes, pixel
// format 0). Exposed to the runtime (and numpy, zero-copy) through the same Surface type the simulator
// uses; native_handle() is the IOSurfaceRef the request wraps.
//
// CPU access under lock (working code copies in and out between IOSurfaceLock and
// IOSurfaceUnlock): the runtime and numpy views read and write data() at any time, so the CPU holds
// each surface locked (options 0) from creation on, and DeviceAccess unlocks the surfaces of one
// evaluation just for the framework call, then locks them again. Every CPU copy in or out therefore
// happens under a lock, and the device runs with the surfaces unlocked, as in working code.
#pragma once
#include <cstddef>
#include <vector>

#include "runtime/surface.h"

namespace orion::ane {

// Creates an IOSurface of exactly `bytes` bytes, zero-filled and locked for the CPU; throws
// orion::Error when IOSurfaceCreate fails.
runtime::SurfacePtr make_iosurface(size_t bytes);

// Hands the (distinct) surfaces of one evaluation to the device: unlocks them on construction, locks
// them again on destruction. Nested/concurrent uses of one surface unlock it once. Lock failures are
// logged, never thrown.
class DeviceAccess {
 public:
  DeviceAccess(const std::vector<runtime::Surface*>& in, const std::vector<runtime::Surface*>& out);
  ~DeviceAccess();
  DeviceAccess(const DeviceAccess&) = delete;
  DeviceAccess& operator=(const DeviceAccess&) = delete;

 private:
  std::vector<void*> surfaces_;  // IOSurfaceRef
};

}  // namespace orion::ane
