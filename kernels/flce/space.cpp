// The flce family's search space: the vocabulary chunk (from small chunks up to
// the whole vocabulary), the row chunk, the CE kernel's tile and threads, the
// gradient accumulation dtype, and the fused row-on-chip variant of the one pass.
// Constraints beyond the backend's own: block_size ≤ v_chunk (validate_config),
// chunks that change nothing are dropped (enumerate() deduplicates), and the
// accumulation choice only where there is something to accumulate.
#include "kernels/space.hpp"

namespace celtune {

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
  };
  s.constraint = [](const Problem& pr, const KernelConfig& c, std::string* why) {
    const int e = c.block_size / c.threads;
    if (c.block_size % c.threads || e < 1 || e > 32) {
      if (why) *why = "block_size / threads outside the compiled table";
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
