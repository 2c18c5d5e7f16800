// The fused path's small kernels around the CE-statistics GEMM (plain CUDA):
//   sample_ref: before it, each row's reference for q from a few sampled logits
//     (no softcap, scaled dZ; variants.hpp).
//   merge_stats: the deterministic merge of the GEMM's per-tile partials into
//     LSE and per-token loss (flce-math.md steps 3–4), fixed order, no atomics,
//     with the target's ẑ that the GEMM's epilogue picked from the same tile.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernels/cuda_check.hpp"
#include "kernels/device_math.cuh"
#include "kernels/flce/sm90/stats.hpp"
#include "kernels/flce/sm90/variants.hpp"
#include "model/error.hpp"

namespace celtune::cuda::sm90 {
namespace {

__device__ __forceinline__ int64_t target_at(const StatsParams& p, int64_t row) {
  return p.targets_i64 ? static_cast<const int64_t*>(p.targets)[row]
                       : static_cast<int64_t>(static_cast<const int32_t*>(p.targets)[row]);
}
__device__ __forceinline__ bool is_valid(const StatsParams& p, int64_t y) {
  return y != p.ignore_index && y >= 0 && y < p.vocab;
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

// A block: merge_block_rows consecutive rows (coalesced) × slices of the tiles,
// kMergeThreads in all. The loads are latency-bound (a chunk's partials are a
// few MB): at 8 slices and one load in flight a thread, a 896-row chunk of
// Llama-3-8B took 35 µs on the H100; at 32 rows a block, GPT-2's 8192-row
// forward took 21 µs (ncu) in two waves of blocks, one an SM at 48 registers.
// Two blocks an SM (32 registers) run its 256 blocks in one wave: rows and
// the stride between a thread's tiles in 32 bits (check_supported bounds a
// fused row chunk), the offset in 64, advanced by the stride (no 64-bit products).
constexpr int kInFlight = 4;

__global__ void __launch_bounds__(kMergeThreads, 2)
    merge_stats_kernel(const LsePair* lse_partials, const float* sumz_partials, int rows_pad, int tiles,
                       int64_t r0, int rows, StatsParams p, const float* z_target, float* lse, float* token_loss,
                       const float* refs, float* row_ref, CallEnd end) {
  __shared__ float sm[kMergeThreads], sd[kMergeThreads], sz[kMergeThreads];
  __shared__ bool other[kMergeThreads];
  const int block_rows = blockDim.x, slices = blockDim.y, me = threadIdx.y * block_rows + threadIdx.x;
  const int i = static_cast<int>(blockIdx.x) * block_rows + static_cast<int>(threadIdx.x);  // check_supported
  float m = -INFINITY, d = 0.0f, zs = 0.0f;
  bool off_ref = false;  // a partial with terms against another reference than refs[i]
  // Read before the __syncthreads below: lse[r0 + i], which refs may be, is written after it.
  const float ref = refs && i < rows ? refs[i] : 0.0f;
  if (i < rows) {
    const int step = rows_pad * slices;  // from one of this thread's tiles to its next (check_supported)
    int64_t at = rows_pad * threadIdx.y + i;
    for (int t0 = threadIdx.y; t0 < tiles; t0 += slices * kInFlight) {
      LsePair q[kInFlight];
      float z[kInFlight];
#pragma unroll
      for (int k = 0; k < kInFlight; ++k, at += step) {  // loads first, then the dependent merges
        const bool in = t0 + k * slices < tiles;
        q[k] = in ? lse_partials[at] : LsePair{-INFINITY, 0.0f};
        z[k] = in && sumz_partials ? sumz_partials[at] : 0.0f;
      }
#pragma unroll
      for (int k = 0; k < kInFlight; ++k) {
        merge(m, d, q[k].m, q[k].d), zs += z[k];
        off_ref = off_ref || (refs && q[k].d != 0.0f && q[k].m != ref);
      }
    }
  }
  // The slices of a row in a tree of fixed pairs (deterministic): slice y takes
  // y + s, for s = slices/2 … 1. Rows past the chunk carry empty partials.
  sm[me] = m, sd[me] = d, sz[me] = zs, other[me] = off_ref;
  __syncthreads();
  for (int s = slices / 2; s > 0; s /= 2) {
    if (static_cast<int>(threadIdx.y) < s) {
      const int o = me + s * block_rows;
      merge(m, d, sm[o], sd[o]);
      zs += sz[o], off_ref = off_ref || other[o];
      sm[me] = m, sd[me] = d, sz[me] = zs, other[me] = off_ref;
    }
    __syncthreads();
  }
  // The row's loss, and its part of the call's end: the loss where the target is
  // valid, the count, the row if its target is out of range (count_targets' rule).
  float valid_loss = 0.0f;
  long long count = 0, bad = INT64_MAX;
  if (threadIdx.y == 0 && i < rows) {
    if (refs) row_ref[i] = off_ref ? NAN : ref;
    const int64_t gr = r0 + i, y = target_at(p, gr);
    const float L = m + logf(d);
    float loss = 0.0f;
    if (is_valid(p, y)) {
      const float eps = p.label_smoothing;  // its term left out at 0, as in ce's row_loss (a −inf bias)
      const float smooth = eps > 0.0f ? eps * (L - zs / static_cast<float>(p.vocab)) : 0.0f;
      loss = (1.0f - eps) * (L - z_target[gr]) + smooth + p.z_loss * L * L;
      valid_loss = loss, count = 1;
    } else if (y != p.ignore_index) {
      bad = gr;
    }
    lse[gr] = L;
    token_loss[gr] = loss;
  }
  if (end.block_loss == nullptr) return;
  const auto plus = [](auto a, auto b) { return a + b; };
  const float b_loss = block_reduce(valid_loss, plus, 0.0f);
  const long long b_count = block_reduce(count, plus, 0ll);
  const long long b_bad = block_reduce(bad, [](long long a, long long b) { return min(a, b); }, (long long)INT64_MAX);
  if (block_thread() == 0) {
    const int64_t slot = end.slot0 + blockIdx.x;
    end.block_loss[slot] = b_loss, end.block_count[slot] = b_count, end.block_bad[slot] = b_bad;
  }
  if (!end.last || !last_to_arrive(end.done, gridDim.x)) return;
  // The call's last block: every merge block's slot, earlier chunks' included
  // (their launches ended before this one began), in a fixed order. Read through
  // L2: other blocks of this launch wrote theirs just now.
  float total = 0.0f;
  long long n = 0, first = INT64_MAX;
  for (int64_t k = block_thread(); k < end.blocks; k += block_threads()) {
    total += __ldcg(end.block_loss + k), n += __ldcg(end.block_count + k);
    first = min(first, __ldcg(end.block_bad + k));
  }
  total = block_reduce(total, plus, 0.0f);
  n = block_reduce(n, plus, 0ll);
  first = block_reduce(first, [](long long a, long long b) { return min(a, b); }, (long long)INT64_MAX);
  if (block_thread() == 0) {
    *end.n_valid = n, *end.bad = first == INT64_MAX ? -1 : first;
    *end.loss = reduced_loss(total, p.reduction, n);
    *end.done = 0;
  }
}

}  // namespace

void merge_stats(const LsePair* lse_partials, const float* sumz_partials, int64_t rows_pad, int64_t tiles, int64_t r0,
                 int64_t rows, const StatsParams& p, const float* z_target, float* lse, float* token_loss,
                 const float* refs, float* row_ref, const CallEnd& end, cudaStream_t st) {
  if (refs && !row_ref) fail_usage("merge_stats: references without a row_ref to copy them to");
  if (rows <= 0) return;
  const int block_rows = merge_block_rows(rows);
  merge_stats_kernel<<<static_cast<unsigned>(merge_blocks(rows)), dim3(block_rows, kMergeThreads / block_rows), 0,
                       st>>>(lse_partials, sumz_partials, static_cast<int>(rows_pad), static_cast<int>(tiles), r0, static_cast<int>(rows), p, z_target, lse,
                             token_loss, refs, row_ref, end);
  CELTUNE_LAUNCHED();
}

namespace {
// A warp a row: the samples are a few hundred bytes a row.
template <typename T>
__global__ void sample_ref_kernel(const T* z, int samples, int64_t ld, int64_t stride, const T* bias, int64_t rows,
                                  float* row_ref) {
  const int64_t i = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (i >= rows) return;
  float m = -INFINITY;
  for (int j = lane; j < samples; j += 32) {
    float v = Conv<T>::to(z[i * ld + j]);
    if (bias) v += Conv<T>::to(bias[j * stride]);
    m = fmaxf(m, v);
  }
  for (int o = 16; o > 0; o /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  if (lane == 0) row_ref[i] = m + kSm90RefLift;
}
}  // namespace

void sample_ref(DType t, const void* z, int samples, int64_t ld, int64_t stride, const void* bias, int64_t rows,
                float* row_ref, cudaStream_t st) {
  if (rows <= 0) return;
  constexpr int kThreads = 256;
  const auto blocks = static_cast<unsigned>((rows * 32 + kThreads - 1) / kThreads);
  switch (t) {
    case DType::bf16:
      sample_ref_kernel<<<blocks, kThreads, 0, st>>>(static_cast<const __nv_bfloat16*>(z), samples, ld, stride,
                                                     static_cast<const __nv_bfloat16*>(bias), rows, row_ref);
      break;
    case DType::fp16:
      sample_ref_kernel<<<blocks, kThreads, 0, st>>>(static_cast<const __half*>(z), samples, ld, stride,
                                                     static_cast<const __half*>(bias), rows, row_ref);
      break;
    case DType::fp32: fail_usage("sampled references are for 16-bit inputs");
  }
  CELTUNE_LAUNCHED();
}

}  // namespace celtune::cuda::sm90
