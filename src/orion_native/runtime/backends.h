// Name -> backend registry. Every backend registers itself when it is built: the simulator (sim/backend.cpp)
// always, the ANE (ane/ane_backend.mm) on macOS arm64, or on Linux against the fake framework for contract
// tests.
#pragma once
#include <string>
#include <vector>

#include "runtime/backend.h"

namespace orion::runtime {

// Availability of one backend on this machine; `reason` says why not when unavailable.
struct BackendStatus {
  std::string name;
  bool available = false;
  std::string reason;
};

class BackendProvider {
 public:
  virtual ~BackendProvider() = default;
  virtual std::string name() const = 0;
  // Probes lazily (e.g. dlopen of the private framework) and reports why the backend is unusable.
  virtual BackendStatus status() = 0;
  // Only called when status().available; throws orion::Error otherwise.
  virtual Backend& backend() = 0;
  // Place in backend_statuses() (orion --version, orion.devices()): lower first, then by name.
  // Registration order is static-initialisation order, which no one controls.
  virtual int listing_order() const { return 1; }
};

void register_backend(BackendProvider* provider);  // providers live for the whole process
// Throws OrionError naming the reason when `name` is unknown or unavailable.
Backend& find_backend(const std::string& name);
std::vector<BackendStatus> backend_statuses();

}  // namespace orion::runtime
