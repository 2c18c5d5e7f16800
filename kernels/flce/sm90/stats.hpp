// Host interface of the fused path's small kernel (stats.cu): the merge of the
// GEMM's per-tile partials into LSE and loss.
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

// lse[r0 + i] and token_loss[r0 + i] from partials [tiles][rows_pad] (+ Σẑ partials
// when label smoothing is on, else null) and z_target (the logits GEMM's, indexed
// like lse).
void merge_stats(const LsePair* lse_partials, const float* sumz_partials, int64_t rows_pad, int64_t tiles, int64_t r0,
                 int64_t rows, const StatsParams& p, const float* z_target, float* lse, float* token_loss,
                 cudaStream_t st);

}  // namespace celtune::cuda::sm90
