// Host interface of the fused path's small kernels (stats.cu): the target logit
// of each row and the merge of the GEMM's per-tile partials into LSE and loss.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/flce/sm90/fused.hpp"
#include "model/types.hpp"

namespace celtune::cuda::sm90 {

// The loss options these kernels need (a subset of ce.hpp's LossParams, kept
// apart so the fused path does not depend on the CE kernels' internals).
struct StatsParams {
  int64_t vocab;
  const void* targets;
  bool targets_i64;
  int64_t ignore_index;
  float softcap, label_smoothing, z_loss;
};

// z_target[r0 + i] = softcap(x_{r0+i} · w_y + b_y) for valid rows, 0 otherwise.
void target_logits(DType t, const void* x, const void* w, const void* bias, int64_t r0, int64_t rows, int64_t hidden,
                   const StatsParams& p, float* z_target, cudaStream_t st);

// lse[r0 + i] and token_loss[r0 + i] from partials [tiles][rows_pad] (+ Σẑ partials
// when label smoothing is on, else null) and z_target.
void merge_stats(const LsePair* lse_partials, const float* sumz_partials, int64_t rows_pad, int64_t tiles, int64_t r0,
                 int64_t rows, const StatsParams& p, const float* z_target, float* lse, float* token_loss,
                 cudaStream_t st);

}  // namespace celtune::cuda::sm90
