#include "bindings/bindings.h"

namespace orion::bindings {

void bind_sim(nb::module_& m) {}

}  // namespace orion::bindings
