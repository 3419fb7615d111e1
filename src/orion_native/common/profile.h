// The device profile every backend compiles for: which chip's documented behaviour to reproduce and how
// strictly to treat the contested constraints (confidence [X] in the simulator's catalog,
// sim/constraints.cpp): strict rejects them. Part of the program identifier (profile_key).
#pragma once
#include <cstdint>
#include <string>

namespace orion {

enum class Chip { m1, m2, m3, m4, m5 };
inline constexpr Chip kChips[] = {Chip::m1, Chip::m2, Chip::m3, Chip::m4, Chip::m5};
inline constexpr int64_t kMinSurfaceBytes = 49152;  // C04: the one definition (Python reads it: sim_defaults)
inline constexpr int64_t kCompileBudget = 119;      // C05
enum class Strictness { strict, permissive };
// C07: "hardware" = a reload of an unchanged identifier reuses the baked
// program (measured on M4/M5); "paper" = the reload picks up rewritten weight files (Orion's claim).
enum class DeltaBehaviour { hardware, paper };

struct Profile {
  Chip chip = Chip::m4;
  Strictness strictness = Strictness::strict;
  DeltaBehaviour delta = DeltaBehaviour::hardware;
  int64_t min_surface_bytes = kMinSurfaceBytes;
  int64_t compile_budget = kCompileBudget;
  bool legacy_chip() const { return chip == Chip::m1 || chip == Chip::m2; }
  bool strict() const { return strictness == Strictness::strict; }
};

const char* chip_name(Chip c);
bool chip_from_name(const std::string& s, Chip* out);
std::string profile_key(const Profile& p);  // stable text, part of the program identifier

}  // namespace orion
