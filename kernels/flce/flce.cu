// flce: fused linear cross-entropy over cuBLASLt GEMMs and the CE kernels.
//
// What it computes: loss = CE(X·Wᵀ + b, y) and dX, dW, db (flce-math.md), never
// holding the [N,V] logits. Schedule (the CPU backend runs the same one):
//   for each row chunk R (at most row_chunk rows, as even as whole GEMM tiles allow):
//     pass 1, for each vocabulary chunk C (v_chunk columns):
//       tile[R,C] = X[R]·W[C]ᵀ + b[C]          GEMM 1, written in the input dtype
//       fold the tile into the rows' (max, sum-exp) state        ce_fold
//       one pass (C = V): the same kernel overwrites the tile with dZ; then
//         dX[R] = dZ·W                          GEMM 2
//         dW (+)= dZᵀ·X[R]                      GEMM 3
//         db += column sums of dZ
//     pass 2 (C < V), for each C: recompute the tile (GEMM 1), dZ from the final
//       LSE (ce_grad), then GEMMs 2 and 3, dX[R] accumulating across chunks.
// One pass costs three GEMMs of 2·N·H·V FLOPs; two passes cost four and need only
// a [row_chunk, v_chunk] tile of scratch.
//
// Accumulation: dX across vocabulary chunks and dW across row chunks go to fp32
// scratch (dx_acc_fp32 / dw_acc_fp32) or straight into the output dtype through
// cuBLASLt's beta = 1 (D = round(C + A·B)); validation decides if that is enough.
//
// Alignment: cuBLASLt needs 16-byte aligned rows, so H must be a multiple of 8
// (16-bit) or 4 (fp32), and a v_chunk below V a multiple of 8; the tile's leading
// dimension is v_chunk rounded up to 128. V itself may be anything, but a GEMM whose
// vocabulary width is not a multiple of 128 falls off cuBLASLt's fast kernels
// (GPT-2's 50257 ran at a third of the aligned speed on an H200): every cuBLASLt
// GEMM is split into the aligned columns and a ragged tail of < 128 columns
// (gemm_split), so the slow kernel only ever sees the tail.
//
// impl fused (sm_90, CUTLASS; sm90/fused.hpp): the logits GEMM's epilogue writes
// per-row, per-BLOCK_N partial (max, Σexp) and Σẑ; a merge kernel gives the LSE
// and loss. Forward: one statistics-only GEMM over all of V per row chunk, no
// tile at all. Forward+backward, one pass: the same GEMM also stores the tile,
// then dZ (ce_grad: one read, one write), dX on cuBLASLt (or CUTLASS's stream-K
// GEMM, as the config's dx_kernel says) and dW on CUTLASS's persistent GEMM, in
// place (or on cuBLASLt, as the config's dw_kernel says).
// In bf16 without label smoothing (sm90_scaled_dz) there is no dZ pass: the GEMM
// stores q = exp(ẑ − m_i)·g, dZ up to a row factor a_i (ce_epilogue.cuh), against
// the softcap (m_i = s) or, without one, a reference per row taken once before
// the first chunk from the logits of kSm90RefSamples columns spread over V (a
// small cuBLASLt GEMM into the tile, then sample_ref). A kernel a row
// (scaled_dz_rows) writes a_i, rescales the rare row whose tiles took their own
// max, clears the target's element and scales X by a_i into dX's rows, for
// dW = qᵀ·(a·X); dX's GEMM then overwrites them, and dX = a·(q·W) + t·W[y]
// takes its factor and its target term in the next chunk's scaled_dz_rows
// launch (one of its own after the last). The target's term t_i (dZ_iy, in
// fp32) reaches dW and db in one kernel after the last chunk (target_rows_add):
// kept out of the bf16 tile, it is rounded once, as PyTorch's bf16 dZ is.
// A chunk so runs five kernels: logits GEMM, merge, scaled_dz_rows, dW, dX. The
// dZ pass read and wrote 1 GB a 1024-row chunk at Gemma-2-2B, 0.5 GB (0.19 ms
// on the H100) at Llama-3-8B. Two passes: the
// statistics-only GEMM over all of V gives the final LSE first, so pass 1 stores
// nothing; pass 2 as above.
#include "flce.hpp"

#include <algorithm>

#include "kernels/ce/ce.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/flce/sm90/fused.hpp"
#include "kernels/flce/sm90/stats.hpp"
#include "kernels/flce/sm90/variants.hpp"
#include "model/error.hpp"

namespace celtune::cuda {
namespace {

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::bf16: return CUDA_R_16BF;
    case DType::fp16: return CUDA_R_16F;
    case DType::fp32: return CUDA_R_32F;
  }
  return CUDA_R_32F;
}

int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

