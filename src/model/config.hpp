// KernelConfig: the tunables of both kernel families in one plain struct.
//
// The tuner searches it, the database stores it as JSON, the runtime resolves it
// and the kernels receive it. Fields that a family does not use are ignored by it
// (and left at their defaults by its search space), so one struct serves both and
// one JSON form round-trips through every layer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "problem.hpp"

namespace celtune {

// The most blocks a fused ce row may be split among: the portable
// thread-block cluster size.
inline constexpr int kCeMaxClusterBlocks = 8;
// A fused ce call of at most this many rows runs in one launch: every block
// counts all the targets itself, which costs nothing next to a launch at a few
// hundred rows, and the last row to finish reduces the loss.
inline constexpr int64_t kCeOneLaunchTokens = 512;

struct KernelConfig {
  // Elements of one online-softmax tile: the CE kernel folds block_size logits of a
  // row at a time into the running (max, sum-exp) pair. Power of two.
  int block_size = 1024;
  // Vocabulary columns per chunk. ≥ V means one pass (gradient from the same
  // logits tile); < V means two passes (the tile is recomputed once the LSE is
  // final). For the ce family, the vocabulary span one thread block folds before
  // partials are merged.
  int64_t v_chunk = 0;
  // Rows per chunk (flce): the logits tile is [row_chunk, v_chunk].
  int64_t row_chunk = 0;
  // Threads per block of the CE kernel. Power of two, 32…1024.
  int threads = 256;
  // Rows handled by one thread block of the CE kernel (ce family).
  int rows_per_block = 1;
  // flce backward: accumulate dW across row chunks (dw) and dX across vocabulary
  // chunks (dx) in fp32 scratch (true) or directly in the output dtype (false).
  // Irrelevant when there is only one chunk to accumulate, or for fp32 inputs.
  bool dw_acc_fp32 = true;
  bool dx_acc_fp32 = true;
  // Forward+backward in one kernel that reads each row from device memory once:
  // the row is held in shared memory between the forward and gradient sweeps (as
  // much of it as fits; the rest is read again). ce family, and flce's one pass.
  // The ce family's fused path loads rows into shared memory with bulk copies
  // (sm_90); with v_chunk < V the row's segments are held by a thread-block
  // cluster of ceil(V / v_chunk) ≤ kCeMaxClusterBlocks blocks. In forward too,
  // where a call of kCeOneLaunchTokens rows or fewer runs in one launch.
  bool fused = false;
  // flce: which GEMMs run it. cublaslt: cuBLASLt GEMMs and the CE kernels on the
  // tile (any architecture, any dtype). fused: Hopper (sm_90) CUTLASS kernels whose
  // epilogue computes the softmax statistics, so forward writes no logits and the
  // backward reads the tile once; dW accumulates in place in a persistent CUTLASS GEMM.
  // bf16/fp16 only; unavailable without CUTLASS in the build (check() says why).
  enum class Impl { cublaslt, fused };
  Impl impl = Impl::cublaslt;
  // fused: the CUTLASS variant of each role by name (tile, cluster, schedule;
  // kernels/flce/sm90/variants.hpp); empty means the table's first row, except
  // for dX, whose GEMM runs on cuBLASLt unless dx_kernel names a row (the one
  // pass only: v_chunk covering V).
  std::string logits_kernel;
  std::string dw_kernel;
  std::string dx_kernel;
  // flce: the GEMMs' workspace in MiB (cuBLASLt's split-K partials, CUTLASS's
  // scheduler), part of the scratch. 32 lets cuBLASLt split skinny GEMMs (a dX
  // of a few hundred rows at H = 2304: 29.6 ms a step against 37.0 with none,
  // Gemma-2-2B on the H100); 1 frees room for one more tile row-cluster where
  // the GEMMs fill the GPU unsplit (Llama-3-8B: 1024-row chunks in 256 MiB of
  // scratch, as fast as with 32; with 0 about 1% slower).
  int workspace_mib = kDefaultWorkspaceMib;
  static constexpr int kDefaultWorkspaceMib = 32;
  // Tuned cuBLASLt algorithms, one per GEMM role (logits, dX, dW), serialised;
  // empty means the heuristic's first choice. Valid only with the cuBLASLt version
  // recorded beside them.
  std::vector<std::string> gemm_algos;
  int64_t gemm_algos_cublaslt = 0;

  bool operator==(const KernelConfig&) const = default;

