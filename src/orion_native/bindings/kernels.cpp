#include "bindings/bindings.h"

namespace orion::bindings {

void bind_kernels(nb::module_& m) {}

}  // namespace orion::bindings
