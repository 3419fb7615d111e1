// Diagnostics and settings of the ANE backend, for `orion doctor` and the tests. C++ callers use
// orion::ane::control(); Python reaches the same function through the exported C symbol
// orion_ane_control (ctypes on the _native module: python/orion/native/runtime.py), so no binding is needed.
//
// Commands (the answer is JSON; {"error": "..."} on failure):
//   "info"                    availability, reason, device record, warnings of the optional probes,
//                             route status ("client": "unverified (known to fail on M4 Max)" when its
//                             selectors exist), stats, live models/folders
//   "route=inmemory|client"   route for later compiles (client: experimental, only where its
//                             selectors exist)
//   "entry=two|one"           weight-dictionary entry shape (docs/ane-framework.md)
//   "shutdown"                unload and release every model, remove every folder
#pragma once
#include <string>

namespace orion::ane {
std::string control(const std::string& command);
}

extern "C" const char* orion_ane_control(const char* command);
