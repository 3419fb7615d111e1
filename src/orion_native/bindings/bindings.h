// One registration function per subject; module.cpp calls them in order.
#pragma once
#include <nanobind/nanobind.h>

namespace nb = nanobind;

namespace orion::bindings {
void bind_errors(nb::module_& m);   // errors.cpp: C++ orion::Error -> orion.errors.* Python classes
void bind_mil(nb::module_& m);      // mil.cpp: parse/print MIL text
void bind_blob(nb::module_& m);     // blob.cpp: MILBlob read/write
void bind_sim(nb::module_& m, nb::module_& testing);  // sim.cpp: constraint/op catalogs, profiles (+ plan hooks)
void bind_runtime(nb::module_& m);  // runtime.cpp: Program, Surface, counters, budget
void bind_kernels(nb::module_& m);  // kernels.cpp: fp16 GEMM and conversion, ISA, threads
void bind_testing_kernels(nb::module_& testing);  // testing_kernels.cpp: single-kernel and thread-pool hooks
void bind_build_info(nb::module_& m);  // build_info.cpp: kernel tables and backends compiled in (orion --version)
}  // namespace orion::bindings
