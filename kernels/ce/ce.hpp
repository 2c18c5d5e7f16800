// The CE kernels' host interface (no CUDA types beyond cudaStream_t): the flce
// schedule and the ce family both drive them. See ce.cu for what they compute.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "model/config.hpp"
#include "model/types.hpp"

namespace celtune::cuda {

// Per-row running state of the online softmax, [N] each, in device memory.
struct RowState {
  float* m;         // running max of ẑ
  float* d;         // Σ exp(ẑ − m)
  float* z_target;  // ẑ at the target (set by the chunk holding it)
  float* z_sum;     // Σ ẑ (label smoothing)
  float* lse_lo;    // the final LSE's low part (ce.cu's Lse), for ce_grad after the last chunk; may be null
};

// One view of logits: rows [r0, r0+rows) × columns [v0, v0+cols) of the problem,
// stored at `tile` with leading dimension `ld` (elements).
// dZ goes to `out` (leading dimension ld_out), which is `tile` itself for the
// in-place paths.
struct TileView {
  void* tile;
  int64_t ld;
  int64_t r0, rows;
  int64_t v0, cols;
  void* out;
  int64_t ld_out;
};

struct LossParams {
  DType dtype;
  int64_t vocab;
  const void* targets;
  bool targets_i64;
  int64_t ignore_index;
  Reduction reduction;
  float softcap, label_smoothing, z_loss;
  const float* grad_scale;   // device scalar g (mean/sum)
  const float* grad_tokens;  // device vector g_i (none)
  const int64_t* n_valid;    // device scalar
  // flce bias b [V] in the input dtype, added in fp32 to the GEMM's rounded
  // product as the tile is read (null: none). Adding it here rather than in the
  // GEMM's epilogue rounds each logit once, not twice.
  const void* bias;
};

struct CeLaunch {
  int block_size;  // elements per tile, = threads × elements per thread
  int threads;
  // Fused forward+backward (fold with grad): keep up to this many leading
  // elements of the row in shared memory between the two sweeps, so they are read
  // from device memory once. 0: re-read the row.
  int64_t cache_elems = 0;
};

// The most row elements of dtype t a fused launch can keep on chip.
int64_t max_cache_elems(DType t);

// Which CE kernels a run launches, so only those are checked.
struct CeKernels {
  bool fold = true;      // ce_fold: flce's chunks
  bool grad = false;     // ce_grad
  bool part = false;     // ce_split_stats: the ce family's statistics
  bool cluster = false;  // ce_cluster
  bool spread = false;   // ce_spread
};

// Why (block_size, threads) cannot launch for dtype t, or "" when it can: it must be
// in the compiled table, and the registers of every kernel in `used` must allow
// that many threads.
std::string ce_launch_unsupported(const CeLaunch& l, DType t, CeKernels used);

// Why ce_cluster cannot run `splits` blocks of `seg` columns each on the current
// device, or "" when it can (sm_90, the cluster size, and whether a cluster with
// that much shared memory fits on the GPU at all).
std::string ce_cluster_unsupported(const CeLaunch& l, DType t, int64_t seg, int splits);

// Folds a tile into the row state. first: the state starts empty. last: the rows'
// LSE is final after this tile, so write lse and token_loss. grad (needs last and
// a tile holding the whole row): overwrite the tile with dZ in the same kernel.
void ce_fold(const TileView& v, const LossParams& p, const RowState& s, bool first, bool last, bool grad,
             float* lse, float* token_loss, const CeLaunch& l, cudaStream_t st);

// Overwrites the view with dZ given the final LSE: lse, and lse_lo where the
// kernels that wrote it kept its low part (ce.cu's Lse; null: 0, L as rounded to
// fp32). seg > 0 splits each row into segments of seg columns, one block each
// (the ce family's split rows).
void ce_grad(const TileView& v, const LossParams& p, const float* lse, const float* lse_lo, const CeLaunch& l,
             cudaStream_t st, int64_t seg = 0);

// A ce call that ends in its own kernels (ce_cluster, ce_spread and
// ce_split_stats): besides its rows, the last block counts the targets into
// n_valid and bad (as count_targets) and reduces the loss (as reduce_loss).
// `done` is a counter that is zero between calls (Context::ce_counters); the
// kernel leaves it zero. `rows`: one counter per row, kCeOneLaunchTokens of
// them, zero between calls likewise (the exchange of a row's split blocks).
struct OneLaunch {
  bool on = false;
  int64_t tokens = 0;
  int64_t* n_valid = nullptr;
  int64_t* bad = nullptr;
  float* loss = nullptr;
  unsigned* done = nullptr;
  unsigned* rows = nullptr;
};

// The ce family's statistics: rows split into segments of seg columns (seg ≥
// cols: whole rows), one block each, so that a few rows still fill the GPU.
// Writes lse (and, where not null, lse_lo for ce_grad) and token_loss; split
// rows merge their partials (`parts`,
// [rows][splits] × 4 floats) in a fixed order (deterministic). The call ends
// here too: `one` (on, with its counters) gets the target count, the first bad
// target and the loss, as count_targets and reduce_loss would give them, in the
// same launch up to kCeOneLaunchTokens rows, else in one or two more.
void ce_split_stats(const TileView& v, const LossParams& p, int64_t seg, float* parts, float* lse, float* lse_lo,
                    float* token_loss, const CeLaunch& l, cudaStream_t st, const OneLaunch& one);

// Each row read from device memory once (fused; kCeOneLaunchTokens rows or fewer
// in one launch, model/config.hpp): a thread-block cluster of
// ceil(cols / seg) blocks (one when seg ≥ cols; ≤ kCeMaxClusterBlocks,
// model/config.hpp) shares each row, every block holding its segment in shared
// memory, and the partials are exchanged through distributed shared memory.
// Writes lse and token_loss, and with `grad` dZ (v.out); with one.on also the
// target count and the loss.
void ce_cluster(const TileView& v, const LossParams& p, int64_t seg, float* lse, float* token_loss, const CeLaunch& l,
                cudaStream_t st, bool grad, const OneLaunch& one);

// Why ce_spread cannot run `rows` rows of `splits` segments each on the current
// device, or "" when it can: with `grad` the whole grid must be resident at once
// (a cooperative launch). That a segment is one tile and the call one launch is
// validate_config's to check (model/config.cpp).
std::string ce_spread_unsupported(const CeLaunch& l, DType t, int64_t rows, int splits, bool grad);

// A ce call of a few rows in one launch, each row split among ceil(cols / seg)
// blocks (more than a cluster holds) that keep their segment in registers and
// exchange partials through `parts` ([rows][splits] × 4 floats) and the row
// counters of `one` (which must be on). Writes what ce_cluster writes.
void ce_spread(const TileView& v, const LossParams& p, int64_t seg, float* parts, float* lse, float* token_loss,
               const CeLaunch& l, cudaStream_t st, bool grad, const OneLaunch& one);

// Counts valid targets into *n_valid and records the first target outside
// [0, V) that is not ignore_index in *bad_index (−1 if none).
void count_targets(const LossParams& p, int64_t tokens, int64_t* n_valid, int64_t* bad_index, cudaStream_t st);

// loss = Σ token_loss (sum, none) or Σ token_loss / n_valid (mean, 0 when none valid);
// one block, fixed order: deterministic.
void reduce_loss(const float* token_loss, int64_t tokens, const LossParams& p, float* loss, cudaStream_t st);

// db[v0 + j] += Σ_r dZ[r, j] over the tile's rows, fp32; one thread per column.
// With row_scale, dZ[r, j] = row_scale[r]·tile[r, j] (scaled_dz_rows), 0 where
// the scale is 0; the targets' terms then come from target_rows_add.
void column_sums(const TileView& v, DType t, float* db_acc, cudaStream_t st, const float* row_scale = nullptr);

// flce's one-pass backward without a dZ pass (impl fused, where sm90_scaled_dz
// says; kernels/flce/sm90/variants.hpp). The view's tile holds q = exp(ẑ − m_i)·g,
// written by the logits GEMM: with a softcap s, m_i = s and g = 1 − (ẑ/s)²;
// without one (ref.pairs set), g = 1 and m_i = row_scale[i] as sample_ref and the
// merge left it, NaN where some tiles of the row hold q against their own max
// (the partial's m): such a row is first rescaled to m_i = L_i here. Per row i
// of the view (problem row r0 + i): row_scale[i] = a_i = c_i·(1 + 2λL_i)·
// exp(m_i − L_i), so that dZ = a_i·q off the target; the target's element is
// set to 0; and x_scaled[i] = a_i·x[i] in the input dtype (0 where a_i = 0), the
// B operand of dW = qᵀ·diag(a)·X. x and x_scaled are [rows, hidden], this
// chunk's rows. The target's element of dZ, t_i = c_i·(zl·p_y − 1)·g(ẑ_y) with
// p_y − 1 taken in fp32 from z_target (ẑ at the target, indexed like lse) as
// flce-math.md asks, stays out of the bf16 tile, where it would be rounded and
// then multiplied by the rounded a·X: it dominates dW's target rows and dX. It
// joins each in fp32 before their one rounding instead: dX in `after` below,
// dW and db in target_rows_add. The same launch finishes `after`, the previous
// chunk's dX, whose GEMM has run by then (a launch and a kernel boundary fewer
// a chunk): dX_k = a_k·(q·W)_k + t_k·W[y_k]. A view of no rows finishes the last
// chunk.
struct RefPartials {
  const float* pairs = nullptr;  // the GEMM's (m, d) partials, [tiles][rows_pad]; null: m_i = s
  int64_t rows_pad = 0;
  int block_n = 0;  // columns a partial covers
};
struct RowsToScale {  // m[k, :] = row_scale[k]·m[k, :] + t_k·w[y_k, :] for k < rows (none when rows = 0)
  void* m = nullptr;
  int64_t r0 = 0;  // the problem row of m's first row
  int64_t rows = 0, cols = 0;
  const float* row_scale = nullptr;
  const void* w = nullptr;  // [V, cols]
};
void scaled_dz_rows(const TileView& v, const LossParams& p, const float* lse, const float* z_target, const void* x,
                    int64_t hidden, void* x_scaled, float* row_scale, const RefPartials& ref, const RowsToScale& after,
                    cudaStream_t st);

// The scaled-dZ path's target terms in dW and db, after the call's last dW
// GEMM: dW[y] += Σ t_j·x_j and db_acc[y] += Σ t_j over the tokens j with target
// y, t_j as in scaled_dz_rows, summed in fp32 in token order and rounded once
// into dW (fp32 accumulator or the bf16 output): deterministic, whatever the
// targets (a stable sort by target, then the sums in fixed pieces). x is
// [tokens, hidden] (the problem's X); scratch is laid out as Sm90TargetScratch
// (kernels/flce/sm90/variants.hpp) says. target_rows_add_check, before the
// call's first launch: that CUB's sort fits the temporary storage laid out
// there (its query needs a device; the layout is computed without one).
void target_rows_add_check(int64_t tokens, int64_t vocab);
void target_rows_add(const LossParams& p, const float* lse, const float* z_target, const void* x, int64_t hidden,
                     int64_t tokens, void* scratch, void* dw, bool dw_fp32, float* db_acc, cudaStream_t st);

// out[i] = (dtype) in[i] for n elements.
void convert_from_f32(const float* in, void* out, DType t, int64_t n, cudaStream_t st);

// Fills n elements of dtype t (or fp32 when t is fp32) with NaN: the poison.
void fill_nan(void* p, int64_t bytes, cudaStream_t st);

}  // namespace celtune::cuda