// Where each piece of scratch lives; computed once so scratch_bytes() and the
// run agree by construction.
// The fused variants' table rows a config names (the first row when unnamed).
int variant_index(const char* const* names, size_t count, const std::string& name, const char* role) {
  if (name.empty()) return 0;
  for (size_t i = 0; i < count; ++i)
    if (name == names[i]) return static_cast<int>(i);
  std::string known;
  for (size_t i = 0; i < count; ++i) known += std::string(i ? ", " : "") + names[i];
  fail_usage(std::string(role) + " '" + name + "' is not in the compiled table (" + known + ")");
}
int logits_variant(const KernelConfig& c) {
  return variant_index(kSm90LogitsVariantNames, std::size(kSm90LogitsVariantNames), c.logits_kernel, "logits_kernel");
}
// −1: dW on cuBLASLt (kDwOnCublaslt).
int dw_variant(const KernelConfig& c) {
  if (c.dw_kernel == kDwOnCublaslt) return -1;
  return variant_index(kSm90DwVariantNames, std::size(kSm90DwVariantNames), c.dw_kernel, "dw_kernel");
}
// −1: dX on cuBLASLt (no name).
int dx_variant(const KernelConfig& c) {
  if (c.dx_kernel.empty()) return -1;
  return variant_index(kSm90DxVariantNames, std::size(kSm90DxVariantNames), c.dx_kernel, "dx_kernel");
}

struct Layout {
  int64_t N, H, V, rc, vc, ld_vc;
  bool bwd, one_pass, dx_acc, dw_acc, db_acc, fused, dw_cutlass, dx_cutlass, scaled_dz;
  int64_t part_rows = 0, part_tiles = 0;  // fused: the statistics partials, [tiles][rows]
  // ce: each row split into ce_splits segments of vc columns, one block each;
  // fused holds the row on chip in a cluster of ce_splits blocks (one block: a
  // cluster of one), which needs no partials, or, split among more blocks than
  // a cluster holds, spread over the GPU with partials in global memory
  // (ce_spread); either runs a call of a few rows in one launch (ce_one_launch).
  // ce_split: the split statistics (not fused), which count the targets and
  // reduce the loss themselves (ce_split_stats: in the part kernel up to
  // kCeOneLaunchTokens rows, else in their merge and count_reduce launches), so
  // the call runs no count_targets or reduce_loss of its own.
  int ce_splits = 1;
  bool ce_cluster = false, ce_spread = false, ce_one_launch = false, ce_split = false;
  // scaled_dz: the scaled X goes to dX's rows of the chunk until dX's GEMM
  // overwrites them, and the call's sampled references (no softcap) wait in the
  // LSE output until each chunk's merge, so neither costs scratch. row_scale
  // holds two chunks' rows, a chunk's references from its merge and then its a_i
  // from scaled_dz_rows: chunk k's dX is scaled in chunk k + 1's scaled_dz_rows
  // launch, after chunk k + 1's merge has written its own half.
  size_t state, counters, tile, dx, dw, db, z_target, lse_part, row_scale, sumz_part, ce_parts, ce_lse_lo, ws, ws_bytes,
      total;
  // fused: the merge blocks' slots for the call's end (sm90::CallEnd), and their count.
  size_t end_loss, end_count, end_bad;
  int64_t end_blocks = 0;
  // The row chunks run_flce takes, in order: flce's in whole tiles of the
  // logits GEMM's rows (its clusters when fused, else cuBLASLt's 128-row
  // tiles); ce's one chunk of all rows.
  std::vector<int64_t> chunk_rows;

