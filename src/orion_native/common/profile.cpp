#include "common/profile.h"

namespace orion {

const char* chip_name(Chip c) {
  switch (c) {
    case Chip::m1: return "m1";
    case Chip::m2: return "m2";
    case Chip::m3: return "m3";
    case Chip::m4: return "m4";
    case Chip::m5: return "m5";
  }
  return "?";
}

bool chip_from_name(const std::string& s, Chip* out) {
  for (Chip c : kChips)
    if (s == chip_name(c)) { *out = c; return true; }
  return false;
}

std::string profile_key(const Profile& p) {
  return std::string("chip=") + chip_name(p.chip) + ";strict=" + (p.strict() ? "1" : "0") +
         ";delta=" + (p.delta == DeltaBehaviour::paper ? "paper" : "hardware") +
         ";min_surface=" + std::to_string(p.min_surface_bytes);
}

}  // namespace orion
