// Simulator compile + execute: mil::Program (+ weight files) -> checked, typed, executable Plan.
// build_plan performs type/shape inference for every op and rejects what the ANE compiler rejects
// (CompileError with the constraint ID and the statement). The Plan snapshots all const and weight data
// at build time (C07: weights are baked at compile), so later changes to the files have no effect.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/cost.h"
#include "common/dtype.h"
#include "common/profile.h"
#include "common/warning.h"
#include "cpu/kernels/compressed.h"
#include "mil/ast.h"

namespace orion::sim {

struct IOInfo {
  std::string name;
  DType dtype;  // fp16 or fp32 (C39 rejects others)
  Shape shape;
  size_t bytes() const { return (size_t)shape_numel(shape) * dtype_size(dtype); }
};

// Compressed weights standing for the bytes of inputs (runtime Surface::set_panels), by input index in inputs()
// order: null, or an input's parts, which must cover it (Plan::panels_cover).
using InputPanels = std::vector<const std::vector<cpu::kernels::PanelsAt>*>;

class Plan {
 public:
  virtual ~Plan() = default;
  virtual const std::vector<IOInfo>& inputs() const = 0;   // function parameters, text order
  virtual const std::vector<IOInfo>& outputs() const = 0;  // return tuple, text order
  // inputs[i]: packed data of inputs()[i] in its dtype; outputs[j]: packed destination of outputs()[j].
  // Thread-safe: may run concurrently with itself and other plans (per-call scratch memory).
  // Reproduce-class behaviour (C06, C35, C36, ...) appends to warnings when non-null.
  // `panels`: inputs read from compressed weights instead of their bytes (each covering its input).
  virtual void execute(const std::vector<const void*>& inputs, const std::vector<void*>& outputs,
                       std::vector<Warning>* warnings, const InputPanels* panels = nullptr) const = 0;
  virtual CostEstimate cost() const = 0;
  virtual size_t num_ops() const = 0;  // executed (non-const) statements
  // Dead-column skipping: live[j] >= 0 says the caller reads only the first live[j] entries of the
  // last axis of output j (-1: all of it); the rest of each output is then unspecified. The plan proves
  // op by op which parts of each value those entries read and computes only those where an op can
  // (sim/live.cpp); live entries are bit-identical to execute(). Default: a full execute.
  virtual void execute_live(const std::vector<const void*>& inputs, const std::vector<void*>& outputs,
                            std::vector<Warning>* warnings, const std::vector<int64_t>& live,
                            const InputPanels* panels = nullptr) const {
    execute(inputs, outputs, warnings, panels);
  }
  // Whether every reader of input `input` is a panel GEMM that can take its weight from a PanelsAt (the shared
  // programs' weights: a column-panel input, or slices of one, read transposed by matmuls) - and there is one.
  virtual bool reads_panels(size_t input) const { return false; }
  // Whether `parts` stand for every panel read of input `input`: a part at each reader's byte offset, with the
  // reader's rows, K and width, and ld = width (the plan reads the bytes dense).
  virtual bool panels_cover(size_t input, const std::vector<cpu::kernels::PanelsAt>& parts) const { return false; }
  // Why some steps still compute all of their output under `live` (ops that mix along the axis),
  // then a "summary: P of N steps compute a prefix, W all, K none" line.
  virtual std::vector<std::string> live_notes(const std::vector<int64_t>& live) const { return {}; }
};

struct WeightFile {
  std::string path;  // weight-dictionary key exactly as in BLOBFILE(path = ...), "@model_path/..."
  const uint8_t* data = nullptr;
  size_t size = 0;
};

// Compiles function "main". Errors: orion::Error(Compile) (constraint + statement), or
// orion::Error(BlobFormat) wrapped as Compile with the path/offset when a weight cannot be read.
std::unique_ptr<Plan> build_plan(const mil::Program& prog, const std::vector<WeightFile>& weights,
                                 const Profile& profile, std::vector<Warning>* warnings);

// The checks of build_plan (parse-level types and shapes, every constraint, the weight files) without
// an executable plan: BLOBFILE payloads are validated in place and never copied. For a backend whose
// device holds the program itself (the ANE): the same CompileErrors and warnings, I/O and cost.
struct ProgramInfo {
  std::vector<IOInfo> inputs, outputs;  // text order, as Plan::inputs()/outputs()
  CostEstimate cost;
};
ProgramInfo check_program(const mil::Program& prog, const std::vector<WeightFile>& weights, const Profile& profile,
                          std::vector<Warning>* warnings);

// ---- one statement's type without a program (orion.ir's shape inference) ------------------------------
// An operand of infer_type: the parameter it is passed as (several with one parameter: a tuple, in order),
// its type and whether it is a constant. Inference reads types only, never an operand's data.
struct OperandType {
  std::string param;
  DType dtype = DType::fp16;
  Shape shape;
  bool is_const = false;
};
// The result type of one `op` statement as build_plan infers it: the same signature check and registry
// infer, raising the same CompileErrors ("InvalidMILProgram: <op>: ..."), for a function of `opset`.
// Tensor operands are typed values (constexpr ops: typed attributes); `consts` are the literals of the
// const parameters. ANE constraints are not applied: they belong to compiling a whole program.
std::pair<DType, Shape> infer_type(const std::string& op, const std::vector<OperandType>& operands,
                                   std::vector<std::pair<std::string, mil::Literal>> consts, const std::string& opset);

// ---- constraint catalog (orion.sim.constraints()) ----------------------------------------------
struct ConstraintInfo {
  std::string id;          // "C01".."C47"
  std::string rule;        // short rule text from the catalog
  std::string kind;        // compile | eval | silent | process | api | perf | numeric
  // "[C]" several sources agree, "[S]" a single source, "[X]" sources conflict or it holds only under
  // conditions, "[D]" read from a decompilation of the framework; combined as in "[S]/[X]".
  std::string confidence;
  std::string reaction;    // what the simulator does under this profile: "compile-reject", "eval-fail",
                           // "reproduce", "warn", "count", "cost-model", "inactive", ...
  std::string where;       // where it is enforced: "plan", "runtime", "compiler", "none"
  bool active = true;      // false when this profile does not apply it
  std::vector<std::pair<std::string, int64_t>> limits;  // the numbers the check uses under this profile
};
std::vector<ConstraintInfo> constraint_catalog(const Profile& profile);

// Every op the simulator knows: its schema row (sim/ops/op.h) and its status under a profile.
struct OpInfo {
  std::string name;
  std::string family;
  std::vector<std::string> params;  // MIL spelling, required first; "?" suffix = optional
  std::vector<std::pair<std::string, std::string>> types;  // (param, type) in params order
  bool attr_params = false;
  std::string output;
  std::string evidence;
  std::vector<std::string> constraints;
  std::string lowering;
  std::string status;  // "supported", "rejected (C20)", "permissive only (C10)", ...
};
std::vector<OpInfo> op_catalog(const Profile& profile);

}  // namespace orion::sim
