// Canonical MIL text: 4-space indents, `name = value`, ", " separators, arguments and attributes
// in stored order. Bare scalar types (scalar_form) are spelled per dialect, so a legacy program
// prints `tensor<fp16, []>` everywhere. Never fails, whatever the AST holds.
#include "mil/printer.h"

#include "mil/lexer.h"
#include "mil/numbers.h"

namespace orion::mil {

namespace {

std::string tensor_type(const Type& t) {
  return std::string("tensor<") + dtype_name(t.dtype) + ", " + shape_str(t.shape) + ">";
}

void append_value(std::string& out, const Literal& lit, size_t k) {
  DType d = lit.type.dtype;
  if (dtype_is_float(d)) {
    if (k < lit.f.size()) out += format_float(lit.f[k], d);
  } else if (d == DType::string) {
    if (k < lit.s.size()) out += quote_string(lit.s[k]);
  } else if (d == DType::bool_) {
    if (k < lit.i.size()) out += lit.i[k] ? "true" : "false";
  } else if (k < lit.i.size()) {
    out += d == DType::uint64 ? std::to_string((uint64_t)lit.i[k]) : std::to_string(lit.i[k]);
  }
}

size_t value_count(const Literal& lit) {
  DType d = lit.type.dtype;
  if (dtype_is_float(d)) return lit.f.size();
  if (d == DType::string) return lit.s.size();
  return lit.i.size();
}

// string("...") / uint64(N) in the dialect's scalar spelling (BLOBFILE arguments).
std::string scalar_spelling(DType d, Dialect dia) {
  return dia == Dialect::ios18 ? dtype_name(d) : std::string("tensor<") + dtype_name(d) + ", []>";
}

void append_literal(std::string& out, const Literal& lit, Dialect d) {
  switch (lit.kind) {
    case Literal::Kind::Scalar:
      out += print_type(lit.type, d);
      out += '(';
      append_value(out, lit, 0);
      out += ')';
      return;
    case Literal::Kind::Tensor: {
      out += tensor_type(lit.type);
      out += "([";
      size_t n = value_count(lit);
      for (size_t k = 0; k < n; ++k) {
        if (k) out += ", ";
        append_value(out, lit, k);
      }
      out += "])";
      return;
    }
    case Literal::Kind::BlobFile:
      out += tensor_type(lit.type);
      out += "(BLOBFILE(path = ";
      out += scalar_spelling(DType::string, d);
      out += '(';
      out += quote_string(lit.blob_path);
      out += "), offset = ";
      out += scalar_spelling(DType::uint64, d);
      out += '(';
      out += std::to_string(lit.blob_offset);
      out += ")))";
      return;
  }
}

void append_stmt(std::string& out, const Stmt& s, Dialect d) {
  out += "        ";
  out += print_type(s.type, d);
  out += ' ';
  out += s.out;
  out += " = ";
  out += s.op;
  out += '(';
  for (size_t k = 0; k < s.args.size(); ++k) {
    const Arg& a = s.args[k];
    if (k) out += ", ";
    out += a.name;
    out += " = ";
    switch (a.kind) {
      case Arg::Kind::Ref: out += a.ref; break;
      case Arg::Kind::Literal: append_literal(out, a.literal, d); break;
      case Arg::Kind::Tuple:
        out += '(';
        for (size_t j = 0; j < a.tuple.size(); ++j) {
          if (j) out += ", ";
          out += a.tuple[j];
        }
        out += ')';
        break;
    }
  }
  out += ')';
  if (!s.attrs.empty()) {
    out += '[';
    for (size_t k = 0; k < s.attrs.size(); ++k) {
      if (k) out += ", ";
      out += s.attrs[k].name;
      out += " = ";
      append_literal(out, s.attrs[k].value, d);
    }
    out += ']';
  }
  out += ";\n";
}

}  // namespace

std::string print_type(const Type& t, Dialect d) {
  if (t.scalar_form) return scalar_spelling(t.dtype, d);
  return tensor_type(t);
}

std::string print_literal(const Literal& lit, Dialect d) {
  std::string out;
  append_literal(out, lit, d);
  return out;
}

std::string print(const Program& p) {
  std::string out;
  out.reserve(4096);
  Dialect d = p.dialect;
  out += "program(" + p.version + ")\n";
  if (!p.buildinfo_type.empty() || !p.buildinfo.empty()) {
    std::string ty = p.buildinfo_type;
    if (ty.empty()) ty = d == Dialect::ios18 ? "dict<string, string>" : "dict<tensor<string, []>, tensor<string, []>>";
    out += "[buildInfo = " + ty + "({";
    for (size_t k = 0; k < p.buildinfo.size(); ++k) {
      if (k) out += ", ";
      out += '{' + quote_string(p.buildinfo[k].first) + ", " + quote_string(p.buildinfo[k].second) + '}';
    }
    out += "})]\n";
  }
  out += "{\n";
  for (size_t fi = 0; fi < p.functions.size(); ++fi) {
    const Function& f = p.functions[fi];
    if (fi) out += '\n';
    out += "    func " + f.name + '<' + f.opset + ">(";
    for (size_t k = 0; k < f.params.size(); ++k) {
      if (k) out += ", ";
      out += print_type(f.params[k].type, d) + ' ' + f.params[k].name;
    }
    out += ") {\n";
    for (const Stmt& s : f.stmts) append_stmt(out, s, d);
    out += "    } -> (";
    for (size_t k = 0; k < f.returns.size(); ++k) {
      if (k) out += ", ";
      out += f.returns[k];
    }
    out += ");\n";
  }
  out += "}\n";
  return out;
}

}  // namespace orion::mil
