#include "bindings/bindings.h"

namespace orion::bindings {

void bind_mil(nb::module_& m) {}

}  // namespace orion::bindings
