// Device arithmetic shared by the CE kernels (ce/ce.cu) and the fused GEMM's
// epilogue (flce/sm90/ce_epilogue.cuh): the few special-function forms whose
// instruction count is the cost of a kernel that touches every logit once.
#pragma once

namespace celtune::cuda {

inline constexpr float kLog2e = 1.4426950408889634f;
inline constexpr float kLn2 = 0.6931471805599453f;

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

// s·tanh(x/s) given 1/s (flce-math.md's softcap), with one exp2 and one
// reciprocal: tanh|t| = (1 − e)/(1 + e), e = exp(−2|t|) ∈ (0, 1], so nothing
// overflows. Absolute error ≈ 1e-7·s (a few ulp of ẑ, far under a 16-bit input's
// rounding); NaN stays NaN and ±inf gives ±s, as tanhf does. One form for the
// fused GEMM's epilogue and the CE kernels, so the LSE the epilogue folds and the
// ẑ the dZ kernel differentiates are the same numbers. (An IEEE division and
// tanhf took the dZ kernel to 2.06 TB/s at Gemma-2-2B, 69% of a copy, on the
// H100; an IEEE division and exp2f made Gemma-2-2B's fused forward 1.27× its GEMM.)
// The same ẑ, and the chain factor dẑ/dx = 1 − tanh²(x/s) = 4e/(1 + e)² from the
// same e and reciprocal: accurate where 1 − (ẑ/s)² cancels (|x| ≫ s, 1 − tanh → e).
__device__ __forceinline__ float softcap_fast(float x, float s, float inv_s, float* dtanh) {
  const float t = x * inv_s;
  const float e = exp2_approx(-2.8853900817779268f * fabsf(t));  // 2·log2(e)
  const float r = __fdividef(1.0f, 1.0f + e);  // (1 − e)·r is __fdividef(1 − e, 1 + e) bit for bit
  *dtanh = 4.0f * e * r * r;
  return copysignf(s * ((1.0f - e) * r), t);
}
// The same tanh scaled by c: c·tanh(x/s), given k = −2·log2(e)/s, with e and
// r = 1/(1 + e) for the caller. tanh|t| = 2r − 1, so it is one FMA from r:
// the fused GEMM's epilogue takes c = s·log2(e) and gets ẑ in log2 units, the
// exponent of its sum one FADD away (with the epilogue's other changes of
// 2026-11-24, its instructions fell by a fifth: docs/results.md). 2r − 1
// cancels near t = 0: an absolute error of a few ulp of c, the order of
// softcap_fast's.
__device__ __forceinline__ float softcap_scaled(float x, float k, float c, float* e, float* r) {
  *e = exp2_approx(fabsf(x) * k);
  *r = __fdividef(1.0f, 1.0f + *e);
  return copysignf(fmaf(*r, 2.0f * c, -c), x);
}
__device__ __forceinline__ float softcap_fast(float x, float s, float inv_s) {
  float unused;
  return softcap_fast(x, s, inv_s, &unused);
}

}  // namespace celtune::cuda
