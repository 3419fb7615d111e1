// mil::Program -> canonical MIL text in the program's own dialect (round-trips through parse()).
#pragma once
#include <string>

#include "mil/ast.h"

namespace orion::mil {

std::string print(const Program& p);
// Literal printing shared with codegen-style callers: fp16/fp32 values print as the shortest decimal
// that round-trips after rounding to the literal's dtype (never "%f", which turns 1e-7 into 0.000000).
std::string print_literal(const Literal& lit, Dialect d);
std::string print_type(const Type& t, Dialect d);

}  // namespace orion::mil
