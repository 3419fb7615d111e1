#include "bindings/bindings.h"

namespace orion::bindings {

void bind_blob(nb::module_& m) {}

}  // namespace orion::bindings
