#include "common/error.h"
#include <cstdio>

namespace orion {

void throw_error(ErrorKind kind, const std::string& msg) { throw Error(kind, msg); }

void throw_syntax(int line, int column, const std::string& msg) {
  Error e(ErrorKind::MILSyntax, "MIL syntax error at " + std::to_string(line) + ":" + std::to_string(column) + ": " + msg);
  e.line = line;
  e.column = column;
  throw e;
}

void throw_compile(const std::string& constraint, const std::string& statement, const std::string& msg) {
  std::string m = msg;
  if (!statement.empty()) m += " (statement '" + statement + "')";
  if (!constraint.empty()) m += " [" + constraint + "]";
  Error e(ErrorKind::Compile, m);
  e.constraint = constraint;
  e.statement = statement;
  throw e;
}

void throw_eval(int status, const std::string& constraint, const std::string& msg) {
  char hex[16];
  snprintf(hex, sizeof hex, "0x%x", status);
  std::string m = std::string("ANEProgramProcessRequestDirect() Failed with status=") + hex + " : Program Inference error: " + msg;
  if (!constraint.empty()) m += " [" + constraint + "]";
  Error e(ErrorKind::Eval, m);
  e.status = status;
  e.constraint = constraint;
  throw e;
}

}  // namespace orion
