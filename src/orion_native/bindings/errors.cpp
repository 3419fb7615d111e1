// Maps orion::Error to the Python classes defined once in orion/errors.py, copying the structured
// fields (constraint, statement, line, column, status) onto the exception object.
#include <Python.h>

#include "bindings/bindings.h"
#include "common/error.h"

namespace orion::bindings {

static const char* class_name(ErrorKind k) {
  switch (k) {
    case ErrorKind::Orion: return "OrionError";
    case ErrorKind::MILSyntax: return "MILSyntaxError";
    case ErrorKind::Compile: return "CompileError";
    case ErrorKind::Eval: return "EvalError";
    case ErrorKind::Budget: return "BudgetExceeded";
    case ErrorKind::WeightUpdate: return "WeightUpdateError";
    case ErrorKind::BlobFormat: return "BlobFormatError";
    case ErrorKind::ProgramState: return "ProgramStateError";
    case ErrorKind::Input: return "InputError";
  }
  return "OrionError";
}

static void raise_orion(const Error& e) {
  nb::gil_scoped_acquire gil;
  try {
    nb::object mod = nb::module_::import_("orion.errors");
    nb::object cls = mod.attr(class_name(e.kind));
    nb::object exc = cls(nb::str(e.what()));
    if (!e.constraint.empty()) exc.attr("constraint") = nb::str(e.constraint.c_str());
    if (!e.statement.empty()) exc.attr("statement") = nb::str(e.statement.c_str());
    if (e.kind == ErrorKind::MILSyntax) {
      exc.attr("line") = e.line;
      exc.attr("column") = e.column;
    }
    if (e.kind == ErrorKind::Eval) exc.attr("status") = e.status;
    PyErr_SetObject((PyObject*)Py_TYPE(exc.ptr()), exc.ptr());
  } catch (nb::python_error& pe) {
    pe.restore();  // orion.errors itself failed to import: surface that error
  }
}

void bind_errors(nb::module_& m) {
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const Error& e) {
      raise_orion(e);
    }
  });
}

}  // namespace orion::bindings
