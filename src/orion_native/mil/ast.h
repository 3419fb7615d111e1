// Parsed MIL program, as written: no type checking beyond syntax.
// Produced by mil/parser.h, printed back by mil/printer.h, checked and lowered by sim/.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/dtype.h"

namespace orion::mil {

struct SrcLoc {
  int line = 0, column = 0;  // 1-based; 0 = unknown
};

enum class Dialect { ios18, ios16 };  // program(1.3)/func<ios18|ios17>  vs  program(1.0)/func<ios16>

// A type as spelled in the text: bare scalar `fp16` (scalar_form = true, shape empty) or
// `tensor<fp16, [1, 2]>` (scalar_form = false; `tensor<fp16, []>` is the legacy rank-0 form).
struct Type {
  DType dtype = DType::fp16;
  Shape shape;
  bool scalar_form = false;
  int rank() const { return (int)shape.size(); }
};

// A literal value. Exactly one of the value vectors is used, chosen by type.dtype:
//   floats -> f (double, as written, not yet rounded), ints/bool -> i, string -> s.
// Tensor literals list values in row-major order; scalar literals hold one value.
struct Literal {
  enum class Kind { Scalar, Tensor, BlobFile };
  Kind kind = Kind::Scalar;
  Type type;
  std::vector<double> f;
  std::vector<int64_t> i;
  std::vector<std::string> s;
  // BlobFile only: path string as written (e.g. "@model_path/weights/w.bin") and the metadata offset.
  std::string blob_path;
  uint64_t blob_offset = 0;
  SrcLoc loc;
};

// op argument: `name = value` where value is an identifier, a literal, or a tuple of identifiers.
struct Arg {
  enum class Kind { Ref, Literal, Tuple };
  std::string name;
  Kind kind = Kind::Ref;
  std::string ref;                  // Ref
  Literal literal;                  // Literal (inline literal; see C15 for where the ANE forbids them)
  std::vector<std::string> tuple;   // Tuple: (a, b, c)
  SrcLoc loc;
};

// attribute in `[...]` after the call: `name = string("h")`, `val = ...` (const), constexpr params.
struct Attr {
  std::string name;
  Literal value;
  SrcLoc loc;
};

// `TYPE out = op(args)[attrs];`
struct Stmt {
  Type type;
  std::string out;
  std::string op;
  std::vector<Arg> args;
  std::vector<Attr> attrs;
  SrcLoc loc;
  const Arg* arg(const std::string& n) const {
    for (const auto& a : args) if (a.name == n) return &a;
    return nullptr;
  }
  const Attr* attr(const std::string& n) const {
    for (const auto& a : attrs) if (a.name == n) return &a;
    return nullptr;
  }
};

struct Param {
  Type type;
  std::string name;
  SrcLoc loc;
};

struct Function {
  std::string name;   // "main"
  std::string opset;  // "ios18", "ios17", "ios16"
  std::vector<Param> params;
  std::vector<Stmt> stmts;
  std::vector<std::string> returns;      // return tuple, in text order
  std::vector<SrcLoc> return_locs;
  SrcLoc loc;
};

struct Program {
  std::string version;  // "1.3", "1.0"
  Dialect dialect = Dialect::ios18;  // from the header version (1.0 -> ios16)
  std::string buildinfo_type;        // the dict type as written, e.g. "dict<string, string>"
  std::vector<std::pair<std::string, std::string>> buildinfo;
  std::vector<Function> functions;
  const Function* find(const std::string& fn) const {
    for (const auto& f : functions) if (f.name == fn) return &f;
    return nullptr;
  }
};

}  // namespace orion::mil
