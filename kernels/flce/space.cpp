// The flce family's search space: the vocabulary chunk (from small chunks up to
// the whole vocabulary), the row chunk, the CE kernel's tile and threads, the
// gradient accumulation dtype, the fused row-on-chip variant of the one pass, and
// the implementation (cuBLASLt + CE kernels, or the fused sm_90 CUTLASS GEMMs).
// Constraints beyond the backend's own: block_size ≤ v_chunk (validate_config),
// chunks that change nothing are dropped (enumerate() deduplicates), and the
// accumulation choice only where there is something to accumulate.
#include <iterator>

#include "kernels/flce/sm90/variants.hpp"
#include "kernels/space.hpp"

namespace celtune {

namespace {
// Row indices 0…n−1 of a variant table, or just the default row when unused.
std::vector<int64_t> rows(size_t n, bool used) {
  std::vector<int64_t> out{0};
  for (size_t i = 1; used && i < n; ++i) out.push_back(static_cast<int64_t>(i));
  return out;
}
}  // namespace

SearchSpace flce_space(const Problem& p) {
  SearchSpace s;
  const bool bwd = p.mode == Mode::forward_backward;
  s.params = {
      {"v_chunk", {8192, 32768, 0}, [](KernelConfig& c, int64_t v) { c.v_chunk = v; }},
      // 768 and 896 rows are what one pass over a 128k vocabulary fits in 256 MiB.
      {"row_chunk", {256, 512, 768, 896, 1024, 2048, 4096, 0}, [](KernelConfig& c, int64_t v) { c.row_chunk = v; }},
      // The CE kernel is a few percent of flce's time: two tile widths span it.
      {"block_size", {2048, 8192}, [](KernelConfig& c, int64_t v) { c.block_size = int(v); }},
      {"threads", {256, 512}, [](KernelConfig& c, int64_t v) { c.threads = int(v); }},
      // One switch for both accumulators: fp32 scratch, or the output dtype.
      {"acc_fp32", bwd && p.dtype != DType::fp32 ? std::vector<int64_t>{1, 0} : std::vector<int64_t>{1},
       [](KernelConfig& c, int64_t v) { c.dw_acc_fp32 = c.dx_acc_fp32 = v != 0; }},
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
      {"dw_kernel", rows(std::size(kSm90DwVariantNames), bwd && p.dtype != DType::fp32),
       [](KernelConfig& c, int64_t v) { c.dw_kernel = v ? kSm90DwVariantNames[v] : ""; }},
  };
  s.constraint = [](const Problem& pr, const KernelConfig& c, std::string* why) {
    const int e = c.block_size / c.threads;
    if (c.block_size % c.threads || e < 1 || e > 32) {
      if (why) *why = "block_size / threads outside the compiled table";
      return false;
    }
    if (c.impl != KernelConfig::Impl::fused && (!c.logits_kernel.empty() || !c.dw_kernel.empty())) {
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
