// build_info(): what this build of the module contains, for `orion --version` and bug reports. A wheel
// is built once and runs on many CPUs, so the kernel tables compiled in (the dispatcher picks one at run
// time) and the backends compiled in are facts of the build, told apart from what this machine uses.
#include <nanobind/stl/string.h>

#include <string>

#include "bindings/bindings.h"
#include "runtime/backends.h"
#include "cpu/kernels/kernels.h"
#include "cpu/simd/isa.h"

namespace orion::bindings {

void bind_build_info(nb::module_& m) {
  m.def("build_info", [] {
    namespace simd = orion::cpu::simd;
    nb::list isas;
    isas.append("scalar");
    for (const simd::IsaOps* t : {simd::avx2_ops(), simd::avx512_ops(), simd::neon_ops()})
      if (t) isas.append(t->name);
    nb::list backends;
    for (const auto& s : runtime::backend_statuses()) backends.append(s.name);
    nb::dict d;
    d["isas"] = isas;
    d["isa"] = std::string(orion::cpu::kernels::isa_name());
    d["backends"] = backends;
#if defined(Py_LIMITED_API)
    d["stable_abi"] = true;
#else
    d["stable_abi"] = false;
#endif
#if defined(__clang__)
    d["compiler"] = std::string(__VERSION__);  // "Apple LLVM 15.0.0 (clang-...)", "Debian Clang 14.0.6"
#elif defined(__GNUC__)
    d["compiler"] = std::string("GCC ") + __VERSION__;
#else
    d["compiler"] = std::string("unknown");
#endif
    return d;
  }, "The build: kernel tables compiled in ('isas'; 'isa' is the one this CPU uses), backends compiled in, "
     "whether the module uses CPython's stable ABI (abi3), and the compiler.");
}

}  // namespace orion::bindings
