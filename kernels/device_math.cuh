// Device arithmetic shared by the CE kernels (ce/ce.cu), the fused GEMM's
// epilogue (flce/sm90/ce_epilogue.cuh) and its small kernels (flce/sm90/stats.cu):
// the element conversions, the few special-function forms whose instruction
// count is the cost of a kernel that touches every logit once, and the
// deterministic block reductions that end a call.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "model/types.hpp"

namespace celtune::cuda {

// An element of a kernel's input or output dtype to and from fp32 (the kernels'
// arithmetic), round to nearest even.
template <typename T>
struct Conv;
template <>
struct Conv<float> {
  __device__ static float to(float v) { return v; }
  __device__ static float from(float v) { return v; }
};
template <>
struct Conv<__nv_bfloat16> {
  __device__ static float to(__nv_bfloat16 v) { return __bfloat162float(v); }
  __device__ static __nv_bfloat16 from(float v) { return __float2bfloat16_rn(v); }
};
template <>
struct Conv<__half> {
  __device__ static float to(__half v) { return __half2float(v); }
  __device__ static __half from(float v) { return __float2half_rn(v); }
};

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
// rounding); NaN stays NaN and ±inf gives ±s, as tanhf does. The CE kernels' form
// (an IEEE division and tanhf took the dZ kernel to 2.06 TB/s at Gemma-2-2B, 69%
// of a copy, on the H100), and the fused epilogue's where the softcap exceeds
// kSm90FixedReferenceMaxSoftcap.
__device__ __forceinline__ float softcap_fast(float x, float s, float inv_s, float* e_out = nullptr,
                                              float* r_out = nullptr) {
  const float t = x * inv_s;
  const float e = exp2_approx(-2.8853900817779268f * fabsf(t));  // 2·log2(e)
  const float r = __fdividef(1.0f, 1.0f + e);  // (1 − e)·r is __fdividef(1 − e, 1 + e) bit for bit
  if (e_out) *e_out = e, *r_out = r;
  return copysignf(s * ((1.0f - e) * r), t);
}
// The same tanh scaled by c: c·tanh(x/s), given k = −2·log2(e)/s, with e and
// r = 1/(1 + e) for the caller. tanh|t| = 2r − 1, so it is one FMA from r: the
// fused GEMM's epilogue takes c = s·log2(e) and gets ẑ in log2 units, the
// exponent of its sum one FADD away (with the epilogue's other changes of
// 2026-11-24, its instructions fell by a fifth: docs/results.md). 2r − 1 cancels
// near t = 0: an absolute error of a few ulp of c, the order of softcap_fast's,
// so the LSE the epilogue folds and the ẑ a CE kernel differentiates (a dZ pass
// after the fused GEMM: fp16, label smoothing, caps above
// kSm90FixedReferenceMaxSoftcap) differ by a few ulp. Not the CE kernels' form:
// there it took the dZ kernel from 64 to 72 registers (3 instead of 4 blocks an
// SM), and Gemma-2-2B's cuBLASLt step on the H200 from 30.6 to 31.7 ms in an A/B
// (2026-11-24).
__device__ __forceinline__ float softcap_scaled(float x, float k, float c, float* e, float* r) {
  *e = exp2_approx(fabsf(x) * k);
  *r = __fdividef(1.0f, 1.0f + *e);
  return copysignf(fmaf(*r, 2.0f * c, -c), x);
}
// A quarter of dẑ/dx = 1 − tanh²(x/s) = 4e/(1 + e)² = 4e·r², from softcap_scaled's
// or softcap_fast's e and r: accurate where 1 − (ẑ/s)² cancels (|x| ≫ s, where
// 1 − tanh² → 4e and ẑ/s rounds to ±1: a relative error of 1 there at s = 0.05 on
// unit logits). A quarter, so that a caller can take the 4 into an exponential it
// computes anyway.
__device__ __forceinline__ float softcap_dtanh_quarter(float e, float r) { return e * r * r; }

// tanh on the special-function unit: one instruction where softcap_scaled takes
// an exp2, a reciprocal and their FMAs, at a relative error of about 2⁻¹¹, so ẑ
// = s·tanh is off by up to s·2⁻¹¹ (0.015 at s = 30). Only for statistics that no
// gradient is formed against: the forward-only pass's loss and LSE, where the
// logits' 16-bit rounding already moves ẑ by up to 0.04 at |x| ≈ 20. Measured
// (docs/results.md, 2026-11-24, timed in rounds with its GEMM): Gemma-2-2B's
// fused forward 1.17–1.22× → 1.10–1.19× its GEMM (H100 and H200), validate's
// errors against fp64 the same to their third digit. Never for a chain factor: 1 − tanh² cancels where the softcap saturates.
__device__ __forceinline__ float tanh_approx(float x) {
  float y;
  asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// A thread's index in its block, and the block's threads, over all three
// dimensions (the merge kernels' blocks are 2-D).
__device__ __forceinline__ int block_thread() {
  return static_cast<int>(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z));
}
__device__ __forceinline__ int block_threads() { return static_cast<int>(blockDim.x * blockDim.y * blockDim.z); }

// Block-wide reduction in a fixed order (a shuffle tree within each warp, then one
// over the warps), so the same inputs give the same bits; the result is valid in
// thread 0. Every thread of the block must call it; at most 1024 threads, whole warps.
template <typename V, typename Op>
__device__ __forceinline__ V block_reduce(V v, Op op, V identity) {
  __shared__ V s[32];
  __syncthreads();  // a previous call's readers are done with s
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, off));
  const int t = block_thread(), warp = t / 32, lane = t % 32, nwarps = block_threads() / 32;
  if (lane == 0) s[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < nwarps ? s[lane] : identity;
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, off));
  }
  return v;
}

// The loss from the sum of the token losses (mean: over n valid targets, 0 when none).
__device__ __forceinline__ float reduced_loss(float total, Reduction red, int64_t n) {
  if (red != Reduction::mean) return total;
  return n ? total / static_cast<float>(n) : 0.0f;
}

// The end of a call in one launch: the threadfence reduction. Whether this block
// is the last of `arrivals` blocks to arrive at `done`, each after writing what
// the last one reads; the same answer in every thread. The last block reduces
// in a fixed order and returns the counter to zero.
//
// Thread 0 arrives with one acquire-release atomic: its release carries the
// block's writes (ordered before it by the barrier), its acquire orders the
// last block's reads after every other block's release, and the second barrier
// passes that on to the block's other threads. A fence before a relaxed atomic
// and a second fence in every thread of the last block cost a few rows' ce call
// ~0.7 µs more on the H100 (globaltimer inside the kernel).
__device__ __forceinline__ bool last_to_arrive(unsigned* done, unsigned arrivals) {
  __shared__ bool s_last;
  __syncthreads();  // every thread's writes precede thread 0's release
  if (block_thread() == 0) {
    unsigned before;
    asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;" : "=r"(before) : "l"(done) : "memory");
    s_last = before == arrivals - 1u;
  }
  __syncthreads();
  return s_last;
}

}  // namespace celtune::cuda
