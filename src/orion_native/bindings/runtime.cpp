// Python face of runtime/: Surface, Program, process counters and compile budget.
#include <nanobind/ndarray.h>
#include <optional>

#include <nanobind/stl/map.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "bindings/arrays.h"
#include "bindings/bindings.h"
#include "bindings/half_arrays.h"
#include "cpu/kernels/compressed.h"
#include "runtime/backends.h"
#include "runtime/chain.h"
#include "runtime/folders.h"
#include "runtime/process.h"
#include "runtime/program.h"

namespace orion::bindings {

using runtime::Program;
using runtime::Surface;
using runtime::SurfacePtr;

namespace {

std::vector<runtime::WeightEntry> to_weights(const nb::dict& d) {
  std::vector<runtime::WeightEntry> out;
  for (auto [k, v] : d) {
    if (!nb::isinstance<nb::str>(k)) throw_error(ErrorKind::Input, "weight dictionary keys must be str (\"@model_path/...\")");
    runtime::WeightEntry e;
    e.key = nb::cast<std::string>(k);
    if (nb::isinstance<nb::bytes>(v)) {
      nb::bytes b = nb::borrow<nb::bytes>(v);
      e.bytes.assign((const uint8_t*)b.c_str(), (const uint8_t*)b.c_str() + b.size());
    } else {
      AnyArray a;
      if (!nb::try_cast(v, a) || !c_contiguous(a))
        throw_error(ErrorKind::Input, "weight '" + e.key + "' must be bytes (a whole MILBlob file)");
      size_t n = a.nbytes();
      e.bytes.assign((const uint8_t*)a.data(), (const uint8_t*)a.data() + n);
    }
    out.push_back(std::move(e));
  }
  return out;
}

std::string to_text(const nb::object& o) {
  if (nb::isinstance<nb::str>(o)) return nb::cast<std::string>(o);
  if (nb::isinstance<nb::bytes>(o)) {
    nb::bytes b = nb::borrow<nb::bytes>(o);
    return std::string(b.c_str(), b.size());
  }
  throw_error(ErrorKind::Input, "MIL text must be str or bytes (UTF-8)");
}

Profile make_profile(const std::string& chip, const std::string& strictness, const std::string& delta,
                          int64_t min_surface, int64_t budget) {
  Profile p;
  if (!chip_from_name(chip, &p.chip)) throw_error(ErrorKind::Input, "unknown chip '" + chip + "': use m1, m2, m3, m4 or m5");
  if (strictness == "strict") p.strictness = Strictness::strict;
  else if (strictness == "permissive") p.strictness = Strictness::permissive;
  else throw_error(ErrorKind::Input, "unknown strictness '" + strictness + "': use strict or permissive");
  if (delta == "hardware") p.delta = DeltaBehaviour::hardware;
  else if (delta == "paper") p.delta = DeltaBehaviour::paper;
  else throw_error(ErrorKind::Input, "unknown delta behaviour '" + delta + "': use hardware or paper");
  if (min_surface < 1) throw_error(ErrorKind::Input, "min_surface_bytes must be >= 1");
  p.min_surface_bytes = min_surface;
  p.compile_budget = budget;
  return p;
}

nb::list io_list(const std::vector<runtime::IOSlot>& slots) {
  nb::list l;
  for (const auto& s : slots) l.append(nb::make_tuple(s.name, dtype_name(s.dtype), nb::tuple(nb::cast(s.shape))));
  return l;
}

nb::list warning_list(const std::vector<Warning>& ws) {
  nb::list l;
  for (const auto& w : ws) l.append(nb::make_tuple(w.constraint, w.message));
  return l;
}

// Validates one caller array against an input slot and copies it into the slot's surface.
void write_array(Program& p, int slot, const std::string& name, const nb::handle& value, bool stage) {
  const runtime::IOSlot& io = p.inputs()[slot];
  AnyArray a;
  if (!nb::try_cast(value, a))
    throw_error(ErrorKind::Input, "input '" + name + "' must be a numpy array, got " +
                                      nb::cast<std::string>(nb::str(nb::handle(value.type()).attr("__name__"))));
  DType t;
  if (!dtype_of(a.dtype(), &t) || (t != DType::fp16 && t != DType::fp32))
    throw_error(ErrorKind::Input, "input '" + name + "' has dtype " + dl_name(a.dtype()) + "; the program takes " +
                                      dtype_name(io.dtype) + " — pass float16 or float32 (e.g. x.astype(np.float16))");
  Shape sh = shape_of(a);
  if (sh != io.shape)
    throw_error(ErrorKind::Input, "input '" + name + "' has shape " + shape_str(sh) + ", the program declares " +
                                      shape_str(io.shape));
  if (!c_contiguous(a))
    throw_error(ErrorKind::Input, "input '" + name + "' is not C-contiguous; pass np.ascontiguousarray(...)");
  p.write_input((size_t)slot, a.data(), t, a.size(), stage);
}

nb::object read_output(Program& p, size_t slot) {
  const runtime::IOSlot& io = p.outputs()[slot];
  void* dst;
  nb::object arr = new_array(io.dtype, io.shape, &dst);
  std::memcpy(dst, p.output_surface(slot)->data(), io.bytes());  // packed from byte 0 (C14)
  return arr;
}

// What a weight update did (runtime::UpdateReport); orion.weight_updates.WeightUpdate wraps it.
nb::dict report_dict(const runtime::UpdateReport& r) {
  nb::dict d;
  d["compiles"] = r.compiles;
  d["hidden_compiles"] = r.hidden_compiles;
  d["unverified_loads"] = r.unverified_loads;
  d["loads"] = r.loads;
  d["unloads"] = r.unloads;
  d["budget_used"] = r.budget_used;
  d["warnings"] = warning_list(r.warnings);
  return d;
}

// A weight update with the GIL released: a delta recipe may compile or wait on the device.
template <class F>
nb::dict update(Program& p, const nb::dict& w, F f) {
  std::vector<runtime::WeightEntry> weights = to_weights(w);
  runtime::UpdateReport r;
  {
    nb::gil_scoped_release nogil;
    r = f(p, std::move(weights));
  }
  return report_dict(r);
}

// The live-columns hint (Program::eval): None, an int for every output, or {output name: int}.
std::optional<std::vector<int64_t>> live_slots(const Program& p, const nb::handle& live) {
  if (live.is_none()) return std::nullopt;
  std::vector<int64_t> r(p.outputs().size(), -1);
  if (nb::isinstance<nb::dict>(live)) {
    for (auto [k, v] : nb::borrow<nb::dict>(live)) {
      std::string name = nb::cast<std::string>(k);
      int slot = p.output_slot(name);
      if (slot < 0) throw_error(ErrorKind::Input, "live_columns names unknown output '" + name + "'");
      r[(size_t)slot] = nb::cast<int64_t>(v);
    }
  } else {
    std::fill(r.begin(), r.end(), nb::cast<int64_t>(live));
  }
  for (int64_t v : r)
    if (v < -1) throw_error(ErrorKind::Input, "live_columns must be >= 0 (or -1: all), got " + std::to_string(v));
  return r;
}

// A 2-D fp16 view (an engine's [rows, S] view of a surface or array; strides in elements, positive).
using ViewArray = nb::ndarray<nb::device::cpu, nb::ndim<2>>;
using ReadView = nb::ndarray<nb::ro, nb::device::cpu, nb::ndim<2>>;  // a source may be read-only

template <class A>
const uint16_t* view_of(const A& a, const char* what, int64_t* row, int64_t* col, int64_t* cols) {
  DType t;
  if (!dtype_of(a.dtype(), &t) || t != DType::fp16)
    throw_error(ErrorKind::Input, std::string("chain: ") + what + " must be float16, not " + dl_name(a.dtype()));
  if (a.stride(0) < 0 || a.stride(1) < 0)
    throw_error(ErrorKind::Input, std::string("chain: ") + what + " has a negative stride");
  *row = (int64_t)a.stride(0);
  *col = (int64_t)a.stride(1);
  *cols = (int64_t)a.shape(1);
  return (const uint16_t*)a.data();
}

// The Python face of runtime::Chain: also keeps the programs, surfaces and arrays its steps point into alive.
struct PyChain {
  runtime::Chain chain;
  std::vector<nb::object> keep;
};

}  // namespace

void bind_runtime(nb::module_& m) {
  nb::class_<PyChain>(m, "Chain",
                      "Evaluations run in one call (runtime/chain.h): per step, surfaces bound to input slots, columns "
                      "copied between fp16 [rows, columns] views, one eval, an optional non-finite check.")
      .def(nb::init<>())
      .def(
          "add_step",
          [](PyChain& c, nb::handle program, std::vector<std::pair<size_t, SurfacePtr>> binds, nb::list copies,
             nb::handle live, nb::handle check, nb::list fills) {
            runtime::ChainStep s;
            if (!nb::try_cast(program, s.program) || !s.program)
              throw_error(ErrorKind::Input, "chain: a step's program must be a native Program (prog._p)");
            for (const auto& [slot, surface] : binds) {
              if (slot >= s.program->inputs().size() || !surface)
                throw_error(ErrorKind::Input, "chain: bind to input slot " + std::to_string(slot) + " of " +
                                                  std::to_string(s.program->inputs().size()));
            }
            s.binds = std::move(binds);
            for (nb::handle item : fills) {
              nb::tuple t;
              cpu::kernels::CompressedWeight* w = nullptr;
              nb::ndarray<half_t, nb::device::cpu, nb::c_contig> dst;
              if (!nb::try_cast(item, t) || t.size() != 3 || !nb::try_cast(t[0], w) || !w || !nb::try_cast(t[1], dst))
                throw_error(ErrorKind::Input, "chain: a fill is (CompressedWeight, dst: C-contiguous 3-D fp16 array, width)");
              const int64_t width = nb::cast<int64_t>(t[2]);
              const int64_t ld = dst.ndim() == 3 ? (int64_t)dst.shape(2) : 0;
              if (!w->panels_fit(width, ld, (int64_t)dst.size()))
                throw_error(ErrorKind::Input, "chain: a fill's dst must be [ceil(M / width), K, ld >= width] with "
                                              "width a multiple of 16");
              f16* out = reinterpret_cast<f16*>(dst.data());
              s.fills.push_back([w, out, width, ld] { w->panels_into(out, width, ld); });
              c.keep.push_back(nb::borrow(t[0]));
              c.keep.push_back(nb::borrow(t[1]));
            }
            for (nb::handle item : copies) {
              nb::tuple t;
              ReadView src;
              ViewArray dst;
              if (!nb::try_cast(item, t) || t.size() != 4 || !nb::try_cast(t[0], src) || !nb::try_cast(t[1], dst))
                throw_error(ErrorKind::Input, "chain: a copy is (src, dst, cols, at_pos) with src and dst 2-D arrays, "
                                              "dst writable");
              runtime::ColumnCopy k;
              k.src = view_of(src, "a copy's source", &k.src_row, &k.src_col, &k.src_cols);
              k.dst = const_cast<uint16_t*>(view_of(dst, "a copy's destination", &k.dst_row, &k.dst_col, &k.dst_cols));
              if (src.shape(0) != dst.shape(0))
                throw_error(ErrorKind::Input, "chain: a copy's views have " + std::to_string(src.shape(0)) + " and " +
                                                  std::to_string(dst.shape(0)) + " rows");
              k.rows = (int64_t)src.shape(0);
              k.cols = nb::cast<int64_t>(t[2]);
              k.at_pos = nb::cast<bool>(t[3]);
              if (k.cols < runtime::ColumnCopy::kFilled || (k.at_pos && k.cols == runtime::ColumnCopy::kFilled))
                throw_error(ErrorKind::Input, "chain: a copy's cols must be >= 0, -1 (n) or -2 (pos + n, not at pos)");
              s.copies.push_back(k);
              c.keep.push_back(nb::borrow(t[0]));
              c.keep.push_back(nb::borrow(t[1]));
            }
            auto hint = live_slots(*s.program, live);
            s.has_live = (bool)hint;
            if (hint) s.live = *hint;
            if (!check.is_none()) {
              ReadView v;
              if (!nb::try_cast(check, v)) throw_error(ErrorKind::Input, "chain: the checked output must be a 2-D array");
              int64_t row, col, cols;
              s.check.at = view_of(v, "the checked output", &row, &col, &cols);
              s.check.row = row;
              s.check.col = col;
              s.check.rows = (int64_t)v.shape(0);
              s.check.cols = cols;
              c.keep.push_back(nb::borrow(check));
            }
            c.keep.push_back(nb::borrow(program));
            c.chain.add(std::move(s));
          },
          nb::arg("program"), nb::arg("binds"), nb::arg("copies"), nb::arg("live") = nb::none(),
          nb::arg("check") = nb::none(), nb::arg("fills") = nb::list(),
          "Appends a step: binds [(input slot, surface)], fills [(CompressedWeight, dst, width): panels_into after "
          "the binds], copies in order [(src view, dst view: 2-D fp16, columns, -1 for n or -2 for pos + n, "
          "at pos)], the program's live-columns hint, an output view to check for non-finite values.")
      .def(
          "run",
          [](PyChain& c, int64_t n, int64_t pos) {
            std::vector<Warning> w;
            int64_t bad;
            {
              nb::gil_scoped_release nogil;
              bad = c.chain.run(n, pos, &w);
            }
            return nb::make_tuple(bad, warning_list(w));
          },
          nb::arg("n"), nb::arg("pos"),
          "Runs the steps with n live columns at cache position pos: (index of the first step whose check failed "
          "or -1, warnings).")
      .def("__len__", [](const PyChain& c) { return c.chain.size(); });

  m.attr("SURFACE_MAPPED_BYTES") = Surface::kMappedBytes;  // simulator surfaces from this size: mapped zero pages
  nb::class_<Surface>(m, "Surface", "IOSurface-like flat buffer; tensors are packed [1, C, 1, S] from byte 0.")
      .def(nb::new_([](size_t nbytes, bool mapped) { return std::make_shared<Surface>(nbytes, mapped); }),
           nb::arg("nbytes"), nb::arg("mapped") = false,
           "Zero-filled: heap memory below SURFACE_MAPPED_BYTES, else (or with mapped) mapped zero pages.")
      .def_prop_ro("alloc_size", &Surface::alloc_size)
      .def_prop_ro("resident_bytes", &Surface::resident_bytes,
                   "Bytes of it in memory now: its alloc size, or (a big simulator surface: mapped zero pages) the "
                   "pages written so far.")
      .def_prop_ro("id", &Surface::id)
      .def(
          "set_panels",
          [](Surface& s, nb::list parts) {
            std::vector<cpu::kernels::PanelsAt> out;
            for (nb::handle item : parts) {
              nb::tuple t;
              cpu::kernels::PanelsAt p;
              std::shared_ptr<cpu::kernels::CompressedWeight> w;
              if (!nb::try_cast(item, t) || t.size() != 4 || !nb::try_cast(t[0], w) || !w ||
                  !nb::try_cast(t[1], p.offset) || !nb::try_cast(t[2], p.width) || !nb::try_cast(t[3], p.ld))
                throw_error(ErrorKind::Input, "set_panels: a part is (CompressedWeight, byte offset, width, ld)");
              p.weight = std::move(w);
              out.push_back(std::move(p));
            }
            s.set_panels(std::move(out));
          },
          nb::arg("parts"),
          "Compressed weights standing for parts of the bytes, [(CompressedWeight, byte offset, width, ld)] in "
          "CompressedWeight.panels_into's layout: a simulator program whose only readers of the input are panel "
          "GEMMs reads the weights and leaves the bytes untouched; any other eval decodes them into the bytes first.")
      .def_prop_ro("panel_count", [](const Surface& s) { return s.panels().size(); })
      .def("zero", &Surface::zero, "All bytes zero again; a mapped surface gives its pages back.")
      .def(
          "view",
          [](std::shared_ptr<Surface> s, const std::string& dtype, std::vector<int64_t> shape) {
            DType t;
            if (!dtype_from_name(dtype, &t) || dtype_size(t) == 0)
              throw_error(ErrorKind::Input, "unknown dtype '" + dtype + "' (use fp16, fp32, int32, uint8, ...)");
            if (shape.empty()) shape = {(int64_t)(s->alloc_size() / dtype_size(t))};
            for (int64_t d : shape) if (d < 0) throw_error(ErrorKind::Input, "negative dimension in view shape");
            if ((size_t)shape_numel(shape) * dtype_size(t) > s->alloc_size())
              throw_error(ErrorKind::Input, "view " + shape_str(shape) + " of " + dtype + " needs more than the surface's " +
                                                std::to_string(s->alloc_size()) + " bytes");
            if (shape.size() > 32)      // numpy's own limit is 64; no surface layout needs more than a few
              throw_error(ErrorKind::Input, "view of rank " + std::to_string(shape.size()) + " (at most 32 dimensions)");
            std::vector<size_t> dims(shape.begin(), shape.end());
            // The view keeps the surface alive through a capsule holding a shared_ptr copy.
            auto* keep = new std::shared_ptr<Surface>(s);
            nb::capsule owner(keep, [](void* p) noexcept { delete static_cast<std::shared_ptr<Surface>*>(p); });
            return nb::cast(nb::ndarray<nb::numpy>(s->data(), shape.size(), dims.data(), owner, nullptr, dl_dtype(t)));
          },
          nb::arg("dtype") = "uint8", nb::arg("shape") = std::vector<int64_t>{},
          "Zero-copy numpy view of the surface's first bytes (packed, row-major).");

  nb::class_<Program>(m, "Program", "A compiled program (low level; see orion.Program).")
      .def_prop_ro("identifier", &Program::identifier)
      .def_prop_ro("mil", &Program::mil)
      .def_prop_ro("folder", &Program::folder)
      .def_prop_ro("backend", &Program::backend_name)
      .def_prop_ro("weight_keys", &Program::weight_keys)
      .def_prop_ro("state", [](const Program& p) { return std::string(runtime::state_name(p.state())); })
      .def_prop_ro("inputs", [](const Program& p) { return io_list(p.inputs()); })
      .def_prop_ro("outputs", [](const Program& p) { return io_list(p.outputs()); })
      .def_prop_ro("compile_warnings", [](const Program& p) { return warning_list(p.compile_warnings()); })
      .def_prop_ro("cost", [](const Program& p) {
        auto c = p.cost();
        nb::dict d;
        d["flops"] = c.flops;
        d["weight_bytes"] = c.weight_bytes;
        d["activation_bytes"] = c.activation_bytes;
        d["est_ms"] = c.est_ms;
        d["dispatch_ms"] = c.dispatch_ms;
        nb::list ops;
        for (const auto& o : c.ops) {
          nb::dict r;
          r["name"] = o.name;
          r["op"] = o.op;
          r["unit"] = o.unit;
          r["flops"] = o.flops;
          r["bytes"] = o.bytes;
          r["est_ms"] = o.est_ms;
          ops.append(r);
        }
        d["ops"] = ops;
        return d;
      })
      .def("load", &Program::load)
      .def("unload", &Program::unload)
      .def("release", &Program::release)
      .def("input_slot", &Program::input_slot)
      .def("reads_panels", &Program::reads_panels, nb::arg("slot"),
           "Whether the program reads input slot `slot` from a bound surface's panels (Surface.set_panels).")
      .def("output_slot", &Program::output_slot)
      .def("input_surface", &Program::input_surface)
      .def("output_surface", &Program::output_surface)
      .def("bind_input", &Program::bind_input)
      .def("bind_output", &Program::bind_output)
      .def("new_surface", &Program::new_surface, nb::arg("nbytes"),
           "A zero-filled surface this program's backend can bind (an IOSurface on the ANE).")
      .def("staged", &Program::staged)
      .def(
          "call",
          [](Program& p, nb::dict arrays, nb::handle live) {
            auto hint = live_slots(p, live);
            // One call = write inputs, eval, read outputs, atomically per program. Taken with the GIL
            // released so a holder waiting for the GIL can never deadlock with us.
            std::unique_lock<std::mutex> call(p.call_mutex(), std::defer_lock);
            {
              nb::gil_scoped_release nogil;
              call.lock();
            }
            size_t n_in = p.inputs().size();
            std::vector<bool> given(n_in, false);
            for (auto [k, v] : arrays) {
              std::string name = nb::cast<std::string>(k);
              int slot = p.input_slot(name);
              if (slot < 0) {
                std::string names;
                for (const auto& io : p.inputs()) names += (names.empty() ? "" : ", ") + io.name;
                throw_error(ErrorKind::Input, "unknown input '" + name + "'; the program's inputs are: " + names);
              }
              write_array(p, slot, name, v, false);
              given[slot] = true;
            }
            for (size_t i = 0; i < n_in; ++i)
              if (!given[i] && !p.staged(i))
                throw_error(ErrorKind::Input, "missing input '" + p.inputs()[i].name + "' (" + dtype_name(p.inputs()[i].dtype) +
                                                  " " + shape_str(p.inputs()[i].shape) + "); stage() it or pass it");
            std::vector<Warning> w;
            {
              nb::gil_scoped_release nogil;
              w = p.eval(hint ? &*hint : nullptr);
            }
            nb::dict out;
            for (size_t j = 0; j < p.outputs().size(); ++j) out[nb::str(p.outputs()[j].name.c_str())] = read_output(p, j);
            return nb::make_tuple(out, warning_list(w));
          },
          nb::arg("arrays"), nb::arg("live") = nb::none(),
          "Writes inputs by name, evaluates, returns ({output name: array}, warnings); `live`: the live-columns hint.")
      .def(
          "stage",
          [](Program& p, const std::string& name, nb::handle value) {
            std::unique_lock<std::mutex> call(p.call_mutex(), std::defer_lock);
            {
              nb::gil_scoped_release nogil;
              call.lock();
            }
            int slot = p.input_slot(name);
            if (slot < 0) throw_error(ErrorKind::Input, "unknown input '" + name + "'");
            write_array(p, slot, name, value, true);
          },
          nb::arg("name"), nb::arg("array"), "Writes an input surface once; later calls may omit that input.")
      .def(
          "eval",
          [](Program& p, nb::handle live) {
            auto hint = live_slots(p, live);
            std::vector<Warning> w;
            {
              nb::gil_scoped_release nogil;
              w = p.eval(hint ? &*hint : nullptr);
            }
            return warning_list(w);
          },
          nb::arg("live") = nb::none())
      .def(
          "live_notes",
          [](Program& p, nb::handle live) {
            auto hint = live_slots(p, live);
            return hint ? p.live_notes(*hint) : std::vector<std::string>{};
          },
          nb::arg("live"),
          "Why parts of the program compute every column under the live-columns hint `live`.")
      .def(
          "eval_slots",
          [](Program& p, std::vector<SurfacePtr> in, std::vector<SurfacePtr> out) {
            std::vector<Warning> w;
            {
              nb::gil_scoped_release nogil;
              w = p.eval_slots(in, out);
            }
            return warning_list(w);
          },
          nb::arg("inputs"), nb::arg("outputs"), "Raw request: surfaces bound to hardware slots in the order given.")
      .def("read_output", [](Program& p, const std::string& name) {
        int slot = p.output_slot(name);
        if (slot < 0) throw_error(ErrorKind::Input, "unknown output '" + name + "'");
        return read_output(p, (size_t)slot);
      })
      .def("recompile", [](Program& p, nb::dict w) {
        return update(p, w, [](Program& q, std::vector<runtime::WeightEntry> ws) { return q.recompile(std::move(ws)); });
      })
      .def("delta_reload", [](Program& p, nb::dict w) {
        return update(p, w, [](Program& q, std::vector<runtime::WeightEntry> ws) { return q.delta_reload(ws); });
      })
      .def("delta_patch", [](Program& p, nb::dict w) {
        return update(p, w, [](Program& q, std::vector<runtime::WeightEntry> ws) { return q.delta_patch(std::move(ws)); });
      });

  m.def(
      "compile",
      [](nb::object mil, nb::object weights, const std::string& backend, const std::string& chip,
         const std::string& strictness, const std::string& delta, int64_t min_surface, int64_t budget) {
        // C09/C11: the text crosses as bytes and the weight dictionary is never nil.
        std::string text = to_text(mil);
        std::vector<runtime::WeightEntry> w;
        if (!weights.is_none()) {
          if (!nb::isinstance<nb::dict>(weights)) throw_error(ErrorKind::Input, "weights must be a dict {\"@model_path/...\": bytes}");
          w = to_weights(nb::borrow<nb::dict>(weights));
        }
        runtime::Backend& be = runtime::find_backend(backend);
        Profile prof = make_profile(chip, strictness, delta, min_surface, budget);
        std::shared_ptr<Program> p;
        {
          nb::gil_scoped_release nogil;
          p = std::make_shared<Program>(be, std::move(text), std::move(w), prof);
        }
        return p;
      },
      nb::arg("mil"), nb::arg("weights").none() = nb::none(), nb::arg("backend") = "sim", nb::arg("chip") = "m4",
      nb::arg("strictness") = "strict", nb::arg("delta") = "hardware", nb::arg("min_surface_bytes") = kMinSurfaceBytes,
      nb::arg("compile_budget") = kCompileBudget);

  m.def("backends", [] {
    nb::list l;
    for (const auto& s : runtime::backend_statuses()) {
      nb::dict d;
      d["name"] = s.name;
      d["available"] = s.available;
      d["reason"] = s.reason;
      l.append(d);
    }
    return l;
  }, "Every backend built into this module, with availability and the reason when unavailable.");
  m.def("counters", &runtime::counters_snapshot);
  m.def("reset_counters", &runtime::reset_counters);
  m.def("budget", [](const std::string& backend) {
    auto b = runtime::budget(backend);
    return std::make_pair(b.used, b.limit);
  }, nb::arg("backend") = "sim");
  m.def("set_budget_limit", &runtime::set_budget_limit, nb::arg("backend"), nb::arg("limit"));
  m.def("reset_budget", &runtime::reset_budget, nb::arg("backend") = "sim");
  m.def("folder_root", &runtime::folder_root);
  m.def("live_folder_count", &runtime::live_folder_count);
  m.def("shutdown", [] {
    runtime::cache_clear();
    runtime::remove_all_folders();
  });
}

}  // namespace orion::bindings
