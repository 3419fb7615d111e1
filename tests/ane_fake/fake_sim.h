// C bridge from the fake AppleNeuralEngine (Objective-C) to the simulator (C++): the fake "aned"
// compiles and evaluates with orion's own simulator, so outputs are exactly what the simulator
// computes. Never throws; errors come back as text.
#pragma once
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct FakeProgram FakeProgram;

// Compiles MIL text whose BLOBFILE paths ("@model_path/...") are read from the folder `dir`, as aned
// reads them from the model's temp folder. NULL on failure, with the reason in err.
FakeProgram* fake_compile(const char* mil, size_t mil_len, const char* dir, char* err, size_t err_len);
void fake_program_free(FakeProgram* p);
int fake_num_inputs(const FakeProgram* p);
int fake_num_outputs(const FakeProgram* p);
// Evaluates with buffers in slot order. 0 on success, else the hardware status (0x1d) with err set.
int fake_eval(FakeProgram* p, void* const* ins, const size_t* in_sizes, int nin, void* const* outs,
              const size_t* out_sizes, int nout, char* err, size_t err_len);
// Upper-case hex SHA-256 (64 characters + NUL), as _ANEHashEncoding.
void fake_sha256_upper(const void* data, size_t n, char out[65]);

#ifdef __cplusplus
}
#endif
