// One C++ exception type for every orion failure; bindings/errors.cpp maps each kind to the
// matching Python class in orion.errors (OrionError hierarchy) and copies the fields over.
#pragma once
#include <stdexcept>
#include <string>

namespace orion {

enum class ErrorKind {
  Orion,          // generic OrionError
  MILSyntax,      // malformed MIL text: line/column set
  Compile,        // program rejected at compile: constraint (e.g. "C18") and statement set
  Eval,           // hardware-style eval failure: status (e.g. 0x1d) and constraint set
  Budget,         // per-process compile budget exhausted (C05)
  WeightUpdate,   // a weight-update primitive failed
  BlobFormat,     // malformed MILBlob file
  ProgramState,   // released/unloaded program used, wrong lifecycle order
  Input,          // bad caller arrays: unknown/missing names, wrong shape/dtype, non-contiguous
};

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& msg) : std::runtime_error(msg), kind(kind) {}
  ErrorKind kind;
  std::string constraint;  // "C03" ... when a documented ANE constraint is the cause
  std::string statement;   // offending MIL statement (SSA name) when known
  int line = 0, column = 0;  // MILSyntax (1-based)
  int status = 0;            // Eval: hardware status code
};

[[noreturn]] void throw_error(ErrorKind kind, const std::string& msg);
[[noreturn]] void throw_syntax(int line, int column, const std::string& msg);
// msg should already follow the hardware's text ("InvalidMILProgram: ...", "ANECCompile() FAILED:
// err=(CompilationFailure) ..."); " [Cnn]" is appended when constraint is set.
[[noreturn]] void throw_compile(const std::string& constraint, const std::string& statement, const std::string& msg);
[[noreturn]] void throw_eval(int status, const std::string& constraint, const std::string& msg);

}  // namespace orion
