// The one interface every execution backend implements (simulator now, ANE later). Nothing above
// runtime/ knows which backend it talks to; what crosses is what the ANE itself takes: MIL text and
// a weight dictionary of MILBlob files.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "runtime/surface.h"
#include "sim/plan.h"
#include "sim/profile.h"

namespace orion::runtime {

struct WeightEntry {
  std::string key;             // "@model_path/weights/w.bin" (BLOBFILE path)
  std::vector<uint8_t> bytes;  // the whole MILBlob file
};

struct IOSlot {
  std::string name;  // MIL name
  DType dtype;
  Shape shape;
  size_t bytes() const { return (size_t)shape_numel(shape) * dtype_size(dtype); }
};

struct CompileRequest {
  const std::string* mil = nullptr;
  const std::vector<WeightEntry>* weights = nullptr;
  sim::Profile profile;
  std::string identifier;
  std::string dir;  // the program's temp folder, already holding model.mil and the weight files (C44)
};

// A compiled program as the device holds it. Shared by every Program with the same identifier.
class BackendModel {
 public:
  virtual ~BackendModel() = default;
  // I/O in hardware slot order: alphabetical (byte-wise) by MIL name (C03, C13).
  virtual const std::vector<IOSlot>& inputs() const = 0;
  virtual const std::vector<IOSlot>& outputs() const = 0;
  // Evaluates with surfaces bound to slots exactly as given (the hardware request): slot i of `in`
  // feeds inputs()[i]. Size and count rules are checked as the hardware does (eval-fail 0x1d).
  virtual void eval(const std::vector<Surface*>& in, const std::vector<Surface*>& out,
                    std::vector<sim::Warning>* warnings) = 0;
  virtual std::vector<sim::Warning> compile_warnings() const { return {}; }
  virtual sim::CostEstimate cost() const { return {}; }
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  virtual std::shared_ptr<BackendModel> compile(const CompileRequest& req) = 0;
  // I/O surfaces for this backend's programs (the ANE backend returns IOSurface-backed ones).
  virtual SurfacePtr make_surface(size_t alloc_size) { return std::make_shared<Surface>(alloc_size); }
};

Backend& sim_backend();

}  // namespace orion::runtime
