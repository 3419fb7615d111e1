#include "runtime/backends.h"

#include <algorithm>
#include <mutex>

#include "common/error.h"

namespace orion::runtime {

namespace {
std::mutex g_mu;
std::vector<BackendProvider*>& providers() {
  static std::vector<BackendProvider*> p;
  return p;
}
}  // namespace

void register_backend(BackendProvider* provider) {
  std::lock_guard<std::mutex> lk(g_mu);
  providers().push_back(provider);
}

Backend& find_backend(const std::string& name) {
  BackendProvider* found = nullptr;
  {
    std::lock_guard<std::mutex> lk(g_mu);
    for (auto* p : providers())
      if (p->name() == name) found = p;
  }
  if (!found)
    throw_error(ErrorKind::Orion, "backend '" + name + "' is not built into this orion (the ANE backend is built on macOS arm64); "
                                  "use device='sim' or 'auto'");
  BackendStatus st = found->status();
  if (!st.available) throw_error(ErrorKind::Orion, "backend '" + name + "' is unavailable: " + st.reason);
  return found->backend();
}

std::vector<BackendStatus> backend_statuses() {
  std::vector<BackendProvider*> ps;
  {
    std::lock_guard<std::mutex> lk(g_mu);
    ps = providers();
  }
  std::stable_sort(ps.begin(), ps.end(), [](BackendProvider* a, BackendProvider* b) {
    return a->listing_order() != b->listing_order() ? a->listing_order() < b->listing_order() : a->name() < b->name();
  });
  std::vector<BackendStatus> out;
  for (auto* p : ps) out.push_back(p->status());
  return out;
}

}  // namespace orion::runtime