  Layout(const Problem& p, const KernelConfig& c) {
    N = p.tokens, H = p.hidden, V = p.vocab;
    rc = p.family == Family::flce ? c.row_chunk_for(p) : N;
    vc = c.v_chunk_for(p);
    // Rows of the tile start on 256-byte boundaries (bf16): at GPT-2's 50257, a
    // leading dimension rounded up only to 8 left every row off the GEMMs' grid.
    ld_vc = round_up(vc, 128);
    bwd = p.mode == Mode::forward_backward;
    one_pass = vc >= V;
    const bool flce = p.family == Family::flce, lowp = p.dtype != DType::fp32;
    fused = flce && c.impl == KernelConfig::Impl::fused;
    chunk_rows = flce ? c.row_chunk_rows(p, fused ? kSm90LogitsClusterRows[logits_variant(c)] : 128)
                      : std::vector<int64_t>{N};
    dx_acc = flce && bwd && !one_pass && lowp && c.dx_acc_fp32;
    dw_acc = flce && bwd && chunk_rows.size() > 1 && lowp && c.dw_acc_fp32;
    db_acc = flce && bwd && p.bias;
    dw_cutlass = fused && dw_variant(c) >= 0;
    dx_cutlass = fused && bwd && one_pass && dx_variant(c) >= 0;
    scaled_dz = sm90_scaled_dz(p, c);
    if (!flce) {
      ce_splits = static_cast<int>(std::min<int64_t>((V + vc - 1) / vc, INT32_MAX));
      ce_spread = c.fused && ce_splits > kCeMaxClusterBlocks;
      ce_cluster = c.fused && !ce_spread;
      ce_one_launch = c.fused && N > 0 && N <= kCeOneLaunchTokens;
      ce_split = !c.fused;
    }
    if (fused) {
      const int v = logits_variant(c);
      part_rows = sm90_partial_rows(v, rc);
      part_tiles = sm90_partial_tiles(v, V);
    }
    size_t off = 0;
    auto take = [&](size_t bytes) {
      const size_t at = off;
      off += (bytes + 255) / 256 * 256;
      return at;
    };
    // The cuBLASLt path's chunks fold into it; the fused path's merge writes the LSE.
    state = take(flce && !fused ? sizeof(float) * 5 * static_cast<size_t>(N) : 0);
    counters = take(2 * sizeof(int64_t));
    // Fused forward stores no tile: the statistics come out of the GEMM's epilogue.
    // scaled_dz: the tile also holds target_rows_add's scratch after the last
    // chunk (Sm90TargetScratch: about 4 MiB + 20·N + N·H/16 bytes, 8 MiB at
    // Llama-3-8B N = 8192; larger than the tile only at few rows of a small V).
    tile = take(flce && (bwd || !fused) ? std::max(static_cast<size_t>(rc * ld_vc * dtype_bytes(p.dtype)),
                                                   scaled_dz ? Sm90TargetScratch(N, H).total : 0)
                                        : 0);
    dx = take(dx_acc ? static_cast<size_t>(rc * H) * 4 : 0);
    dw = take(dw_acc ? static_cast<size_t>(V * H) * 4 : 0);
    db = take(db_acc ? static_cast<size_t>(V) * 4 : 0);
    const size_t parts = static_cast<size_t>(part_rows * part_tiles);
    z_target = take(fused ? static_cast<size_t>(N) * 4 : 0);
    lse_part = take(parts * sizeof(sm90::LsePair));
    row_scale = take(scaled_dz ? static_cast<size_t>(rc) * 2 * 4 : 0);
    sumz_part = take(fused && p.loss.label_smoothing > 0 ? parts * 4 : 0);
    ce_parts = take(!flce && ce_splits > 1 && !ce_cluster ? static_cast<size_t>(N) * ce_splits * 16 : 0);
    // The split statistics' LSE low parts, for their gradient kernel (ce_grad).
    ce_lse_lo = take(!flce && bwd && !ce_cluster && !ce_spread ? static_cast<size_t>(N) * 4 : 0);
    if (fused)
      for (const int64_t rows : chunk_rows) end_blocks += sm90::merge_blocks(rows);
    end_loss = take(static_cast<size_t>(end_blocks) * sizeof(float));
    end_count = take(static_cast<size_t>(end_blocks) * sizeof(long long));
    end_bad = take(static_cast<size_t>(end_blocks) * sizeof(long long));
    ws_bytes = flce ? static_cast<size_t>(c.workspace_mib) << 20 : 0;
    ws = take(ws_bytes);
    total = off;
  }
};

// A cuBLASLt GEMM over `cols` vocabulary columns runs as the largest multiple of
// 128 and a ragged tail (file comment): each piece's offset and width.
struct ColPiece {
  int64_t c0, n;
};
std::vector<ColPiece> col_pieces(int64_t cols) {
  constexpr int64_t kAlign = 128;
  if (cols % kAlign == 0 || cols < kAlign) return {{0, cols}};
  const int64_t main = cols / kAlign * kAlign;
  return {{0, main}, {main, cols - main}};
}

LossParams loss_params(const Problem& p, const Args& a, const int64_t* n_valid) {
  LossParams lp;
  lp.dtype = p.dtype;
  lp.vocab = p.vocab;
  lp.targets = a.targets;
  lp.targets_i64 = p.target_type == TargetType::i64;
  lp.ignore_index = p.loss.ignore_index;
  lp.reduction = p.loss.reduction;
  lp.softcap = static_cast<float>(p.loss.softcap);
  lp.label_smoothing = static_cast<float>(p.loss.label_smoothing);
  lp.z_loss = static_cast<float>(p.loss.z_loss);
  lp.grad_scale = a.grad_scale;
  lp.grad_tokens = a.grad_tokens;
  lp.n_valid = n_valid;
  lp.bias = p.family == Family::flce && p.bias ? a.b : nullptr;
  return lp;
}

sm90::StatsParams stats_params(const LossParams& lp) {
  return {lp.vocab, lp.targets, lp.targets_i64, lp.ignore_index, lp.softcap, lp.label_smoothing, lp.z_loss,
          lp.reduction};
}

RowState row_state(char* base, const Layout& L) {
  float* s = reinterpret_cast<float*>(base + L.state);
  return {s, s + L.N, s + 2 * L.N, s + 3 * L.N, s + 4 * L.N};
}

