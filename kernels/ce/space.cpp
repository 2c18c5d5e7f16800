// The ce family's search space: tile width, threads, how many blocks share a row
// (v_chunk: the segment one block folds; 0 = the whole row), and the fused variant
// (the row held on chip between the forward and gradient sweeps, by one block or
// by a cluster of blocks; forward+backward only).
#include "kernels/space.hpp"

namespace celtune {

namespace {
// Segments that split V into 2, 4, … 64 blocks of at least 1024 columns, rounded
// up to 256 columns so segment starts stay aligned for wide loads (V % 8 == 0).
std::vector<int64_t> segments(int64_t vocab) {
  std::vector<int64_t> out{0};
  for (int64_t s = 2; s <= 64; s *= 2) {
    const int64_t seg = (vocab + s - 1) / s;
    const int64_t rounded = (seg + 255) / 256 * 256;
    if (rounded < 1024 || rounded >= vocab) continue;
    out.push_back(rounded);
  }
  return out;
}
}  // namespace

SearchSpace ce_space(const Problem& p) {
  SearchSpace s;
  s.params = {
      {"block_size", {1024, 2048, 4096, 8192, 16384}, [](KernelConfig& c, int64_t v) { c.block_size = int(v); }},
      {"threads", {128, 256, 512, 1024}, [](KernelConfig& c, int64_t v) { c.threads = int(v); }},
      {"v_chunk", segments(p.vocab), [](KernelConfig& c, int64_t v) { c.v_chunk = v; }},
      {"fused", p.mode == Mode::forward_backward ? std::vector<int64_t>{0, 1} : std::vector<int64_t>{0},
       [](KernelConfig& c, int64_t v) { c.fused = v != 0; }},
  };
  // A fused row split among more blocks than a cluster holds is refused by
  // validate_config, which the backends' checks run.
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
