#include "bindings/bindings.h"

NB_MODULE(_native, m) {
  m.doc() = "orion native core: MIL parser, MILBlob I/O, ANE simulator and program runtime";
  orion::bindings::bind_errors(m);
  orion::bindings::bind_mil(m);
  orion::bindings::bind_blob(m);
  // Test-only hooks into the kernels and the plan builder live apart from the product API.
  nb::module_ testing = m.def_submodule("testing", "Test-only hooks (kernels, plan builder): not part of orion's API.");
  orion::bindings::bind_sim(m, testing);
  orion::bindings::bind_runtime(m);
  orion::bindings::bind_kernels(m);
  orion::bindings::bind_testing_kernels(testing);
  orion::bindings::bind_build_info(m);
}