// The three GEMMs of a [rows, cols] tile in cuBLASLt's column-major terms.
//   logits: col-major tileᵀ[cols, rows] = W[C] (H×cols, transposed) · X[R] (H×rows)
//   dX:     col-major dXᵀ[H, rows] = W[C]ᵀ-view[H, cols] · dZᵀ-view[cols, rows]
//   dW:     col-major dWᵀ[H, cols] = X[R]ᵀ-view[H, rows] · dZ[rows, cols]
// dX and dW are written in fp32 when they accumulate in scratch (Layout).
GemmShape gemm_shape(GemmRole role, const Problem& p, const Layout& L, int64_t rows, int64_t cols) {
  const cudaDataType_t ty = cuda_type(p.dtype);
  switch (role) {
    case GemmRole::logits: return {ty, ty, true, false, cols, rows, L.H, L.H, L.H, L.ld_vc};
    case GemmRole::dx: return {ty, L.dx_acc ? CUDA_R_32F : ty, false, false, L.H, rows, cols, L.H, L.ld_vc, L.H};
    case GemmRole::dw: return {ty, L.dw_acc ? CUDA_R_32F : ty, false, true, L.H, cols, rows, L.H, L.ld_vc, L.H};
  }
  return {};
}

void check_args(const Problem& p, const Args& a) {
  auto need = [](const void* ptr, const char* what) {
    if (!ptr) fail_usage(std::string("null device pointer: ") + what);
  };
  need(a.targets, "targets"), need(a.loss, "loss"), need(a.token_loss, "token_loss"), need(a.lse, "lse");
  const bool bwd = p.mode == Mode::forward_backward;
  if (bwd && p.loss.reduction != Reduction::none) need(a.grad_scale, "grad_scale");
  if (bwd && p.loss.reduction == Reduction::none) need(a.grad_tokens, "grad_tokens");
  if (p.family == Family::flce) {
    need(a.x, "x"), need(a.w, "w");
    if (p.bias) need(a.b, "b");
    if (bwd) need(a.dx, "dx"), need(a.dw, "dw");
    if (bwd && p.bias) need(a.db, "db");
  } else {
    need(a.logits, "logits");
    if (bwd) need(a.dz, "dz");
  }
}

}  // namespace

void check_supported(const Problem& p, const KernelConfig& c, int device) {
  p.validate();
  validate_config(p, c);
  if (c.impl == KernelConfig::Impl::fused) {
    if (device < 0) CELTUNE_CUDA(cudaGetDevice(&device));
    std::string why;
    if (!sm90::available(device, &why)) fail_usage("config " + to_string(c) + ": " + why);
    logits_variant(c), dw_variant(c), dx_variant(c);  // names in the table
    if (p.hidden % 8)
      fail_usage("hidden size " + std::to_string(p.hidden) + " must be a multiple of 8 for impl fused (TMA rows)");
    if (sm90_partial_rows(logits_variant(c), c.row_chunk_for(p)) > sm90::kMergeMaxRows)
      fail_usage("impl fused takes row chunks of at most " + std::to_string(sm90::kMergeMaxRows) +
                 " rows (the merge's 32-bit strides); set row_chunk");
  }
  const bool bwd = p.mode == Mode::forward_backward;
  CeKernels used;
  const CeLaunch launch{c.block_size, c.threads};
  if (p.family == Family::ce) {
    const Layout L(p, c);
    used.fold = false;
    used.part = !c.fused;
    used.grad = bwd && used.part;
    used.cluster = L.ce_cluster;
    used.spread = L.ce_spread;
    std::string why = ce_launch_unsupported(launch, p.dtype, used);
    if (why.empty() && L.ce_cluster) why = ce_cluster_unsupported(launch, p.dtype, L.vc, L.ce_splits);
    if (why.empty() && L.ce_spread) why = ce_spread_unsupported(launch, p.dtype, L.N, L.ce_splits, bwd);
    if (!why.empty()) fail_usage("config " + to_string(c) + ": " + why);
  } else {
    used.grad = bwd;
    const std::string why = ce_launch_unsupported(launch, p.dtype, used);
    if (!why.empty()) fail_usage("config " + to_string(c) + ": " + why);
  }
  if (c.rows_per_block != 1) fail_usage("the CUDA ce kernels take rows_per_block = 1");
  if (!c.gemm_algos.empty()) {
    // A serialised algorithm is only meaningful to the cuBLASLt that made it.
    const auto running = static_cast<int64_t>(cublasLtGetVersion());
    if (c.gemm_algos_cublaslt != running)
      fail_usage("config " + to_string(c) + ": its cuBLASLt algorithms were tuned with cuBLASLt " +
                 std::to_string(c.gemm_algos_cublaslt) + ", this process runs " + std::to_string(running) +
                 "; re-tune, or drop gemm_algos to use the heuristic's choices");
    cublasLtMatmulAlgo_t a{};
    for (const auto& text : c.gemm_algos)
      if (!text.empty() && !parse_algo(text, &a))
        fail_usage("config " + to_string(c) + ": a gemm_algos entry is not a serialised cuBLASLt algorithm");
  }
  if (p.family == Family::flce) {
    const int64_t align = p.dtype == DType::fp32 ? 4 : 8;
    if (p.hidden % align)
      fail_usage("hidden size " + std::to_string(p.hidden) + " must be a multiple of " + std::to_string(align) +
                 " for " + std::string(to_string(p.dtype)) + ": cuBLASLt needs 16-byte aligned rows");
    if (c.v_chunk_for(p) < p.vocab && c.v_chunk_for(p) % 8)
      fail_usage("v_chunk " + std::to_string(c.v_chunk) + " must be a multiple of 8 when smaller than V");
  }
}

