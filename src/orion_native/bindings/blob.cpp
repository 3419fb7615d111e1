// Raw MILBlob functions for python/orion/native/blob.py (numpy-level API) and the fuzz harness.
// Inputs use the buffer protocol (bytes, bytearray, memoryview, numpy, mmap) without copying;
// outputs are bytes built in place.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>

#include <memory>
#include <optional>
#include <utility>

#include "bindings/bindings.h"
#include "blob/blob.h"
#include "common/error.h"

namespace orion::bindings {

namespace {

// Read-only view of a C-contiguous buffer, released on scope exit.
class Buffer {
 public:
  explicit Buffer(nb::handle obj) {
    if (PyObject_GetBuffer(obj.ptr(), &view_, PyBUF_SIMPLE) != 0) throw nb::python_error();
  }
  ~Buffer() { PyBuffer_Release(&view_); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  const uint8_t* data() const { return static_cast<const uint8_t*>(view_.buf); }
  size_t size() const { return size_t(view_.len); }

 private:
  Py_buffer view_{};
};

// Any integer (int, numpy integer) -> u64; outside [0, 2^64) is a bad offset, not an overflow crash.
uint64_t to_offset(nb::handle v) {
  nb::object i = nb::steal(PyNumber_Index(v.ptr()));
  if (!i.is_valid()) throw nb::python_error();  // TypeError: not an integer
  unsigned long long r = PyLong_AsUnsignedLongLong(i.ptr());
  if (r == (unsigned long long)-1 && PyErr_Occurred()) {
    PyErr_Clear();
    throw_error(ErrorKind::BlobFormat,
                "blob metadata offset " + std::string(nb::str(i).c_str()) + " is out of range; expected 0 <= offset < 2**64");
  }
  return r;
}

nb::dict record_dict(const blob::Record& r) {
  nb::dict d;
  d["metadata_offset"] = r.metadata_offset;
  d["dtype_code"] = uint32_t(r.dtype);
  d["dtype_name"] = blob::blob_dtype_name(r.dtype);
  d["size_in_bytes"] = r.size_in_bytes;
  d["data_offset"] = r.data_offset;
  d["padding_bits"] = r.padding_bits;
  return d;
}

nb::list str_list(const std::vector<std::string>& v) {
  nb::list l;
  for (const auto& s : v) l.append(nb::str(s.c_str(), s.size()));
  return l;
}

nb::tuple blob_write(nb::iterable blobs) {
  std::vector<std::unique_ptr<Buffer>> views;  // keep payload buffers alive while writing
  std::vector<blob::Input> inputs;
  for (nb::handle item : blobs) {
    size_t n = nb::len(item);
    if (n != 2 && n != 3) throw nb::type_error("blob_write: each blob is (dtype_code, data[, padding_bits])");
    uint32_t code = nb::cast<uint32_t>(item[0]);
    views.push_back(std::make_unique<Buffer>(item[1]));
    uint64_t padding = n == 3 ? nb::cast<uint64_t>(item[2]) : 0;
    inputs.push_back({blob::BlobDType(code), views.back()->data(), views.back()->size(), padding});
  }
  std::vector<uint64_t> offsets;
  size_t total = blob::write_size(inputs, &offsets);  // validates before allocating
  nb::object out = nb::steal(PyBytes_FromStringAndSize(nullptr, Py_ssize_t(total)));
  if (!out.is_valid()) throw nb::python_error();
  // PyBytes_AsString, not the macro: the limited API (abi3 wheels) has only the function; called with the GIL.
  auto* dst = reinterpret_cast<uint8_t*>(PyBytes_AsString(out.ptr()));
  {
    nb::gil_scoped_release unlocked;  // large memcpy; the buffers stay exported meanwhile
    blob::write_into(inputs, dst, total);
  }
  nb::list offs;
  for (uint64_t o : offsets) offs.append(o);
  return nb::make_tuple(out, offs);
}

nb::dict blob_read(nb::handle file, nb::handle offset, bool strict, bool ignore_sentinel,
                   std::optional<std::pair<uint32_t, uint64_t>> declared) {
  Buffer buf(file);
  blob::ReadOptions opt;
  opt.strict_spec = strict;
  opt.ignore_sentinel = ignore_sentinel;
  blob::Blob b = blob::read(buf.data(), buf.size(), to_offset(offset), opt);
  if (declared) blob::check_declaration(b, blob::BlobDType(declared->first), declared->second);
  nb::dict d = record_dict(b.record);
  if (!b.metadata_valid) d["dtype_name"] = "unknown";
  d["metadata_valid"] = b.metadata_valid;
  d["payload"] = nb::bytes(b.payload, b.payload_size);
  d["warnings"] = str_list(b.warnings);
  return d;
}

nb::tuple blob_list(nb::handle file, bool strict) {
  Buffer buf(file);
  blob::ReadOptions opt;
  opt.strict_spec = strict;
  std::vector<std::string> warnings;
  std::vector<blob::Record> recs = blob::list(buf.data(), buf.size(), &warnings, opt);
  nb::list out;
  for (const auto& r : recs) out.append(record_dict(r));
  return nb::make_tuple(out, str_list(warnings));
}

}  // namespace

void bind_blob(nb::module_& m) {
  m.def("blob_write", &blob_write, nb::arg("blobs"),
        "Spec-exact MILBlob v2 file from [(dtype_code, buffer[, padding_bits])] -> (bytes, metadata offsets).");
  m.def("blob_read", &blob_read, nb::arg("file"), nb::arg("offset"), nb::arg("strict") = false,
        nb::arg("ignore_sentinel") = false, nb::arg("declared") = nb::none(),
        "Validates the blob whose metadata sits at `offset` -> dict(metadata_offset, dtype_code, dtype_name, "
        "size_in_bytes, data_offset, padding_bits, metadata_valid, payload, warnings). `declared` = "
        "(dtype_code, element_count) of the referencing MIL const, checked against the record.");
  m.def("blob_list", &blob_list, nb::arg("file"), nb::arg("strict") = false,
        "Walks the record chain from offset 64 -> (list of record dicts, warnings).");
  m.def("blob_dtype_name", [](uint32_t code) { return blob::blob_dtype_name(blob::BlobDType(code)); },
        nb::arg("code"), "BlobDataType name of a dtype code ('unknown' when not a code).");
}

}  // namespace orion::bindings
