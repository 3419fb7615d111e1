#include "runtime/request_rules.h"

#include <string>

#include "common/error.h"

namespace orion::runtime {

namespace {

void check_sizes(const std::vector<Surface*>& ss, const std::vector<IOSlot>& slots, const char* dir,
                 const char* uniform_id, int64_t min_surface) {
  for (size_t i = 0; i < ss.size(); ++i) {
    if ((int64_t)ss[i]->alloc_size() < min_surface)
      throw_eval(0x1d, "C04", std::string(dir) + " surface for '" + slots[i].name + "' is " +
                                  std::to_string(ss[i]->alloc_size()) + " bytes; every surface must be >= " +
                                  std::to_string(min_surface) + " bytes");
    if (ss[i]->alloc_size() != ss[0]->alloc_size())
      throw_eval(0x1d, uniform_id, std::string("all ") + dir + " surfaces of a program must have the same alloc size ('" +
                                       slots[0].name + "' " + std::to_string(ss[0]->alloc_size()) + " B, '" +
                                       slots[i].name + "' " + std::to_string(ss[i]->alloc_size()) + " B)");
    if (ss[i]->alloc_size() < slots[i].bytes())
      throw_eval(0x1d, "", std::string(dir) + " surface bound to slot " + std::to_string(i) + " ('" + slots[i].name +
                               "') holds " + std::to_string(ss[i]->alloc_size()) + " bytes, the tensor needs " +
                               std::to_string(slots[i].bytes()));
  }
}

}  // namespace

void check_request(const std::vector<Surface*>& in, const std::vector<Surface*>& out,
                   const std::vector<IOSlot>& inputs, const std::vector<IOSlot>& outputs, int64_t min_surface_bytes) {
  // -validate makes evaluate return NO without an NSError.
  if (in.empty() || out.empty())
    throw_eval(0, "C42", "request rejected by -validate: a request needs at least one input and one output surface");
  if (in.size() > 255 || out.size() > 255) throw_eval(0, "C42", "request rejected by -validate: more than 255 buffers");
  if (in.size() != inputs.size() || out.size() != outputs.size())
    throw_eval(0x1d, "", "program has " + std::to_string(inputs.size()) + " inputs and " +
                             std::to_string(outputs.size()) + " outputs but the request binds " +
                             std::to_string(in.size()) + " and " + std::to_string(out.size()));
  for (auto* s : in) if (!s) throw_error(ErrorKind::Input, "null input surface");
  for (auto* s : out) if (!s) throw_error(ErrorKind::Input, "null output surface");
  check_sizes(in, inputs, "input", "C12", min_surface_bytes);
  check_sizes(out, outputs, "output", "C02", min_surface_bytes);
}

}  // namespace orion::runtime