std::vector<std::vector<std::string>> gemm_candidates(Context& ctx, const Problem& p, const KernelConfig& c, int k) {
  if (p.family != Family::flce) return {};
  const Layout L(p, c);
  std::vector<std::vector<std::string>> out;
  for (GemmRole r : {GemmRole::logits, GemmRole::dx, GemmRole::dw}) {
    // Forward runs no gradient GEMMs; impl fused runs the one-pass logits, dW
    // unless its config names cuBLASLt for it, and dX where it names a row, on
    // CUTLASS.
    const bool runs = r == GemmRole::logits ? !L.fused || (L.bwd && !L.one_pass)
                      : r == GemmRole::dx   ? L.bwd && !L.dx_cutlass
                                            : L.bwd && !L.dw_cutlass;
    if (!runs) {
      out.push_back({});
      continue;
    }
    // The candidates of the aligned piece, the shape nearly all the work runs at.
    out.push_back(ctx.heuristic_algos(gemm_shape(r, p, L, L.rc, col_pieces(L.vc).front().n), k, L.ws_bytes));
  }
  return out;
}

size_t scratch_bytes(const Problem& p, const KernelConfig& c) {
  return Layout(p, c).total;
}

namespace {
// What both families do before their own kernels: check the problem, config and
// pointers, take the scratch (poisoned with NaN on request, so nothing reads what
// no kernel wrote), lay out the row state and count the valid targets.
struct Prologue {
  Layout L;
  char* base;
  LossParams lp;
  RowState rs;
  CeLaunch launch;
  OneLaunch one;  // on: the ce kernels end the call (count_targets did not run, nor will reduce_loss)
};

Prologue begin_run(Context& ctx, const Problem& p, const KernelConfig& c, const Args& a, cudaStream_t st) {
  check_supported(p, c, ctx.device());
  check_args(p, a);
  const Layout L(p, c);
  char* base = static_cast<char*>(ctx.scratch(L.total));
  int64_t* n_valid = reinterpret_cast<int64_t*>(base + L.counters);
  int64_t* bad = a.bad_target ? a.bad_target : n_valid + 1;
  const bool ends_itself = L.ce_one_launch || L.ce_split;  // the ce kernels count and reduce
  unsigned* const counters = ends_itself ? ctx.ce_counters() : nullptr;
  const OneLaunch one{ends_itself, L.N, n_valid, bad, a.loss, counters, counters ? counters + 1 : nullptr};
  Prologue out{L, base, loss_params(p, a, n_valid), row_state(base, L), CeLaunch{c.block_size, c.threads, c.fused ? L.vc : 0}, one};
  if (ctx.poison_scratch()) fill_nan(base, static_cast<int64_t>(L.total), st);
  // cuBLASLt's split-K reduction reads workspace that initcheck reports as never
  // written (N·V > 2^31, H = 64): zeroed, so nothing depends on what it held.
  if (L.ws_bytes) CELTUNE_CUDA(cudaMemsetAsync(base + L.ws, 0, L.ws_bytes, st));
  // The fused path's merges end the call (sm90::CallEnd); forward+backward still
  // counts first, for dZ's mean scale.
  if (!ends_itself && !(L.fused && !L.bwd)) count_targets(out.lp, L.N, n_valid, bad, st);
  return out;
}
}  // namespace

