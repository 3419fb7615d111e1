// See fake_sim.h. The device's chip follows ORION_ANE_FAKE_CHIP (m1..m5, default m4); the device is
// one concrete behaviour, so the contested rules run permissive (the backend has already validated the
// program with the caller's own profile).
#include "fake_sim.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "common/error.h"
#include "runtime/backends.h"
#include "runtime/sha256.h"

using namespace orion;

struct FakeProgram {
  std::shared_ptr<runtime::BackendModel> model;
};

namespace {

void set_err(char* err, size_t n, const std::string& m) {
  if (err && n) std::snprintf(err, n, "%s", m.c_str());
}

Profile device_profile() {
  Profile p;
  const char* c = std::getenv("ORION_ANE_FAKE_CHIP");
  Chip chip;
  if (c && chip_from_name(c, &chip)) p.chip = chip;
  p.strictness = Strictness::permissive;
  return p;
}

// Every BLOBFILE(path = string("...")) of the text, in order, without duplicates.
std::vector<std::string> blob_paths(const std::string& mil) {
  std::vector<std::string> out;
  const std::string tag = "BLOBFILE(path = string(\"";
  for (size_t at = mil.find(tag); at != std::string::npos; at = mil.find(tag, at + 1)) {
    size_t start = at + tag.size(), end = mil.find('"', start);
    if (end == std::string::npos) break;
    std::string p = mil.substr(start, end - start);
    bool seen = false;
    for (auto& o : out) seen = seen || o == p;
    if (!seen) out.push_back(p);
  }
  return out;
}

class External : public runtime::SurfaceStorage {
 public:
  explicit External(void* p) : p_(static_cast<uint8_t*>(p)) {}
  uint8_t* data() override { return p_; }

 private:
  uint8_t* p_;
};

}  // namespace

extern "C" FakeProgram* fake_compile(const char* mil, size_t mil_len, const char* dir, char* err, size_t err_len) {
  try {
    std::string text(mil, mil_len);
    std::vector<runtime::WeightEntry> weights;
    for (const auto& key : blob_paths(text)) {
      const std::string prefix = "@model_path/";
      if (key.compare(0, prefix.size(), prefix) != 0) {
        set_err(err, err_len, "BLOBFILE path '" + key + "' does not start with @model_path/");
        return nullptr;
      }
      std::string file = std::string(dir) + "/" + key.substr(prefix.size());
      std::ifstream f(file, std::ios::binary);
      if (!f) {
        set_err(err, err_len, "weight file " + file + " named by the MIL is not in the model folder");
        return nullptr;
      }
      weights.push_back({key, std::vector<uint8_t>((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>())});
    }
    runtime::CompileRequest req;
    req.mil = &text;
    req.weights = &weights;
    req.profile = device_profile();
    req.dir = dir;
    auto p = std::make_unique<FakeProgram>();
    p->model = runtime::find_backend("sim").compile(req);
    return p.release();
  } catch (const std::exception& e) {
    set_err(err, err_len, e.what());
    return nullptr;
  }
}

extern "C" void fake_program_free(FakeProgram* p) { delete p; }
extern "C" int fake_num_inputs(const FakeProgram* p) { return (int)p->model->inputs().size(); }
extern "C" int fake_num_outputs(const FakeProgram* p) { return (int)p->model->outputs().size(); }

extern "C" int fake_eval(FakeProgram* p, void* const* ins, const size_t* in_sizes, int nin, void* const* outs,
                         const size_t* out_sizes, int nout, char* err, size_t err_len) {
  try {
    std::vector<std::unique_ptr<runtime::Surface>> keep;
    std::vector<runtime::Surface*> in, out;
    for (int i = 0; i < nin; ++i) {
      keep.push_back(std::make_unique<runtime::Surface>(in_sizes[i], std::make_unique<External>(ins[i])));
      in.push_back(keep.back().get());
    }
    for (int i = 0; i < nout; ++i) {
      keep.push_back(std::make_unique<runtime::Surface>(out_sizes[i], std::make_unique<External>(outs[i])));
      out.push_back(keep.back().get());
    }
    p->model->eval(in, out, nullptr);
    return 0;
  } catch (const Error& e) {
    set_err(err, err_len, e.what());
    return e.kind == ErrorKind::Eval && e.status ? e.status : 0x1d;
  } catch (const std::exception& e) {
    set_err(err, err_len, e.what());
    return 0x1d;
  }
}

extern "C" void fake_sha256_upper(const void* data, size_t n, char out[65]) {
  std::string h = runtime::sha256_hex(data, n);
  std::memcpy(out, h.c_str(), 65);
}
