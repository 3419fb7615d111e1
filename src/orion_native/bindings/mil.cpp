// MIL text entry points: mil_format (parse + canonical print) and mil_parse (AST as plain
// dicts/lists, so Python tools and tests need no wrapper classes).
#include <Python.h>

#include <string>
#include <string_view>

#include "bindings/bindings.h"
#include "mil/parser.h"
#include "mil/printer.h"

namespace orion::bindings {

namespace {

using namespace orion::mil;

// Holds the UTF-8 bytes of a str/bytes/bytearray argument. A str with lone surrogates is encoded
// with surrogatepass, so the parser reports the bad character as invalid UTF-8 at its position.
struct TextArg {
  std::string owned;
  std::string_view view;
  nb::object keep;  // keeps the object whose buffer `view` points into alive
};

TextArg text_arg(nb::handle h) {
  TextArg t;
  PyObject* o = h.ptr();
  if (PyBytes_Check(o)) {
    t.view = std::string_view(PyBytes_AS_STRING(o), (size_t)PyBytes_GET_SIZE(o));
    t.keep = nb::borrow(h);
  } else if (PyByteArray_Check(o)) {
    t.owned.assign(PyByteArray_AS_STRING(o), (size_t)PyByteArray_GET_SIZE(o));  // mutable: copy
    t.view = t.owned;
  } else if (PyUnicode_Check(o)) {
    Py_ssize_t n = 0;
    const char* s = PyUnicode_AsUTF8AndSize(o, &n);
    if (s) {
      t.view = std::string_view(s, (size_t)n);
      t.keep = nb::borrow(h);
    } else {
      PyErr_Clear();
      PyObject* b = PyUnicode_AsEncodedString(o, "utf-8", "surrogatepass");
      if (!b) throw nb::python_error();
      t.keep = nb::steal(b);
      t.view = std::string_view(PyBytes_AS_STRING(b), (size_t)PyBytes_GET_SIZE(b));
    }
  } else {
    throw nb::type_error("MIL text must be str or bytes");
  }
  return t;
}

Program parse_arg(nb::handle h) {
  TextArg t = text_arg(h);
  nb::gil_scoped_release nogil;
  return parse(t.view);
}

nb::str str_of(const std::string& s) { return nb::str(s.data(), s.size()); }

nb::list shape_list(const Shape& s) {
  nb::list l;
  for (int64_t d : s) l.append(nb::int_(d));
  return l;
}

void put_type(nb::dict& d, const Type& t) {
  d["dtype"] = nb::str(dtype_name(t.dtype));
  d["shape"] = shape_list(t.shape);
  d["scalar_form"] = nb::bool_(t.scalar_form);
}

void put_loc(nb::dict& d, const SrcLoc& l) {
  d["line"] = nb::int_(l.line);
  d["column"] = nb::int_(l.column);
}

nb::object value_obj(const Literal& lit, size_t k) {
  DType d = lit.type.dtype;
  if (dtype_is_float(d)) return k < lit.f.size() ? nb::object(nb::float_(lit.f[k])) : nb::none();
  if (d == DType::string) return k < lit.s.size() ? nb::object(str_of(lit.s[k])) : nb::none();
  if (k >= lit.i.size()) return nb::none();
  if (d == DType::bool_) return nb::bool_(lit.i[k] != 0);
  if (d == DType::uint64) return nb::steal(PyLong_FromUnsignedLongLong((unsigned long long)lit.i[k]));
  return nb::int_(lit.i[k]);
}

nb::dict literal_dict(const Literal& lit) {
  nb::dict d;
  put_type(d, lit.type);
  switch (lit.kind) {
    case Literal::Kind::Scalar:
      d["kind"] = nb::str("scalar");
      d["value"] = value_obj(lit, 0);
      break;
    case Literal::Kind::Tensor: {
      d["kind"] = nb::str("tensor");
      size_t n = dtype_is_float(lit.type.dtype) ? lit.f.size() : lit.type.dtype == DType::string ? lit.s.size() : lit.i.size();
      nb::list l;
      for (size_t k = 0; k < n; ++k) l.append(value_obj(lit, k));
      d["value"] = l;
      break;
    }
    case Literal::Kind::BlobFile:
      d["kind"] = nb::str("blobfile");
      d["path"] = str_of(lit.blob_path);
      d["offset"] = nb::steal(PyLong_FromUnsignedLongLong((unsigned long long)lit.blob_offset));
      break;
  }
  put_loc(d, lit.loc);
  return d;
}

nb::dict arg_dict(const Arg& a) {
  nb::dict d;
  d["name"] = str_of(a.name);
  switch (a.kind) {
    case Arg::Kind::Ref:
      d["kind"] = nb::str("ref");
      d["ref"] = str_of(a.ref);
      break;
    case Arg::Kind::Literal:
      d["kind"] = nb::str("literal");
      d["literal"] = literal_dict(a.literal);
      break;
    case Arg::Kind::Tuple: {
      d["kind"] = nb::str("tuple");
      nb::list l;
      for (const auto& n : a.tuple) l.append(str_of(n));
      d["tuple"] = l;
      break;
    }
  }
  put_loc(d, a.loc);
  return d;
}

nb::dict stmt_dict(const Stmt& s) {
  nb::dict d;
  d["out"] = str_of(s.out);
  d["op"] = str_of(s.op);
  nb::dict ty;
  put_type(ty, s.type);
  d["type"] = ty;
  nb::list args;
  for (const auto& a : s.args) args.append(arg_dict(a));
  d["args"] = args;
  nb::dict attrs;  // text order; a repeated attribute name keeps its last value
  for (const auto& a : s.attrs) attrs[str_of(a.name)] = literal_dict(a.value);
  d["attrs"] = attrs;
  put_loc(d, s.loc);
  return d;
}

nb::dict function_dict(const Function& f) {
  nb::dict d;
  d["name"] = str_of(f.name);
  d["opset"] = str_of(f.opset);
  nb::list params;
  for (const auto& p : f.params) {
    nb::dict pd;
    pd["name"] = str_of(p.name);
    put_type(pd, p.type);
    put_loc(pd, p.loc);
    params.append(pd);
  }
  d["params"] = params;
  nb::list stmts;
  for (const auto& s : f.stmts) stmts.append(stmt_dict(s));
  d["stmts"] = stmts;
  nb::list rets;
  for (const auto& r : f.returns) rets.append(str_of(r));
  d["returns"] = rets;
  put_loc(d, f.loc);
  return d;
}

nb::dict program_dict(const Program& p) {
  nb::dict d;
  d["version"] = str_of(p.version);
  d["dialect"] = nb::str(p.dialect == Dialect::ios16 ? "ios16" : "ios18");
  d["buildinfo_type"] = str_of(p.buildinfo_type);
  nb::list bi;
  for (const auto& kv : p.buildinfo) {
    nb::list pair;
    pair.append(str_of(kv.first));
    pair.append(str_of(kv.second));
    bi.append(pair);
  }
  d["buildinfo"] = bi;
  nb::list fns;
  for (const auto& f : p.functions) fns.append(function_dict(f));
  d["functions"] = fns;
  return d;
}

}  // namespace

void bind_mil(nb::module_& m) {
  m.def(
      "mil_format",
      [](nb::handle text) {
        TextArg t = text_arg(text);
        std::string out;
        {
          nb::gil_scoped_release nogil;
          out = print(parse(t.view));
        }
        return str_of(out);
      },
      nb::arg("text"),
      "Parses MIL text (str or UTF-8 bytes) and returns it in canonical form. Raises orion.MILSyntaxError.");
  m.def(
      "mil_parse", [](nb::handle text) { return program_dict(parse_arg(text)); }, nb::arg("text"),
      "Parses MIL text (str or UTF-8 bytes) into nested dicts/lists. Raises orion.MILSyntaxError.");
}

}  // namespace orion::bindings