  // Chunk sizes clamped to the problem (a v_chunk of 0 or ≥ V means "all of V").
  int64_t v_chunk_for(const Problem& p) const;
  int64_t row_chunk_for(const Problem& p) const;
  // The rows of each chunk, in order. As many chunks as row_chunk_for(p) asks
  // for, but as even as whole units of `unit` rows allow (a GEMM's row tile or
  // cluster), so no chunk is a thin tail: dW's in-place accumulation re-reads and
  // re-writes all of dW for every chunk, and a 256-row tail after five of 768 cost
  // as much as a full chunk (ncu, H100, Llama-3-8B N = 4096). Plain chunks of
  // row_chunk_for(p) where even units would not fit in it.
  std::vector<int64_t> row_chunk_rows(const Problem& p, int64_t unit) const;
  bool one_pass(const Problem& p) const { return v_chunk_for(p) >= p.vocab; }
};

// Throws Error(usage) naming the first constraint a config breaks for a problem.
// These are the constraints every backend shares; a backend's own limits (the
// compiled block-size table, shared memory) are checked by the backend.
void validate_config(const Problem& p, const KernelConfig& c);

// The ce family's segment when a row of `vocab` columns is split among `splits`
// blocks: rounded up to 256 columns, so segment starts stay aligned for wide
// loads (V % 8 == 0).
inline int64_t ce_segment(int64_t vocab, int64_t splits) { return ((vocab + splits - 1) / splits + 255) / 256 * 256; }

// The scratch the built-in defaults keep to, and tune's --max-scratch default.
// 512 MiB: within 256 MiB the dW GEMM reads and writes all of dW once a row
// chunk, and Gemma-2-2B's 256000 columns left 384-row chunks (21 at N = 8192)
// at 1.37x the floor, 17% behind torch.compile; tuned within 512 MiB it ran
// 1.02x the floor, 8-13% ahead (H200, docs/results.md, fifty-sixth session).
// torch.compile of the plain code holds 1-5 GiB at the same shapes.
inline constexpr size_t kDefaultScratchBudget = size_t{512} << 20;
// The least budget a default is built for: the GEMM workspace, the row state and
// a tile of a few hundred rows of a 128k vocabulary (CELTUNE_MAX_SCRATCH below it
// is refused).
inline constexpr size_t kMinScratchBudget = size_t{64} << 20;

// The built-in default: a sensible config for any problem, not the smallest.
// One pass when the full-vocabulary tile of a reasonable row chunk fits in
// `budget` of scratch; otherwise vocabulary chunks that keep the GEMMs large.
// A smaller budget (CELTUNE_MAX_SCRATCH) gives smaller chunks by the same rule.
KernelConfig default_config(const Problem& p, size_t budget = kDefaultScratchBudget);

// The bytes of scratch flce's default gives its tile (and what the tile must
// share: accumulators, the fused path's partials): the budget less the default
// GEMM workspace and the row state, so the whole stays within the budget.
int64_t flce_tile_budget(const Problem& p, size_t budget = kDefaultScratchBudget);

// CELTUNE_MAX_SCRATCH when set (the runtime's default and tune's --max-scratch
// default follow it), else nullopt. Throws Error(usage) for a malformed value
// or one below kMinScratchBudget: a budget the user set and silently lost would
// hand them the default's where they had room for less.
std::optional<size_t> env_max_scratch();
// The budget the built-in defaults keep to here: CELTUNE_MAX_SCRATCH, else
// kDefaultScratchBudget. Read it once, before work it would waste if refused.
inline size_t defaults_scratch_budget() { return env_max_scratch().value_or(kDefaultScratchBudget); }

// "needs 256.0 MiB of scratch, 4.0 KiB over CELTUNE_MAX_SCRATCH's 256.0 MiB"
// (need > budget): the excess said apart, since sizes rounded to a tenth of a
// MiB read as equal (a helper's probe saw "needs 128 MiB …, over … 128 MiB").
std::string scratch_over_budget(size_t need, size_t budget);

// A byte count as users write one: 1048576, 256MiB (or 256M), 1GiB (or 1G),
// 64KiB (or 64K), 100B. Throws Error(usage) naming `what` for anything else.
size_t parse_bytes(const std::string& s, const std::string& what);

std::string to_string(const KernelConfig& c);  // compact one-line form
std::ostream& operator<<(std::ostream&, const KernelConfig&);
void to_json(nlohmann::json&, const KernelConfig&);
void from_json(const nlohmann::json&, KernelConfig&);

// Parses a config from JSON text (the --config flag, CELTUNE_CONFIG). Unknown keys
// are an error: a misspelt key must not silently fall back to a default.
KernelConfig parse_config_json(const std::string& text);

}  // namespace celtune
