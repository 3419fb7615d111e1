// MIL text entry points: mil_format (parse + canonical print) and mil_parse (AST as plain
// dicts/lists, so Python tools and tests need no wrapper classes).
#include <Python.h>

#include <string>
#include <string_view>
#include <vector>

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
  // The functions, not the PyBytes_AS_STRING/GET_SIZE macros: the limited API (abi3 wheels) has only these.
  if (PyBytes_Check(o)) {
    t.view = std::string_view(PyBytes_AsString(o), (size_t)PyBytes_Size(o));
    t.keep = nb::borrow(h);
  } else if (PyByteArray_Check(o)) {
    t.owned.assign(PyByteArray_AsString(o), (size_t)PyByteArray_Size(o));  // mutable: copy
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
      t.view = std::string_view(PyBytes_AsString(b), (size_t)PyBytes_Size(b));
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

// AST -> dicts. Key and enum strings are created once per conversion and shared (a 10k-statement
// program has ~200k dict entries; re-creating each key string doubled the conversion time).
class ToPython {
 public:
  nb::dict program(const Program& p) {
    nb::dict d;
    set(d, k_version, str_of(p.version));
    set(d, k_dialect, nb::str(p.dialect == Dialect::ios16 ? "ios16" : "ios18"));
    set(d, k_buildinfo_type, str_of(p.buildinfo_type));
    nb::list bi;
    for (const auto& kv : p.buildinfo) {
      nb::list pair;
      pair.append(str_of(kv.first));
      pair.append(str_of(kv.second));
      bi.append(pair);
    }
    set(d, k_buildinfo, bi);
    nb::list fns;
    for (const auto& f : p.functions) fns.append(function(f));
    set(d, k_functions, fns);
    return d;
  }

 private:
  static void set(nb::dict& d, const nb::str& k, nb::handle v) { PyDict_SetItem(d.ptr(), k.ptr(), v.ptr()); }

  nb::list shape_list(const Shape& s) {
    nb::list l;
    for (int64_t v : s) l.append(nb::int_(v));
    return l;
  }
  void put_type(nb::dict& d, const Type& t) {
    size_t i = (size_t)t.dtype;
    set(d, k_dtype, i < dtype_str.size() ? nb::str(dtype_str[i]) : nb::str(dtype_name(t.dtype)));
    set(d, k_shape, shape_list(t.shape));
    set(d, k_scalar_form, nb::bool_(t.scalar_form));
  }
  void put_loc(nb::dict& d, const SrcLoc& l) {
    set(d, k_line, nb::int_(l.line));
    set(d, k_column, nb::int_(l.column));
  }

  nb::object value(const Literal& lit, size_t k) {
    DType d = lit.type.dtype;
    if (dtype_is_float(d)) return k < lit.f.size() ? nb::object(nb::float_(lit.f[k])) : nb::none();
    if (d == DType::string) return k < lit.s.size() ? nb::object(str_of(lit.s[k])) : nb::none();
    if (k >= lit.i.size()) return nb::none();
    if (d == DType::bool_) return nb::bool_(lit.i[k] != 0);
    if (d == DType::uint64) return nb::steal(PyLong_FromUnsignedLongLong((unsigned long long)lit.i[k]));
    return nb::int_(lit.i[k]);
  }

  nb::dict literal(const Literal& lit) {
    nb::dict d;
    put_type(d, lit.type);
    switch (lit.kind) {
      case Literal::Kind::Scalar:
        set(d, k_kind, v_scalar);
        set(d, k_value, value(lit, 0));
        break;
      case Literal::Kind::Tensor: {
        set(d, k_kind, v_tensor);
        DType t = lit.type.dtype;
        size_t n = dtype_is_float(t) ? lit.f.size() : t == DType::string ? lit.s.size() : lit.i.size();
        nb::list l;
        for (size_t k = 0; k < n; ++k) l.append(value(lit, k));
        set(d, k_value, l);
        break;
      }
      case Literal::Kind::BlobFile:
        set(d, k_kind, v_blobfile);
        set(d, k_path, str_of(lit.blob_path));
        set(d, k_offset, nb::steal(PyLong_FromUnsignedLongLong((unsigned long long)lit.blob_offset)));
        break;
    }
    put_loc(d, lit.loc);
    return d;
  }

  nb::dict arg(const Arg& a) {
    nb::dict d;
    set(d, k_name, str_of(a.name));
    switch (a.kind) {
      case Arg::Kind::Ref:
        set(d, k_kind, v_ref);
        set(d, k_ref, str_of(a.ref));
        break;
      case Arg::Kind::Literal:
        set(d, k_kind, v_literal);
        set(d, k_literal, literal(a.literal));
        break;
      case Arg::Kind::Tuple: {
        set(d, k_kind, v_tuple);
        nb::list l;
        for (const auto& n : a.tuple) l.append(str_of(n));
        set(d, k_tuple, l);
        break;
      }
    }
    put_loc(d, a.loc);
    return d;
  }

  nb::dict stmt(const Stmt& s) {
    nb::dict d;
    set(d, k_out, str_of(s.out));
    set(d, k_op, str_of(s.op));
    nb::dict ty;
    put_type(ty, s.type);
    set(d, k_type, ty);
    nb::list args;
    for (const auto& a : s.args) args.append(arg(a));
    set(d, k_args, args);
    nb::dict attrs;  // text order; a repeated attribute name keeps its last value
    for (const auto& a : s.attrs) set(attrs, str_of(a.name), literal(a.value));
    set(d, k_attrs, attrs);
    put_loc(d, s.loc);
    return d;
  }

  nb::dict function(const Function& f) {
    nb::dict d;
    set(d, k_name, str_of(f.name));
    set(d, k_opset, str_of(f.opset));
    nb::list params;
    for (const auto& p : f.params) {
      nb::dict pd;
      set(pd, k_name, str_of(p.name));
      put_type(pd, p.type);
      put_loc(pd, p.loc);
      params.append(pd);
    }
    set(d, k_params, params);
    nb::list stmts;
    for (const auto& s : f.stmts) stmts.append(stmt(s));
    set(d, k_stmts, stmts);
    nb::list rets;
    for (const auto& r : f.returns) rets.append(str_of(r));
    set(d, k_returns, rets);
    put_loc(d, f.loc);
    return d;
  }

  nb::str k_version{"version"}, k_dialect{"dialect"}, k_buildinfo_type{"buildinfo_type"}, k_buildinfo{"buildinfo"},
      k_functions{"functions"}, k_name{"name"}, k_opset{"opset"}, k_params{"params"}, k_stmts{"stmts"},
      k_returns{"returns"}, k_out{"out"}, k_op{"op"}, k_type{"type"}, k_args{"args"}, k_attrs{"attrs"},
      k_kind{"kind"}, k_ref{"ref"}, k_literal{"literal"}, k_tuple{"tuple"}, k_value{"value"}, k_path{"path"},
      k_offset{"offset"}, k_dtype{"dtype"}, k_shape{"shape"}, k_scalar_form{"scalar_form"}, k_line{"line"},
      k_column{"column"};
  nb::str v_scalar{"scalar"}, v_tensor{"tensor"}, v_blobfile{"blobfile"}, v_ref{"ref"}, v_literal{"literal"},
      v_tuple{"tuple"};
  std::vector<nb::str> dtype_str = [] {
    std::vector<nb::str> v;
    for (int t = 0; t <= (int)DType::string; ++t) v.emplace_back(dtype_name((DType)t));
    return v;
  }();
};

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
      "_mil_count_stmts",
      [](nb::handle text) {
        size_t n = 0;
        for (const auto& f : parse_arg(text).functions) n += f.stmts.size();
        return n;
      },
      nb::arg("text"), "Parses only (no printing, no Python objects) and returns the statement count: a benchmark hook.");
  m.def(
      "mil_parse", [](nb::handle text) { return ToPython().program(parse_arg(text)); }, nb::arg("text"),
      "Parses MIL text (str or UTF-8 bytes) into nested dicts/lists. Raises orion.MILSyntaxError.");
}

}  // namespace orion::bindings
