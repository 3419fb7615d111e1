// Runtime ISA selection: best supported table, ORION_ISA=scalar|avx2|avx512|neon overrides (only to a
// supported one), force_isa() switches at run time (tests). Tables are never called before the CPU
// check, so AVX code in the *_avx*.cpp files is never reached on machines without it.
#include <atomic>
#include <cstdlib>
#include <cstring>
#if defined(ORION_X86)
#include <cpuid.h>
#endif

#include "cpu/kernels/kernels.h"
#include "cpu/simd/isa.h"

namespace orion::cpu::simd {

#if !defined(ORION_X86)
const IsaOps* avx2_ops() { return nullptr; }
const IsaOps* avx512_ops() { return nullptr; }
#endif
#if !defined(ORION_ARM)
const IsaOps* neon_ops() { return nullptr; }
#endif

namespace {

#if defined(ORION_X86)
// CPUID.1:ECX bit 29. Asked directly because clang's __builtin_cpu_supports has no "f16c" (gcc's
// does); the avx2 check beside it already covers OS support for the YMM state.
bool has_f16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & (1u << 29));
}
#endif

const IsaOps* supported(const char* name) {
  if (!std::strcmp(name, "scalar")) return &scalar_ops();
#if defined(ORION_X86)
  __builtin_cpu_init();
  bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && has_f16c();
  if (!std::strcmp(name, "avx2")) return avx2 ? avx2_ops() : nullptr;
  if (!std::strcmp(name, "avx512")) {
    bool ok = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
              __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
    return ok ? avx512_ops() : nullptr;
  }
#endif
#if defined(ORION_ARM)
  if (!std::strcmp(name, "neon")) return neon_ops();  // aarch64: NEON + fp16 conversion are baseline
#endif
  return nullptr;
}

const IsaOps* best() {
  if (const char* env = std::getenv("ORION_ISA"))
    if (const IsaOps* t = supported(env)) return t;
  for (const char* n : {"avx512", "avx2", "neon"})
    if (const IsaOps* t = supported(n)) return t;
  return &scalar_ops();
}

std::atomic<const IsaOps*> g_active{nullptr};

}  // namespace

const IsaOps& ops() {
  const IsaOps* t = g_active.load(std::memory_order_acquire);
  if (!t) {
    t = best();
    g_active.store(t, std::memory_order_release);
  }
  return *t;
}

}  // namespace orion::cpu::simd

namespace orion::cpu::kernels {

const char* isa_name() { return simd::ops().name; }

bool force_isa(const char* name) {
  if (!name) return false;
  const simd::IsaOps* t = std::strcmp(name, "best") == 0 ? nullptr : simd::supported(name);
  if (!t && std::strcmp(name, "best") != 0) return false;
  simd::g_active.store(t ? t : simd::best(), std::memory_order_release);
  return true;
}

}  // namespace orion::cpu::kernels
