#include "bindings/bindings.h"

NB_MODULE(_native, m) {
  m.doc() = "orion native core: MIL parser, MILBlob I/O, ANE simulator and program runtime";
  orion::bindings::bind_errors(m);
  orion::bindings::bind_mil(m);
  orion::bindings::bind_blob(m);
  orion::bindings::bind_sim(m);
  orion::bindings::bind_runtime(m);
  orion::bindings::bind_kernels(m);
  orion::bindings::bind_build_info(m);
}