void run_flce(Context& ctx, const Problem& p, const KernelConfig& c, const Args& a, cudaStream_t st) {
  DeviceScope on(ctx.device());
  const Prologue run = begin_run(ctx, p, c, a, st);
  const Layout& L = run.L;
  const LossParams& lp = run.lp;
  const RowState& rs = run.rs;
  const CeLaunch& launch = run.launch;
  char* base = run.base;
  void* tile = base + L.tile;
  float* dx_acc = reinterpret_cast<float*>(base + L.dx);
  float* dw_acc = reinterpret_cast<float*>(base + L.dw);
  float* db_acc = reinterpret_cast<float*>(base + L.db);
  const int64_t H = L.H, bytes = dtype_bytes(p.dtype);
  auto at = [](const void* ptr, int64_t elems, int64_t elem_bytes) {
    return static_cast<const char*>(ptr) + elems * elem_bytes;
  };
  auto at_mut = [](void* ptr, int64_t elems, int64_t elem_bytes) { return static_cast<char*>(ptr) + elems * elem_bytes; };
  // Tuned cuBLASLt algorithms per GEMM role, or null for the heuristic's.
  auto algo = [&](GemmRole r) { return c.gemm_algos.empty() ? nullptr : &c.gemm_algos[static_cast<size_t>(r)]; };
  const Workspace ws{base + L.ws, L.ws_bytes};

  if (L.scaled_dz) target_rows_add_check(L.N, L.V);  // before any launch: a refusal leaves no output half written
  if (L.db_acc) CELTUNE_CUDA(cudaMemsetAsync(db_acc, 0, static_cast<size_t>(L.V) * 4, st));

  // GEMM 1: tile[rows, cols] = X[R]·W[C]ᵀ. The bias joins in the CE kernels (LossParams::bias).
  auto logits = [&](int64_t r0, int64_t rows, int64_t v0, int64_t cols) {
    for (const ColPiece& q : col_pieces(cols))
      ctx.gemm(gemm_shape(GemmRole::logits, p, L, rows, q.n), at(a.w, (v0 + q.c0) * H, bytes), at(a.x, r0 * H, bytes),
               at_mut(tile, q.c0, bytes), 0.0f, st, ws, algo(GemmRole::logits));
  };
  // scaled_dz: each row's factor a_i (and before it, without a softcap, its
  // reference), in two halves of rc rows that the chunks take in turn (Layout).
  float* row_scale_base = L.scaled_dz ? reinterpret_cast<float*>(base + L.row_scale) : nullptr;
  int64_t chunk_index = 0;  // of the chunk being run: its half of row_scale
  auto row_scale_of = [&](int64_t k) { return row_scale_base && k >= 0 ? row_scale_base + (k % 2) * L.rc : nullptr; };
  // Without a softcap, the rows' references: sampled before the first chunk (below).
  const bool sampled = L.scaled_dz && sm90_sampled_ref(p.loss.softcap);
  // fused: the logits GEMM over all of V with the statistics in its epilogue
  // (storing the tile when `store`; the thread holding each row's target column
  // writes its logit), then the merge: the rows' LSE and token loss are final
  // afterwards.
  int64_t end_slot = 0;  // the next merge's first CallEnd slot
  auto stats = [&](int64_t r0, int64_t rows, bool store) {
    const int lv = logits_variant(c);
    auto* lse_part = reinterpret_cast<sm90::LsePair*>(base + L.lse_part);
    float* sumz_part = p.loss.label_smoothing > 0 ? reinterpret_cast<float*>(base + L.sumz_part) : nullptr;
    float* z_target = reinterpret_cast<float*>(base + L.z_target);
    const sm90::StatsParams sp = stats_params(lp);
    sm90::LogitsArgs g;
    g.rows = rows, g.cols = L.V, g.hidden = H;
    g.x = at(a.x, r0 * H, bytes), g.w = a.w, g.bias = lp.bias, g.softcap = lp.softcap;
    g.tile = store ? tile : nullptr, g.ld_tile = L.ld_vc;
    g.lse_partials = lse_part, g.sumz_partials = sumz_part;
    g.targets = static_cast<const char*>(lp.targets) + r0 * (lp.targets_i64 ? 8 : 4), g.targets_i64 = lp.targets_i64;
    g.z_target = z_target + r0;
    g.scaled_dz = store && L.scaled_dz;
    const float* refs = g.scaled_dz && sampled ? a.lse + r0 : nullptr;  // the rows' references (above)
    g.row_ref = refs;
    // The forward alone: only the loss and the LSE come out, and no dZ is formed
    // from them here (the two-pass backward's first pass forms dZ against this LSE,
    // so it keeps the exact softcap). Gemma-2-2B's forward, timed in rounds with
    // its GEMM: 1.17–1.22× → 1.10–1.19× (docs/results.md, 2026-11-24).
    g.approx_softcap = !L.bwd;
    sm90::logits_stats(lv, p.dtype, g, ws, st);
    sm90::CallEnd end;
    end.block_loss = reinterpret_cast<float*>(base + L.end_loss);
    end.block_count = reinterpret_cast<long long*>(base + L.end_count);
    end.block_bad = reinterpret_cast<long long*>(base + L.end_bad);
    end.slot0 = end_slot, end.blocks = L.end_blocks;
    end_slot += sm90::merge_blocks(rows);
    end.last = r0 + rows == L.N;
    end.done = end.last ? ctx.ce_counters() : nullptr;
    end.n_valid = run.one.n_valid, end.bad = run.one.bad, end.loss = a.loss;
    sm90::merge_stats(lse_part, sumz_part, sm90_partial_rows(lv, rows), L.part_tiles, r0, rows, sp, z_target, a.lse,
                      a.token_loss, refs, refs ? row_scale_of(chunk_index) : nullptr, end, st);
  };
  // GEMMs 2 and 3 and db, from a dZ tile, or (scaled_dz) from q with the row
  // factors and the scaled X that scaled_dz_rows wrote into dX's rows: dW first,
  // then dX's GEMM overwrites them (and the next chunk's scaled_dz_rows, or
  // its own launch after the last, multiplies them by a_i and adds the target term).
  auto consume = [&](int64_t r0, int64_t rows, int64_t v0, int64_t cols) {
    float* row_scale = row_scale_of(chunk_index);
    const bool first_v = v0 == 0, first_r = r0 == 0;
    const void* x_rows = L.scaled_dz ? at(a.dx, r0 * H, bytes) : at(a.x, r0 * H, bytes);
    {  // dW[C] (+)= dZᵀ·X[R]:  col-major dWᵀ[H, cols] = X[R]ᵀ-view[H, rows] · dZ[rows, cols]
      void* d = L.dw_acc ? static_cast<void*>(dw_acc + v0 * H) : at_mut(a.dw, v0 * H, bytes);
      if (L.dw_cutlass) {  // CUTLASS, persistent, in place; TMA takes any width
        sm90::DwArgs g;
        g.rows = rows, g.cols = cols, g.hidden = H;
        g.dz = tile, g.ld_dz = L.ld_vc, g.x = x_rows;
        g.dw = d, g.dw_fp32 = L.dw_acc, g.beta = first_r ? 0.0f : 1.0f;
        sm90::dw_gemm(dw_variant(c), p.dtype, g, ws, st);
      } else {
        for (const ColPiece& q : col_pieces(cols))
          ctx.gemm(gemm_shape(GemmRole::dw, p, L, rows, q.n), x_rows, at(tile, q.c0, bytes),
                   at_mut(d, q.c0 * H, L.dw_acc ? 4 : bytes), first_r ? 0.0f : 1.0f, st, ws, algo(GemmRole::dw));
      }
    }
    {  // dX[R] (+)= dZ·W[C]:  col-major dXᵀ[H, rows] = W[C]ᵀ-view[H, cols] · dZᵀ-view[cols, rows]
      void* d = L.dx_acc ? static_cast<void*>(dx_acc) : at_mut(a.dx, r0 * H, bytes);
      if (L.dx_cutlass) {  // CUTLASS, stream-K, all of V at once (TMA takes any width)
        sm90::DxArgs g;
        g.rows = rows, g.cols = cols, g.hidden = H;
        g.dz = tile, g.ld_dz = L.ld_vc, g.w = a.w, g.dx = d;
        sm90::dx_gemm(dx_variant(c), p.dtype, g, ws, st);
      } else {
        for (const ColPiece& q : col_pieces(cols))  // K in pieces: the second adds to the first
          ctx.gemm(gemm_shape(GemmRole::dx, p, L, rows, q.n), at(a.w, (v0 + q.c0) * H, bytes),
                   at(tile, q.c0, bytes), d, first_v && q.c0 == 0 ? 0.0f : 1.0f, st, ws, algo(GemmRole::dx));
      }
    }
    if (L.db_acc)
      column_sums(TileView{tile, L.ld_vc, r0, rows, v0, cols, tile, L.ld_vc}, p.dtype, db_acc, st,
                  L.scaled_dz ? row_scale : nullptr);
  };

  // Without a softcap, the rows' references (variants.hpp), all before the first
  // chunk and kept in the LSE output until each chunk's merge reads them: from
  // the logits of kSm90RefSamples columns spread over V (a small cuBLASLt GEMM
  // into the tile, which the logits GEMM overwrites later; as many rows a GEMM as
  // the tile holds), then sample_ref. Their rows lie kSm90RefSamples apart even
  // where V is smaller: a leading dimension of V elements (V = 100: 200 bytes) is
  // not 16-byte aligned, and cuBLASLt may then have no algorithm. ld_vc ≥ 128
  // leaves the room. One GEMM and one sample_ref a call, not a chunk: two
  // launches and their boundaries fewer a chunk.
  if (sampled) {
    const int64_t samples = std::min<int64_t>(kSm90RefSamples, L.V), stride = L.V / samples;
    const int64_t ld = kSm90RefSamples;
    const int64_t pass = std::min<int64_t>(L.rc * L.ld_vc / ld, INT32_MAX);  // ≥ rc: ld_vc ≥ ld
    const cudaDataType_t ty = cuda_type(p.dtype);
    for (int64_t r0 = 0; r0 < L.N; r0 += pass) {
      const int64_t rows = std::min(pass, L.N - r0);
      const GemmShape shape{ty, ty, true, false, samples, rows, H, stride * H, H, ld};
      ctx.gemm(shape, a.w, at(a.x, r0 * H, bytes), tile, 0.0f, st, ws, nullptr);
      sm90::sample_ref(p.dtype, tile, static_cast<int>(samples), ld, stride, lp.bias, rows, a.lse + r0, st);
    }
  }
  int64_t r0 = 0, prev_rows = 0;  // scaled_dz: the previous chunk's, whose dX waits for its a_i
  for (const int64_t rows : L.chunk_rows) {
    if (L.fused) {
      // Forward, or the two-pass backward's first pass: statistics only. One pass:
      // the same GEMM stores the tile, and dZ overwrites it from the final LSE.
      stats(r0, rows, L.bwd && L.one_pass);
      if (L.bwd && L.one_pass) {
        const TileView all{tile, L.ld_vc, r0, rows, 0, L.V, tile, L.ld_vc};
        if (L.scaled_dz) {
          RefPartials ref;
          if (sm90_sampled_ref(p.loss.softcap)) {
            ref.pairs = reinterpret_cast<const float*>(base + L.lse_part);
            ref.rows_pad = sm90_partial_rows(logits_variant(c), rows);
            ref.block_n = kSm90LogitsBlockN[logits_variant(c)];
          }
          const RowsToScale prev{at_mut(a.dx, (r0 - prev_rows) * H, bytes), r0 - prev_rows, prev_rows, H,
                                 row_scale_of(chunk_index - 1), a.w};
          scaled_dz_rows(all, lp, a.lse, reinterpret_cast<const float*>(base + L.z_target), at(a.x, r0 * H, bytes), H,
                         at_mut(a.dx, r0 * H, bytes), row_scale_of(chunk_index), ref, prev, st);
        } else {
          ce_grad(all, lp, a.lse, nullptr, launch, st);  // the merge (sm90 stats) keeps no low part
        }
        consume(r0, rows, 0, L.V);
      }
    } else {
      for (int64_t v0 = 0; v0 < L.V; v0 += L.vc) {  // pass 1
        const int64_t cols = std::min(L.vc, L.V - v0);
        logits(r0, rows, v0, cols);
        const TileView v{tile, L.ld_vc, r0, rows, v0, cols, tile, L.ld_vc};
        ce_fold(v, lp, rs, v0 == 0, v0 + cols >= L.V, L.one_pass && L.bwd, a.lse, a.token_loss, launch, st);
        if (L.one_pass && L.bwd) consume(r0, rows, v0, cols);
      }
    }
    if (L.bwd && !L.one_pass) {
      for (int64_t v0 = 0; v0 < L.V; v0 += L.vc) {  // pass 2: recompute each tile
        const int64_t cols = std::min(L.vc, L.V - v0);
        logits(r0, rows, v0, cols);
        // The fused path's merge (sm90 stats) keeps no low part; the folds do.
        ce_grad(TileView{tile, L.ld_vc, r0, rows, v0, cols, tile, L.ld_vc}, lp, a.lse, L.fused ? nullptr : rs.lse_lo,
                launch, st);
        consume(r0, rows, v0, cols);
      }
      if (L.dx_acc) convert_from_f32(dx_acc, at_mut(a.dx, r0 * H, bytes), p.dtype, rows * H, st);
    }
    r0 += rows, prev_rows = rows, ++chunk_index;
  }
  if (L.scaled_dz) {
    // The last chunk's dX (a view of no rows), then the targets' terms of dW and db.
    const float* z_target = reinterpret_cast<const float*>(base + L.z_target);
    const RowsToScale last{at_mut(a.dx, (r0 - prev_rows) * H, bytes), r0 - prev_rows, prev_rows, H,
                           row_scale_of(chunk_index - 1), a.w};
    scaled_dz_rows(TileView{tile, L.ld_vc, r0, 0, 0, L.V, tile, L.ld_vc}, lp, a.lse, z_target, a.x, H, a.dx,
                   row_scale_base, RefPartials{}, last, st);
    target_rows_add(lp, a.lse, z_target, a.x, H, L.N, tile, L.dw_acc ? static_cast<void*>(dw_acc) : a.dw, L.dw_acc,
                    L.db_acc ? db_acc : nullptr, st);
  }
  if (L.dw_acc) convert_from_f32(dw_acc, a.dw, p.dtype, L.V * H, st);
  if (L.db_acc) convert_from_f32(db_acc, a.db, p.dtype, L.V, st);
  if (!L.fused) reduce_loss(a.token_loss, L.N, lp, a.loss, st);  // fused: the last merge did
}

