// The flce family's search space: the vocabulary chunk (from small chunks up to
// the whole vocabulary), the row chunk, the CE kernel's tile and threads, the
// gradient accumulation dtype, the fused row-on-chip variant of the one pass, and
// the implementation (cuBLASLt + CE kernels, or the fused sm_90 CUTLASS GEMMs).
// Constraints beyond the backend's own: block_size ≤ v_chunk (validate_config),
// chunks that change nothing are dropped (enumerate() deduplicates), and the
// accumulation choice only where there is something to accumulate.
#include <algorithm>
#include <iterator>

#include "kernels/flce/sm90/variants.hpp"
#include "kernels/space.hpp"

namespace celtune {

namespace {
// The logits GEMM of the fused defaults: the ping-pong row where H ≥ 2048, whose
// epilogue runs under the other warp group's mainloop, ahead of the cooperative
// row 0 by 1–10% forward and 3–7% forward+backward at every preset on the H100
// (variants.hpp). At GPT-2's H = 768 row 0 once stayed ahead (forward 1.11×
// one GEMM against 1.19×, forward+backward 1.68× the floor against 1.77×);
// with today's kernels the forward runs the other way round, N = 8192, × one
// GEMM at V padded to 50304 (thirty-sixth session): H100 1.030 against 1.091×,
// H200 1.005 against 1.091× (0.886 against 0.954 ms). So forward takes row 1
// from H = 768 (kSm90PingpongMinHiddenForward), forward+backward from 2048.
int default_logits_variant(const Problem& p) {
  const long long min_hidden = p.mode == Mode::forward ? kSm90PingpongMinHiddenForward : kSm90PingpongMinHidden;
  return p.hidden >= min_hidden ? kSm90PingpongLogitsVariant : 0;
}
void set_logits_variant(KernelConfig& f, int v) {
  f.logits_kernel = v ? kSm90LogitsVariantNames[v] : "";  // row 0 is the unnamed default
}

// Row indices 0…n−1 of a variant table, or just the default row when unused.
std::vector<int64_t> rows(size_t n, bool used) {
  std::vector<int64_t> out{0};
  for (size_t i = 1; used && i < n; ++i) out.push_back(static_cast<int64_t>(i));
  return out;
}
// dW's choices: the CUTLASS rows, then cuBLASLt; only the default row when unused.
std::vector<int64_t> dw_rows(bool used) {
  std::vector<int64_t> out = rows(std::size(kSm90DwVariantNames), used);
  if (used) out.push_back(static_cast<int64_t>(std::size(kSm90DwVariantNames)));
  return out;
}

// dX's choices: cuBLASLt (0), then the CUTLASS rows (1…); only cuBLASLt when unused.
std::vector<int64_t> dx_rows(bool used) {
  std::vector<int64_t> out{0};
  for (size_t i = 0; used && i < std::size(kSm90DxVariantNames); ++i) out.push_back(static_cast<int64_t>(i) + 1);
  return out;
}

// The fused forward+backward seed: the default's chunks and accumulators, its row
// chunk down to whole clusters of the logits GEMM (variants.hpp) so no padding
// rows are computed, and further while the fused path's scratch (the tile; the
// statistics partials, 8 bytes a row and BLOCK_N columns, 4 more with label
// smoothing; the target logits, 4 bytes a token; the GEMM workspace) would not fit
// the default's budget (kDefaultScratchBudget). At Qwen2.5-7B's 768 rows within
// 256 MiB they took the seed to 259 MiB, past tune's 256, and it was never measured.
//
// The workspace goes where that fits fewer row chunks and the dX GEMM of a chunk
// is at least as large as where none was measured as fast as 32 MiB (768 rows at
// Qwen2.5-7B's H = 3584 with the ping-pong dW: 23.25 ms against 24.96 for 512
// rows beside the workspace, H100, N = 4096; 1 MiB before, too small for a
// split-K's partial sums there; CUTLASS's persistent scheduler needs none):
// every chunk costs dW's read-modify-write and GEMM ramps (Llama-3-8B on the
// H100: 4 chunks of 1024 rows 20.5–20.9 ms against 6 of 768 rows 21.9–22.1).
// Skinnier dX GEMMs need cuBLASLt's split-K, which needs the workspace
// (Gemma-2-2B, 512 rows, H = 2304: 37.0 ms without, 29.6 with; with the
// ping-pong dW 34.5 without). 1024 rows at H = 2304 are wide enough: within
// 512 MiB they run 1.027x / 0.998x the floor with none at Gemma-2-2B N = 8192
// / 4096, where 768 rows beside the workspace (what fits it) ran 1.118x /
// 1.122x and 1024 rows beside 1 MiB 1.054x / 1.011x (H200, one process,
// fifty-ninth session).
KernelConfig fused_seed(const Problem& p, KernelConfig f, int v = 0, size_t budget = kDefaultScratchBudget) {
  f.impl = KernelConfig::Impl::fused;
  set_logits_variant(f, v);
  const int64_t cluster_rows = kSm90LogitsClusterRows[v];
  const int64_t rc0 = f.row_chunk_for(p);
  if (rc0 < cluster_rows) return f;
  const int64_t tile_row = (f.v_chunk_for(p) + 127) / 128 * 128 * dtype_bytes(p.dtype);  // flce.cu's layout
  int64_t part_row = sm90_partial_tiles(v, p.vocab) * sm90_partial_bytes(p.loss.label_smoothing > 0);
  // Without a dZ pass two chunks' row factors beside them (flce.cu's Layout: a
  // chunk's dX takes its factors in the next chunk's launch; the scaled X goes to
  // dX's rows).
  if (sm90_scaled_dz(p, f)) part_row += 8;
  // The budget the default keeps to (its tile budget, the cuBLASLt path's row
  // state, and the full workspace), less the target logits and 8 KiB for pieces
  // starting on 256-byte boundaries.
  const int64_t total =
      flce_tile_budget(p, budget) + 16 * p.tokens + 4096 + (int64_t{KernelConfig::kDefaultWorkspaceMib} << 20);
  auto room = [&](int64_t ws_mib) { return total - (ws_mib << 20) - 4 * p.tokens - 8192; };
  auto chunks = [&](int64_t rows) { return (p.tokens + rows - 1) / rows; };
  // And the merges' slots for the call's end (sm90::CallEnd: a float and two
  // 64-bit counts a merge block of 8 or more rows, so at most rows/8 + 1 blocks
  // a chunk): 160 KiB at N = 65536, which took seeds there past the budget.
  auto end_slots = [&](int64_t rows) { return 20 * (p.tokens / 8 + chunks(rows)); };
  // Without a dZ pass the tile also holds target_rows_add's scratch after the
  // last chunk (flce.cu's Layout takes the larger).
  const int64_t target_scratch =
      sm90_scaled_dz(p, f) ? static_cast<int64_t>(Sm90TargetScratch(p.tokens, p.hidden).total) : 0;
  auto fits = [&](int64_t rows, int64_t ws_mib, int64_t more = 0) {
    return std::max(rows * tile_row, target_scratch) + rows * part_row + end_slots(rows) + more <= room(ws_mib);
  };
  auto fit = [&](int64_t start, int64_t ws_mib) {
    int64_t rc = start / cluster_rows * cluster_rows;
    while (rc > cluster_rows && !fits(rc, ws_mib)) rc -= cluster_rows;
    return rc;
  };
  constexpr int64_t kLeanWorkspaceMib = 0;
  int64_t rc = fit(rc0, KernelConfig::kDefaultWorkspaceMib);
  // Without the workspace: where not even a cluster of rows fits (a vocabulary
  // of millions, or a small CELTUNE_MAX_SCRATCH) there is no lean choice; fit
  // then gave 0 rows, and chunks(0) divided by zero (SIGFPE in lookup, tune and
  // the C API at N = 256, H = 4096, V = 3550273: a helper's probe, sixty-second
  // session).
  const int64_t lean_start = room(kLeanWorkspaceMib) / (tile_row + part_row);
  const int64_t lean_rc = lean_start >= cluster_rows ? fit(lean_start, kLeanWorkspaceMib) : 0;
  if (lean_rc > 0 && chunks(lean_rc) < chunks(rc) && lean_rc * p.hidden >= int64_t{1024} * 2304) {
    rc = lean_rc;
    f.workspace_mib = kLeanWorkspaceMib;
  }
  f.row_chunk = rc >= p.tokens ? 0 : rc;
  // Rows split where the default's were not: dW accumulates, in fp32 only where
  // that accumulator fits beside the tile (default_config's rule). One chunk
  // where the default had several: nothing accumulates (fp32, the grid's point).
  if (rc0 >= p.tokens && f.row_chunk != 0)
    f.dw_acc_fp32 = f.dx_acc_fp32 = fits(rc, f.workspace_mib, p.vocab * p.hidden * 4);
  if (rc0 < p.tokens && f.row_chunk == 0 && f.one_pass(p)) f.dw_acc_fp32 = f.dx_acc_fp32 = true;
  return f;
}

// Where the CUTLASS dX GEMM can run: it writes one output over all of V
// (validate_config), so only the one pass, and its stream-K partials take the
// GEMM workspace (without it, it would run data-parallel: the cuBLASLt GEMM's
// tiling without its split-K).
bool cutlass_dx_fits(const Problem& p, const KernelConfig& c) { return c.one_pass(p) && c.workspace_mib > 0; }
}  // namespace

KernelConfig flce_fused_forward(const Problem& p) {
  // Forward's statistics GEMM stores no tile, so its row chunk is bound by L2
  // instead: the CTAs that run together walk down M sharing one W tile, and
  // re-read X from DRAM for every W tile once X outgrows L2 (Llama-3-8B forward
  // on the H100: 1.02× one GEMM at 4096 rows in one chunk, 1.16× at 16384).
  // 32 MiB of 16-bit X, in whole clusters of the logits GEMM, and at most 32 MiB
  // of its statistics partials (one a row and BLOCK_N columns: Gemma-2-2B's
  // 256000 columns would take 7168 rows to 76 MiB), so that the forward's
  // scratch stays within issue 14's 64 MiB.
  constexpr int64_t kFwdChunkElems = int64_t{16} << 20, kFwdPartialBytes = int64_t{32} << 20;
  const int v = default_logits_variant(p);
  const int64_t cluster_rows = kSm90LogitsClusterRows[v];
  const int64_t part_row =
      sm90_partial_tiles(v, std::max<int64_t>(p.vocab, 1)) * sm90_partial_bytes(p.loss.label_smoothing > 0);
  const int64_t rows = std::min(kFwdChunkElems / std::max<int64_t>(p.hidden, 1), kFwdPartialBytes / part_row);
  KernelConfig f;
  f.impl = KernelConfig::Impl::fused;
  set_logits_variant(f, v);
  f.block_size = 2048, f.threads = 256, f.v_chunk = 0;
  f.row_chunk = std::max(cluster_rows, rows / cluster_rows * cluster_rows);
  if (f.row_chunk >= p.tokens) f.row_chunk = 0;
  return f;
}

// The default as a grid point: one accumulator switch for dW and dX, both fp32
// where nothing accumulates (the grid's constraint).
KernelConfig grid_default(const Problem& p, size_t budget = kDefaultScratchBudget) {
  KernelConfig c = default_config(p, budget);
  const bool accumulates = p.mode == Mode::forward_backward && p.dtype != DType::fp32 &&
                           (c.row_chunk_for(p) < p.tokens || !c.one_pass(p));
  c.dx_acc_fp32 = c.dw_acc_fp32 = accumulates ? c.dw_acc_fp32 : true;
  return c;
}

KernelConfig flce_fused_forward_backward(const Problem& p, size_t budget) {
  KernelConfig f = fused_seed(p, grid_default(p, budget), default_logits_variant(p), budget);
  f.dw_kernel = kSm90DwVariantNames[kSm90PingpongDwVariant];
  // dX on the stream-K CUTLASS row where its tiles fill their last wave badly
  // (variants.hpp); its partial sums take the workspace.
  if (cutlass_dx_fits(p, f) && sm90_dx_stream_k(f.row_chunk_for(p), p.hidden))
    f.dx_kernel = kSm90DxVariantNames[0];
  return f;
}

SearchSpace flce_space(const Problem& p) {
  SearchSpace s;
  const bool bwd = p.mode == Mode::forward_backward;
  // The built-in default's chunks join the grid, so the default and its fused
  // counterparts (the seeds below) are grid points for every problem.
  const KernelConfig def = default_config(p);
  auto with = [](std::vector<int64_t> values, int64_t v) {
    if (std::find(values.begin(), values.end(), v) == values.end()) values.insert(values.end() - 1, v);
    return values;
  };
  const int64_t fused_rc = fused_seed(p, def).row_chunk;
  const int64_t fused_bwd_rc = fused_seed(p, def, default_logits_variant(p)).row_chunk;
  const int64_t fwd_rc = flce_fused_forward(p).row_chunk;
  s.params = {
      {"v_chunk", with({8192, 32768, 0}, def.v_chunk), [](KernelConfig& c, int64_t v) { c.v_chunk = v; }},
      // 768 and 896 rows are what one pass over a 128k vocabulary fits in 256 MiB
      // (a --max-scratch users pass); the default's own rows join through def.
      {"row_chunk",
       with(with(with(with({256, 512, 768, 896, 1024, 2048, 4096, 0}, def.row_chunk), fused_rc), fused_bwd_rc), fwd_rc),
       [](KernelConfig& c, int64_t v) { c.row_chunk = v; }},
      // The CE kernel is a few percent of flce's time: two tile widths span it.
      {"block_size", {2048, 8192}, [](KernelConfig& c, int64_t v) { c.block_size = int(v); }},
      {"threads", {256, 512}, [](KernelConfig& c, int64_t v) { c.threads = int(v); }},
      // One switch for both accumulators: fp32 scratch, or the output dtype.
      {"acc_fp32", bwd && p.dtype != DType::fp32 ? std::vector<int64_t>{1, 0} : std::vector<int64_t>{1},
       [](KernelConfig& c, int64_t v) { c.dw_acc_fp32 = c.dx_acc_fp32 = v != 0; }},
      // The GEMM workspace (config.hpp): the full 32 MiB, or none for one more row
      // cluster within the budget where the GEMMs need no split-K (fused_seed).
      {"workspace_mib", bwd ? std::vector<int64_t>{KernelConfig::kDefaultWorkspaceMib, 0}
                            : std::vector<int64_t>{KernelConfig::kDefaultWorkspaceMib},
       [](KernelConfig& c, int64_t v) { c.workspace_mib = static_cast<int>(v); }},
      {"fused", bwd ? std::vector<int64_t>{0, 1} : std::vector<int64_t>{0},
       [](KernelConfig& c, int64_t v) { c.fused = v != 0; }},
      // cuBLASLt GEMMs + CE kernels, or the fused sm_90 CUTLASS path (16-bit inputs;
      // the backend's check refuses it where the device or build cannot run it).
      {"impl", p.dtype != DType::fp32 ? std::vector<int64_t>{0, 1} : std::vector<int64_t>{0},
       [](KernelConfig& c, int64_t v) { c.impl = v ? KernelConfig::Impl::fused : KernelConfig::Impl::cublaslt; }},
      // impl fused: the CUTLASS variant of each GEMM role (sm90/variants.hpp); row
      // 0 is the unnamed default, so configs that keep it stay short.
      {"logits_kernel", rows(std::size(kSm90LogitsVariantNames), p.dtype != DType::fp32),
       [](KernelConfig& c, int64_t v) { c.logits_kernel = v ? kSm90LogitsVariantNames[v] : ""; }},
      // The value one past the table: dW on cuBLASLt (kDwOnCublaslt).
      {"dw_kernel", dw_rows(bwd && p.dtype != DType::fp32), [](KernelConfig& c, int64_t v) {
         constexpr auto n = static_cast<int64_t>(std::size(kSm90DwVariantNames));
         c.dw_kernel = v == n ? kDwOnCublaslt : v ? kSm90DwVariantNames[v] : "";
       }},
      // dX on cuBLASLt (0), or the CUTLASS row v − 1 (the one pass).
      {"dx_kernel", dx_rows(bwd && p.dtype != DType::fp32),
       [](KernelConfig& c, int64_t v) { c.dx_kernel = v ? kSm90DxVariantNames[v - 1] : ""; }},
  };
  // Seeds: the default as a grid point (one accumulator switch for dW and dX),
  // and its fused counterparts: in forward the statistics-only GEMM in row chunks
  // of 32 MiB of X (flce_fused_forward: 1.01× one GEMM against the cuBLASLt
  // default's 1.12× for Llama-3-8B on the H100), in forward+backward the
  // default's chunks within the same scratch (fused_seed): the cooperative
  // logits GEMM with dW on CUTLASS row 0, the fused default
  // (flce_fused_forward_backward: the ping-pong rows of both GEMMs), that with
  // dX on the other GEMM, and the default with dW on cuBLASLt. Where the
  // backend cannot run one it is not in the grid, and guided search skips it.
  const KernelConfig grid_def = grid_default(p);
  s.seeds.push_back(grid_def);
  if (p.dtype != DType::fp32) {
    if (!bwd) {
      s.seeds.push_back(flce_fused_forward(p));
    } else {
      s.seeds.push_back(fused_seed(p, grid_def));
      KernelConfig f = flce_fused_forward_backward(p);
      s.seeds.push_back(f);
      // And with dX on the other GEMM (cuBLASLt, or the stream-K row where the
      // constraint lets it run), then with dW on cuBLASLt.
      KernelConfig other_dx = f;
      other_dx.dx_kernel = f.dx_kernel.empty() ? kSm90DxVariantNames[0] : "";
      if (cutlass_dx_fits(p, other_dx)) s.seeds.push_back(other_dx);
      f.dw_kernel = kDwOnCublaslt;
      s.seeds.push_back(f);
    }
  }
  s.constraint = [](const Problem& pr, const KernelConfig& c, std::string* why) {
    const int e = c.block_size / c.threads;
    if (c.block_size % c.threads || e < 1 || e > 32) {
      if (why) *why = "block_size / threads outside the compiled table";
      return false;
    }
    if (c.impl != KernelConfig::Impl::fused &&
        (!c.logits_kernel.empty() || !c.dw_kernel.empty() || !c.dx_kernel.empty())) {
      if (why) *why = "CUTLASS variants belong to impl fused";
      return false;
    }
    if (c.impl == KernelConfig::Impl::fused) {
      // The statistics come from the GEMM's epilogue: the fold kernel's row cache
      // has nothing to do, and forward has no tile, so v_chunk and the CE tile
      // change nothing there (one point stands for them all).
      if (c.fused) {
        if (why) *why = "impl fused runs no fold kernel to cache rows for";
        return false;
      }
      if (pr.mode == Mode::forward && (c.v_chunk != 0 || c.block_size != 2048 || c.threads != 256)) {
        if (why) *why = "impl fused forward has no tile: v_chunk and the CE tile change nothing";
        return false;
      }
    }
    if (!c.dx_kernel.empty() && !cutlass_dx_fits(pr, c)) {
      if (why) *why = "the CUTLASS dX GEMM needs the one pass and the GEMM workspace";
      return false;
    }
    // The fused cache only acts in the one pass, where the tile holds whole rows.
    if (c.fused && !c.one_pass(pr)) {
      if (why) *why = "fused needs v_chunk = V";
      return false;
    }
    // Accumulation in the output dtype only matters with several chunks.
    const bool several = c.row_chunk_for(pr) < pr.tokens || !c.one_pass(pr);
    if (!c.dw_acc_fp32 && !several) {
      if (why) *why = "nothing to accumulate";
      return false;
    }
    return true;
  };
  return s;
}

}  // namespace celtune
