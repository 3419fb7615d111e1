// The simulator as a backend: it registers itself as "sim" with the runtime's registry
// (runtime/backends.h), like the ANE backend, and is present in every build. validate() is its compile
// checks without an executable plan, for backends whose device holds the program itself (the ANE).
#pragma once
#include <vector>

#include "common/cost.h"
#include "common/warning.h"
#include "runtime/backend.h"

namespace orion::sim {

// The simulator's compile-time checks of a request without an executable plan (no copy of the
// weights is made or kept). Throws the same CompileErrors as a compile.
struct Validation {
  std::vector<runtime::IOSlot> inputs, outputs;  // hardware slot order
  std::vector<Warning> warnings;
  CostEstimate cost;
};
Validation validate(const runtime::CompileRequest& req);

}  // namespace orion::sim
