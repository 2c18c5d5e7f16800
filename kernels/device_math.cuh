// Device arithmetic shared by the CE kernels (ce/ce.cu) and the fused GEMM's
// epilogue (flce/sm90/ce_epilogue.cuh): the few special-function forms whose
// instruction count is the cost of a kernel that touches every logit once.
#pragma once

namespace celtune::cuda {

inline constexpr float kLog2e = 1.4426950408889634f;

// 2^x on the special-function unit (ex2.approx: 2 ulp, flushes denormal results
// to zero, which an exponential's sum never misses; −inf gives 0, NaN stays
// NaN). exp2f without fast-math wraps the same instruction in range checks.
__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// max that propagates NaN (fmaxf drops it): a NaN logit poisons the row's max,
// and through it the sum of exponentials, with no separate test per element.
__device__ __forceinline__ float max_nan(float a, float b) {
  float y;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(y) : "f"(a), "f"(b));
  return y;
}

}  // namespace celtune::cuda
