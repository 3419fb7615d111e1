// MIL text -> mil::Program. Throws orion::Error(MILSyntax) with line:column and what was expected.
#pragma once
#include <string_view>

#include "mil/ast.h"

namespace orion::mil {

Program parse(std::string_view text);

}  // namespace orion::mil
