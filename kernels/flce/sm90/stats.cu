// The fused path's small kernels around the CE-statistics GEMM (plain CUDA):
//   target_logits: ẑ at each valid row's target, z_y = x_i·w_y + b_y in fp32
//     (one warp per row, 16-byte loads), then softcap. It is not rounded to the
//     input dtype: the loss's target term is then closer to the truth than the
//     rounded tile's, and the gradient never reads it.
//   merge_stats: the deterministic merge of the GEMM's per-tile partials into
//     LSE and per-token loss (flce-math.md steps 3–4), fixed order, no atomics.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernels/cuda_check.hpp"
#include "kernels/flce/sm90/stats.hpp"

namespace celtune::cuda::sm90 {
namespace {

__device__ __forceinline__ float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_f32(__half v) { return __half2float(v); }

__device__ __forceinline__ int64_t target_at(const StatsParams& p, int64_t row) {
  return p.targets_i64 ? static_cast<const int64_t*>(p.targets)[row]
                       : static_cast<int64_t>(static_cast<const int32_t*>(p.targets)[row]);
}
__device__ __forceinline__ bool is_valid(const StatsParams& p, int64_t y) {
  return y != p.ignore_index && y >= 0 && y < p.vocab;
}
__device__ __forceinline__ float capped(float z, float s) { return s > 0.0f ? s * tanhf(z / s) : z; }

template <typename T>
__global__ void target_logits_kernel(const T* x, const T* w, const T* bias, int64_t r0, int64_t rows, int64_t hidden,
                                     StatsParams p, float* z_target) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (i >= rows) return;
  const int64_t y = target_at(p, r0 + i);
  if (!is_valid(p, y)) {
    if (lane == 0) z_target[r0 + i] = 0.0f;
    return;
  }
  // hidden is a multiple of 8 (the fused path's check), so rows split into uint4s.
  const uint4* xv = reinterpret_cast<const uint4*>(x + i * hidden);
  const uint4* wv = reinterpret_cast<const uint4*>(w + y * hidden);
  float acc = 0.0f;
  for (int64_t k = lane; k < hidden / 8; k += 32) {
    const uint4 a = xv[k], b = wv[k];
    const T* av = reinterpret_cast<const T*>(&a);
    const T* bv = reinterpret_cast<const T*>(&b);
#pragma unroll
    for (int e = 0; e < 8; ++e) acc = fmaf(to_f32(av[e]), to_f32(bv[e]), acc);
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
  if (lane == 0) {
    if (bias) acc += to_f32(bias[y]);
    z_target[r0 + i] = capped(acc, p.softcap);
  }
}

// Same ⊕ as the epilogue's (ce_epilogue.cuh): an empty side (d = 0) is skipped.
__device__ __forceinline__ void merge(float& m, float& d, float m2, float d2) {
  if (d2 == 0.0f) return;
  if (m2 > m) {
    d = d * __expf(m - m2) + d2;
    m = m2;
  } else {
    d = d + d2 * __expf(m2 - m);
  }
}

// A block: 32 consecutive rows (coalesced) × 32 slices of the tiles. The loads
// are latency-bound (a chunk's partials are a few MB): at 8 slices and one load
// in flight a thread, a 896-row chunk of Llama-3-8B took 35 µs on the H100.
constexpr int kRows = 32, kSlices = 32, kInFlight = 4;

__global__ void merge_stats_kernel(const LsePair* lse_partials, const float* sumz_partials, int64_t rows_pad,
                                   int64_t tiles, int64_t r0, int64_t rows, StatsParams p, const float* z_target,
                                   float* lse, float* token_loss) {
  __shared__ float sm[kSlices][kRows], sd[kSlices][kRows], sz[kSlices][kRows];
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kRows + threadIdx.x;
  float m = -INFINITY, d = 0.0f, zs = 0.0f;
  if (i < rows) {
    for (int64_t t0 = threadIdx.y; t0 < tiles; t0 += kSlices * kInFlight) {
      LsePair q[kInFlight];
      float z[kInFlight];
#pragma unroll
      for (int k = 0; k < kInFlight; ++k) {  // loads first, then the dependent merges
        const int64_t t = t0 + int64_t{k} * kSlices;
        q[k] = t < tiles ? lse_partials[t * rows_pad + i] : LsePair{-INFINITY, 0.0f};
        z[k] = t < tiles && sumz_partials ? sumz_partials[t * rows_pad + i] : 0.0f;
      }
#pragma unroll
      for (int k = 0; k < kInFlight; ++k) merge(m, d, q[k].m, q[k].d), zs += z[k];
    }
  }
  sm[threadIdx.y][threadIdx.x] = m, sd[threadIdx.y][threadIdx.x] = d, sz[threadIdx.y][threadIdx.x] = zs;
  __syncthreads();
  if (threadIdx.y != 0 || i >= rows) return;
  for (int j = 1; j < kSlices; ++j) {  // fixed order: deterministic
    merge(m, d, sm[j][threadIdx.x], sd[j][threadIdx.x]);
    zs += sz[j][threadIdx.x];
  }
  const int64_t gr = r0 + i;
  const float L = m + logf(d);
  float loss = 0.0f;
  if (is_valid(p, target_at(p, gr))) {
    const float eps = p.label_smoothing;
    loss = (1.0f - eps) * (L - z_target[gr]) + eps * (L - zs / static_cast<float>(p.vocab)) + p.z_loss * L * L;
  }
  lse[gr] = L;
  token_loss[gr] = loss;
}

}  // namespace

void target_logits(DType t, const void* x, const void* w, const void* bias, int64_t r0, int64_t rows, int64_t hidden,
                   const StatsParams& p, float* z_target, cudaStream_t st) {
  if (rows <= 0) return;
  constexpr int kWarps = 8;
  const auto blocks = static_cast<unsigned>((rows + kWarps - 1) / kWarps);
  if (t == DType::bf16)
    target_logits_kernel<<<blocks, 32 * kWarps, 0, st>>>(static_cast<const __nv_bfloat16*>(x) + r0 * hidden,
                                                        static_cast<const __nv_bfloat16*>(w),
                                                        static_cast<const __nv_bfloat16*>(bias), r0, rows, hidden, p,
                                                        z_target);
  else
    target_logits_kernel<<<blocks, 32 * kWarps, 0, st>>>(static_cast<const __half*>(x) + r0 * hidden,
                                                        static_cast<const __half*>(w), static_cast<const __half*>(bias),
                                                        r0, rows, hidden, p, z_target);
  CELTUNE_LAUNCHED();
}

void merge_stats(const LsePair* lse_partials, const float* sumz_partials, int64_t rows_pad, int64_t tiles, int64_t r0,
                 int64_t rows, const StatsParams& p, const float* z_target, float* lse, float* token_loss,
                 cudaStream_t st) {
  if (rows <= 0) return;
  const auto blocks = static_cast<unsigned>((rows + kRows - 1) / kRows);
  merge_stats_kernel<<<blocks, dim3(kRows, kSlices), 0, st>>>(lse_partials, sumz_partials, rows_pad, tiles, r0, rows, p,
                                                              z_target, lse, token_loss);
  CELTUNE_LAUNCHED();
}

}  // namespace celtune::cuda::sm90
