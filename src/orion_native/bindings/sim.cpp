// Simulator introspection (constraint and op catalogs) and `_sim_run`, a direct test hook that
// parses MIL text, builds a sim::Plan and executes it once — no surfaces, no runtime binding rules.
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <climits>
#include <cstring>
#include <exception>
#include <memory>
#include <thread>
#include <vector>

#include "bindings/arrays.h"
#include "bindings/bindings.h"
#include "common/error.h"
#include "mil/parser.h"
#include "sim/compact.h"
#include "sim/plan.h"
#include "sim/shared_weights.h"
#include "sim/step_profile.h"

namespace orion::bindings {

namespace {

Profile make_profile(const std::string& chip, const std::string& strictness) {
  Profile p;
  if (!chip_from_name(chip, &p.chip)) throw_error(ErrorKind::Input, "unknown chip '" + chip + "': use m1..m5");
  if (strictness == "strict") p.strictness = Strictness::strict;
  else if (strictness == "permissive") p.strictness = Strictness::permissive;
  else throw_error(ErrorKind::Input, "unknown strictness '" + strictness + "': use 'strict' or 'permissive'");
  return p;
}

// Read-only views of the weight buffers, released on scope exit.
struct Views {
  std::vector<Py_buffer> v;
  ~Views() { for (auto& b : v) PyBuffer_Release(&b); }
};

// weight dictionary {path: bytes-like} -> views kept alive by `views` for the duration of the build
std::vector<sim::WeightFile> weight_files(nb::dict weights, Views* views) {
  std::vector<sim::WeightFile> files;
  views->v.reserve(weights.size());
  for (auto [k, val] : weights) {
    Py_buffer b;
    if (PyObject_GetBuffer(val.ptr(), &b, PyBUF_SIMPLE) != 0) throw nb::python_error();
    views->v.push_back(b);
    files.push_back({nb::cast<std::string>(k), (const uint8_t*)b.buf, (size_t)b.len});
  }
  return files;
}

// Thread-safety check for tests: n threads execute the same plan at once; every result must equal the
// single-threaded one byte for byte.
void check_concurrent(const sim::Plan& plan, const std::vector<const void*>& in, const std::vector<void*>& ref, int n) {
  std::vector<std::vector<std::vector<uint8_t>>> outs(n);
  std::vector<std::thread> ts;
  std::vector<std::exception_ptr> errs(n);
  for (int t = 0; t < n; ++t) {
    outs[t].resize(plan.outputs().size());
    for (size_t j = 0; j < outs[t].size(); ++j) outs[t][j].resize(plan.outputs()[j].bytes());
    ts.emplace_back([&, t] {
      try {
        std::vector<void*> o;
        for (auto& b : outs[t]) o.push_back(b.data());
        plan.execute(in, o, nullptr);
      } catch (...) {
        errs[t] = std::current_exception();
      }
    });
  }
  for (auto& th : ts) th.join();
  for (int t = 0; t < n; ++t) {
    if (errs[t]) std::rethrow_exception(errs[t]);
    for (size_t j = 0; j < outs[t].size(); ++j)
      if (std::memcmp(outs[t][j].data(), ref[j], outs[t][j].size()))
        throw_error(ErrorKind::Orion, "concurrent execute of one plan gave a different result for output '" +
                                          plan.outputs()[j].name + "'");
  }
}

nb::tuple sim_run(const std::string& text, nb::dict weights, nb::dict inputs, const std::string& chip,
                  const std::string& strictness, int concurrent) {
  Profile prof = make_profile(chip, strictness);
  mil::Program prog = mil::parse(text);
  Views views;
  std::vector<sim::WeightFile> files = weight_files(weights, &views);
  std::vector<Warning> warns;
  std::unique_ptr<sim::Plan> plan;
  {
    nb::gil_scoped_release rel;
    plan = sim::build_plan(prog, files, prof, &warns);
  }
  std::vector<AnyArray> keep;
  std::vector<const void*> in_ptrs;
  for (const auto& io : plan->inputs()) {
    nb::str key(io.name.c_str());
    if (!inputs.contains(key)) throw_error(ErrorKind::Input, "missing input '" + io.name + "'");
    AnyArray a = nb::cast<AnyArray>(inputs[key]);
    DType d;
    if (!dtype_of(a.dtype(), &d) || d != io.dtype)
      throw_error(ErrorKind::Input, "input '" + io.name + "' must be " + dtype_name(io.dtype) + ", got " + dl_name(a.dtype()));
    if (shape_of(a) != io.shape)
      throw_error(ErrorKind::Input, "input '" + io.name + "' must have shape " + shape_str(io.shape) + ", got " + shape_str(shape_of(a)));
    if (!c_contiguous(a)) throw_error(ErrorKind::Input, "input '" + io.name + "' must be C-contiguous");
    in_ptrs.push_back(a.data());
    keep.push_back(a);
  }
  if (inputs.size() != plan->inputs().size()) throw_error(ErrorKind::Input, "unexpected extra inputs");
  nb::dict outs;
  std::vector<void*> out_ptrs;
  for (const auto& io : plan->outputs()) {
    void* p = nullptr;
    outs[nb::str(io.name.c_str())] = new_array(io.dtype, io.shape, &p);
    out_ptrs.push_back(p);
  }
  {
    nb::gil_scoped_release rel;
    plan->execute(in_ptrs, out_ptrs, &warns);
    if (concurrent > 1) check_concurrent(*plan, in_ptrs, out_ptrs, concurrent);
  }
  nb::list wl;
  for (const auto& w : warns) wl.append(nb::str(w.message.c_str()));
  return nb::make_tuple(outs, wl);
}

// Test hook: build only and describe the plan (I/O, op count, cost model, compile warnings).
nb::dict sim_plan_info(const std::string& text, nb::dict weights, const std::string& chip, const std::string& strictness) {
  Profile prof = make_profile(chip, strictness);
  mil::Program prog = mil::parse(text);
  Views views;
  std::vector<sim::WeightFile> files = weight_files(weights, &views);
  std::vector<Warning> warns;
  std::unique_ptr<sim::Plan> plan;
  {
    nb::gil_scoped_release rel;
    plan = sim::build_plan(prog, files, prof, &warns);
  }
  auto io = [](const std::vector<sim::IOInfo>& v) {
    nb::list l;
    for (const auto& i : v) l.append(nb::make_tuple(nb::str(i.name.c_str()), nb::str(dtype_name(i.dtype)), nb::cast(i.shape)));
    return l;
  };
  CostEstimate c = plan->cost();
  nb::dict d;
  d["inputs"] = io(plan->inputs());
  d["outputs"] = io(plan->outputs());
  d["num_ops"] = plan->num_ops();
  d["flops"] = c.flops;
  d["weight_bytes"] = c.weight_bytes;
  d["activation_bytes"] = c.activation_bytes;
  d["est_ms"] = c.est_ms;
  nb::list wl;
  for (const auto& w : warns) wl.append(nb::str(w.message.c_str()));
  d["warnings"] = wl;
  return d;
}

// ---- sim_infer: orion.ir's shape inference is the registry's -------------------------------------

std::string py_type_name(nb::handle h) { return Py_TYPE(h.ptr())->tp_name; }

bool is_bool(nb::handle h) {
  if (PyBool_Check(h.ptr())) return true;
  const std::string t = py_type_name(h);
  return t == "numpy.bool_" || t == "numpy.bool";
}

// A const parameter's Python value as the literal the MIL codegen writes for it (compiler/codegen/mil.py):
// bool, int32 or fp16 scalar, string, or a rank-1 int32 / bool tensor.
mil::Literal const_literal(const std::string& op, const std::string& param, nb::handle v) {
  auto bad = [&](const std::string& why) {
    throw_compile("", "", "InvalidMILProgram: " + op + ": parameter '" + param + "' " + why);
  };
  auto as_int32 = [&](nb::handle h) -> int64_t {
    if (is_bool(h) || !PyIndex_Check(h.ptr())) bad("must be an integer, got " + py_type_name(h));
    PyObject* n = PyNumber_Index(h.ptr());
    if (!n) throw nb::python_error();
    int overflow = 0;
    long long x = PyLong_AsLongLongAndOverflow(n, &overflow);
    Py_DECREF(n);
    if (overflow || x < INT32_MIN || x > INT32_MAX) bad("does not fit int32");
    return x;
  };
  mil::Literal lit;
  lit.type.scalar_form = true;
  if (is_bool(v)) {
    lit.type.dtype = DType::bool_;
    lit.i = {PyObject_IsTrue(v.ptr()) ? 1 : 0};
  } else if (PyUnicode_Check(v.ptr())) {
    lit.type.dtype = DType::string;
    lit.s = {nb::cast<std::string>(v)};
  } else if (PyIndex_Check(v.ptr())) {
    lit.type.dtype = DType::int32;
    lit.i = {as_int32(v)};
  } else if (PyFloat_Check(v.ptr()) || (PyNumber_Check(v.ptr()) && !PySequence_Check(v.ptr()))) {
    double d = PyFloat_AsDouble(v.ptr());
    if (d == -1.0 && PyErr_Occurred()) throw nb::python_error();
    lit.type.dtype = DType::fp16;
    lit.f = {d};
  } else if (PySequence_Check(v.ptr())) {
    nb::object seq = nb::steal(PySequence_Fast(v.ptr(), "a sequence"));
    if (!seq.is_valid()) throw nb::python_error();
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(seq.ptr());
    PyObject** items = PySequence_Fast_ITEMS(seq.ptr());
    bool bools = n > 0;
    for (Py_ssize_t k = 0; k < n; ++k) bools = bools && is_bool(items[k]);
    lit.kind = mil::Literal::Kind::Tensor;
    lit.type.scalar_form = false;
    lit.type.shape = {(int64_t)n};
    lit.type.dtype = bools ? DType::bool_ : DType::int32;
    for (Py_ssize_t k = 0; k < n; ++k)
      lit.i.push_back(bools ? (PyObject_IsTrue(items[k]) ? 1 : 0) : as_int32(items[k]));
  } else {
    bad("must be a number, a bool, a string or a sequence of integers, got " + py_type_name(v));
  }
  return lit;
}

nb::tuple sim_infer(const std::string& op, nb::handle operands, nb::dict consts, const std::string& opset) {
  std::vector<sim::OperandType> ops;
  nb::object seq = nb::steal(PySequence_Fast(operands.ptr(), "operands must be a sequence"));
  if (!seq.is_valid()) throw nb::python_error();
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(seq.ptr());
  ops.reserve((size_t)n);
  for (Py_ssize_t k = 0; k < n; ++k) {
    nb::handle item = PySequence_Fast_GET_ITEM(seq.ptr(), k);
    if (!PyTuple_Check(item.ptr()) || (PyTuple_GET_SIZE(item.ptr()) != 3 && PyTuple_GET_SIZE(item.ptr()) != 4))
      throw_error(ErrorKind::Input, "sim_infer: operand " + std::to_string(k) + " must be (param, dtype, shape[, is_const])");
    sim::OperandType o;
    o.param = nb::cast<std::string>(item[0]);
    const std::string dt = nb::cast<std::string>(item[1]);
    if (!dtype_from_name(dt, &o.dtype))
      throw_error(ErrorKind::Input, "sim_infer: operand '" + o.param + "' has unknown dtype '" + dt + "'");
    o.shape = nb::cast<Shape>(item[2]);
    o.is_const = PyTuple_GET_SIZE(item.ptr()) == 4 && PyObject_IsTrue(PyTuple_GET_ITEM(item.ptr(), 3));
    ops.push_back(std::move(o));
  }
  std::vector<std::pair<std::string, mil::Literal>> lits;
  lits.reserve(consts.size());
  for (auto [k, v] : consts) {
    if (v.is_none()) continue;  // an optional parameter left out
    std::string param = nb::cast<std::string>(k);
    lits.emplace_back(param, const_literal(op, param, v));
  }
  auto [dtype, shape] = sim::infer_type(op, ops, std::move(lits), opset);
  PyObject* t = PyTuple_New((Py_ssize_t)shape.size());
  for (size_t i = 0; i < shape.size(); ++i) PyTuple_SET_ITEM(t, (Py_ssize_t)i, PyLong_FromLongLong(shape[i]));
  return nb::make_tuple(nb::str(dtype_name(dtype)), nb::steal(t));
}

}  // namespace

void bind_sim(nb::module_& m, nb::module_& t) {
  t.def("sim_shared_weights", [] {
    auto [dense, compressed] = sim::shared_weight_counts();
    return nb::make_tuple(dense, compressed);
  }, "Test hook: (packed fp16 weights, compressed weights) held once for every plan that bakes them.");
  t.def("sim_compact_columns", [](bool on) {
    const bool was = sim::compact::enabled();
    sim::compact::set_enabled(on);
    return was;
  }, nb::arg("on"), "Test hook: live runs compute element-wise chains in compact form (default on); returns the "
                    "previous setting.");
  t.def("sim_compact_steps", [] { return sim::compact::take_steps_run(); },
        "Test hook: steps that ran in compact form since the last call (process-wide), then reset.");
  m.def("sim_step_profiling", [](bool on) { sim::set_step_profiling(on); }, nb::arg("on"),
        "Per-step timing of simulated evals on (from an empty table) or off.");
  m.def("sim_step_profile", [] {
    nb::list l;
    for (const auto& s : sim::take_step_profile())
      l.append(nb::make_tuple(s.op, s.name, s.calls, s.seconds, s.flops, s.bytes));
    return l;
  }, "The per-step table since profiling started or was last read, emptied: (op, step, calls, seconds, flops, bytes).");

  m.def("sim_defaults", [] {
    // The constants C++ and Python share, defined once in common/profile.h.
    nb::dict d;
    nb::list chips, legacy;
    for (Chip c : kChips) {
      chips.append(chip_name(c));
      Profile p;
      p.chip = c;
      if (p.legacy_chip()) legacy.append(chip_name(c));
    }
    d["chips"] = chips;
    d["legacy_chips"] = legacy;
    d["default_chip"] = chip_name(Profile{}.chip);
    d["min_surface_bytes"] = kMinSurfaceBytes;
    d["compile_budget"] = kCompileBudget;
    return d;
  }, "Constants shared by the native core and Python (chips, legacy chips, C04 surface size, C05 budget).");

  m.def("sim_constraints", [](const std::string& chip, const std::string& strictness) {
    nb::list l;
    for (const auto& c : sim::constraint_catalog(make_profile(chip, strictness))) {
      nb::dict d;
      d["id"] = c.id;
      d["rule"] = c.rule;
      d["kind"] = c.kind;
      d["confidence"] = c.confidence;
      d["reaction"] = c.reaction;
      d["where"] = c.where;
      d["active"] = c.active;
      nb::dict lim;
      for (const auto& [k, v] : c.limits) lim[nb::str(k.c_str())] = v;
      d["limits"] = lim;
      l.append(d);
    }
    return l;
  }, nb::arg("chip") = "m4", nb::arg("strictness") = "strict", "The ANE constraint catalog C01-C46 under a profile.");

  m.def("sim_ops", [](const std::string& chip, const std::string& strictness) {
    nb::list l;
    for (const auto& o : sim::op_catalog(make_profile(chip, strictness))) {
      nb::dict d;
      d["name"] = o.name;
      d["family"] = o.family;
      nb::list ps;
      for (const auto& p : o.params) ps.append(nb::str(p.c_str()));
      d["params"] = ps;
      nb::dict ts;
      for (const auto& [k, t] : o.types) ts[nb::str(k.c_str())] = t;
      d["types"] = ts;
      d["attr_params"] = o.attr_params;
      d["output"] = o.output;
      d["evidence"] = o.evidence;
      d["constraints"] = o.constraints;
      d["lowering"] = o.lowering;
      d["status"] = o.status;
      l.append(d);
    }
    return l;
  }, nb::arg("chip") = "m4", nb::arg("strictness") = "strict",
     "The op schema: every MIL op the simulator knows (name, family, params, types, output rule, ANE evidence, "
     "constraint IDs, the compiler's lowering) with its status under a profile.");

  m.def("sim_infer", &sim_infer, nb::arg("op"), nb::arg("operands"), nb::arg("consts"), nb::arg("opset") = "ios18",
        "The type one `op` statement produces, as the simulator infers it: operands = [(param, dtype, shape[, "
        "is_const])] (a param given several times: a tuple), consts = {param: int | float | bool | str | int list} "
        "(None: left out) -> (dtype, shape); CompileError as build_plan raises it.");
  t.def("sim_run", &sim_run, nb::arg("mil_text"), nb::arg("weights"), nb::arg("inputs"), nb::arg("chip") = "m4",
        nb::arg("strictness") = "strict", nb::arg("concurrent") = 1,
        "Test hook: parse, build a sim plan and execute it once -> (outputs dict, warning strings); concurrent > 1 "
        "also executes it on that many threads at once and checks every result is identical.");
  t.def("sim_plan_info", &sim_plan_info, nb::arg("mil_text"), nb::arg("weights"), nb::arg("chip") = "m4",
        nb::arg("strictness") = "strict", "Test hook: build a sim plan -> dict(inputs, outputs, num_ops, cost fields, warnings).");
}

}  // namespace orion::bindings