void run_ce(Context& ctx, const Problem& p, const KernelConfig& c, const Args& a, cudaStream_t st) {
  DeviceScope on(ctx.device());
  const Prologue run = begin_run(ctx, p, c, a, st);
  const Layout& L = run.L;
  const LossParams& lp = run.lp;
  const TileView all{a.logits, L.V, 0, L.N, 0, L.V, a.dz, L.V};
  if (L.ce_spread) {
    ce_spread(all, lp, L.vc, reinterpret_cast<float*>(run.base + L.ce_parts), a.lse, a.token_loss, run.launch, st,
              L.bwd, run.one);
  } else if (L.ce_cluster) {
    ce_cluster(all, lp, L.vc, a.lse, a.token_loss, run.launch, st, L.bwd, run.one);
  } else {
    float* lse_lo = L.bwd ? reinterpret_cast<float*>(run.base + L.ce_lse_lo) : nullptr;
    ce_split_stats(all, lp, L.vc, reinterpret_cast<float*>(run.base + L.ce_parts), a.lse, lse_lo, a.token_loss,
                   run.launch, st, run.one);
    if (L.bwd) ce_grad(all, lp, a.lse, lse_lo, run.launch, st, L.vc);
  }
  if (!run.one.on) reduce_loss(a.token_loss, L.N, lp, a.loss, st);
}

}  // namespace celtune::cuda
