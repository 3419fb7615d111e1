// IOSurface-backed surface storage for the ANE backend (ane-private-api.md §5): a flat 1-D byte buffer
// (width = bytes, height 1, 1 byte per element, bytes-per-row = bytes, alloc size = bytes, pixel
// format 0). Exposed to the runtime (and numpy, zero-copy) through the same Surface type the simulator
// uses; native_handle() is the IOSurfaceRef the request wraps.
#pragma once
#include <cstddef>

#include "runtime/surface.h"

namespace orion::ane {

// Creates an IOSurface of exactly `bytes` bytes; throws orion::Error when IOSurfaceCreate fails.
runtime::SurfacePtr make_iosurface(size_t bytes);

// Lock/unlock handshakes around an evaluation (§5 "Write"/"Read"): the CPU wrote the inputs through
// data(), the ANE writes the outputs.
void surface_cpu_wrote(void* iosurface);
void surface_cpu_will_read(void* iosurface);

}  // namespace orion::ane
