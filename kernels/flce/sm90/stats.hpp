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
  Reduction reduction;
};

// A merge block's rows: 32 (each warp loads 256 contiguous bytes a tile) where
// that gives at least a block an SM, else 8 (64 bytes), so that a 1024-row
// chunk merges in 128 blocks rather than 32. The block is 1024 threads: its
// rows × slices of the tiles. merge_blocks is the launch's grid, and so the
// CallEnd slots the launch writes.
inline constexpr int kMergeThreads = 1024;
inline constexpr int merge_block_rows(int64_t rows) { return rows >= 4096 ? 32 : 8; }
inline constexpr int64_t merge_blocks(int64_t rows) {
  return (rows + merge_block_rows(rows) - 1) / merge_block_rows(rows);
}
// The most (padded) rows a chunk may have: the merge keeps its rows and the
// stride between a thread's tiles (rows × slices) in 32 bits.
inline constexpr int64_t kMergeMaxRows = INT32_MAX / (kMergeThreads / 8);

// The call's end in its merges, in place of count_targets and reduce_loss (two
// one-block launches, 13 µs of GPT-2's 0.9 ms forward on the H100, ncu): every
// merge block writes its rows' loss sum, valid-target count and first bad target
// to slot slot0 + its index (slot0: the earlier chunks' merge blocks), and with
// `last` (the call's last chunk) the last block of the launch to finish reduces
// all `blocks` slots in a fixed order into n_valid, bad (−1: none) and loss
// (reduced as reduce_loss does). `done` is zero between calls and left zero
// (Context::ce_counters).
struct CallEnd {
  float* block_loss = nullptr;        // [blocks]
  long long* block_count = nullptr;   // [blocks]
  long long* block_bad = nullptr;     // [blocks]: a row index, or INT64_MAX
  int64_t slot0 = 0;
  int64_t blocks = 0;                 // the call's merge blocks, all chunks
  bool last = false;
  unsigned* done = nullptr;
  int64_t* n_valid = nullptr;
  int64_t* bad = nullptr;
  float* loss = nullptr;
};

// lse[r0 + i] and token_loss[r0 + i] from partials [tiles][rows_pad] (+ Σẑ partials
// when label smoothing is on, else null) and z_target (the logits GEMM's, indexed
// like lse). refs (the chunk's rows, or null): the references the GEMM stored q
// against (LogitsArgs::row_ref), copied to row_ref, where a row any of whose
// partials holds another reference gets NaN instead, for scaled_dz_rows to
// rescale (ce.hpp). refs may be lse + r0 (flce.cu keeps the call's references
// there until the merge): every read of a row's reference comes before its LSE
// is written. `end`: the call's loss and target count (CallEnd).
void merge_stats(const LsePair* lse_partials, const float* sumz_partials, int64_t rows_pad, int64_t tiles, int64_t r0,
                 int64_t rows, const StatsParams& p, const float* z_target, float* lse, float* token_loss,
                 const float* refs, float* row_ref, const CallEnd& end, cudaStream_t st);

// row_ref[i] = kSm90RefLift + max over j < samples of (z[i, j] + b[j·stride]),
// from z = the logits of X's rows against W's rows 0, stride, 2·stride, …
// ([rows, samples] in dtype t, 16-bit, rows ld elements apart), and the bias
// (null: none) in the same dtype: the reference the logits GEMM stores q against
// without a softcap (variants.hpp). fmaxf drops NaN: a row of NaN gets −inf,
// which the epilogue never takes.
void sample_ref(DType t, const void* z, int samples, int64_t ld, int64_t stride, const void* bias, int64_t rows,
                float* row_ref, cudaStream_t st);

}  // namespace celtune::cuda::sm90
