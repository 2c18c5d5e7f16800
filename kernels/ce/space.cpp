// The ce family's search space: tile width, threads, and the fused variant
// (row held on chip between the forward and gradient sweeps, forward+backward only).
#include "kernels/space.hpp"

namespace celtune {

SearchSpace ce_space(const Problem& p) {
  SearchSpace s;
  s.params = {
      {"block_size", {1024, 2048, 4096, 8192, 16384}, [](KernelConfig& c, int64_t v) { c.block_size = int(v); }},
      {"threads", {128, 256, 512, 1024}, [](KernelConfig& c, int64_t v) { c.threads = int(v); }},
      {"fused", p.mode == Mode::forward_backward ? std::vector<int64_t>{0, 1} : std::vector<int64_t>{0},
       [](KernelConfig& c, int64_t v) { c.fused = v != 0; }},
  };
  s.constraint = [](const Problem&, const KernelConfig& c, std::string* why) {
    // The compiled table holds 1…32 elements per thread (kernels/ce/ce.cu).
    const int e = c.block_size / c.threads;
    const bool ok = c.block_size % c.threads == 0 && e >= 1 && e <= 32;
    if (!ok && why) *why = "block_size / threads outside the compiled table";
    return ok;
  };
  return s;
}

}  // namespace celtune
