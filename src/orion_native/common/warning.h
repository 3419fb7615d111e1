// A warning a backend reports with a compile or an eval: behaviour the hardware shows that the caller
// may not expect (reproduce-class constraints); Python raises it as AneSimWarning.
#pragma once
#include <string>

namespace orion {

struct Warning {
  std::string constraint;  // "C06", ... or "" for general notes
  std::string message;     // "AneSimWarning: <detail> [Cnn]" style text
};

}  // namespace orion
