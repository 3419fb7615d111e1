#include "bindings/bindings.h"

namespace orion::bindings {

void bind_runtime(nb::module_& m) {}

}  // namespace orion::bindings
