// The hardware's request and surface rules, checked with the same texts by every backend before a
// request reaches the device: _ANERequest -validate limits (C42) and the sizes the ANE answers with
// status 0x1d (C04 minimum, C12/C02 uniform alloc per direction, a surface smaller than its tensor).
#pragma once
#include <cstdint>
#include <vector>

#include "runtime/backend.h"

namespace orion::runtime {

void check_request(const std::vector<Surface*>& in, const std::vector<Surface*>& out,
                   const std::vector<IOSlot>& inputs, const std::vector<IOSlot>& outputs, int64_t min_surface_bytes);

}  // namespace orion::runtime
