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
// like lse). row_ref (the chunk's rows, or null): the references the GEMM stored
// q against (LogitsArgs::row_ref); a row any of whose partials holds another
// reference gets NaN there, for scaled_dz_rows to rescale (ce.hpp).
void merge_stats(const LsePair* lse_partials, const float* sumz_partials, int64_t rows_pad, int64_t tiles, int64_t r0,
                 int64_t rows, const StatsParams& p, const float* z_target, float* lse, float* token_loss,
                 float* row_ref, cudaStream_t st);

// row_ref[i] = kSm90RefLift + max over j < samples of (z[i, j] + b[j·stride]),
// from z = the logits of X's rows against W's rows 0, stride, 2·stride, …
// ([rows, samples] in dtype t, 16-bit, rows ld elements apart), and the bias
// (null: none) in the same dtype: the reference the logits GEMM stores q against
// without a softcap (variants.hpp). fmaxf drops NaN: a row of NaN gets −inf,
// which the epilogue never takes.
void sample_ref(DType t, const void* z, int samples, int64_t ld, int64_t stride, const void* bias, int64_t rows,
                float* row_ref, cudaStream_t st);

}  // namespace celtune::cuda::sm90
