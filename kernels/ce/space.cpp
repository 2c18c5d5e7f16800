// The ce family's search space: tile width, threads, how many blocks share a row
// (v_chunk: the segment one block folds; 0 = the whole row), and the fused variant
// (the row held on chip between the forward and gradient sweeps, by one block or
// by a cluster of blocks; in forward, one launch at a few rows).
#include <algorithm>

#include "kernels/space.hpp"

namespace celtune {

std::optional<KernelConfig> ce_fused_default(const Problem& p) {
  // Forward gains the launches it saves, at up to kCeOneLaunchTokens rows and
  // kForwardBytes of logits. Against the split statistics in three launches,
  // the one launch won up to 32 MiB on both GPUs (docs/results.md, thirty-first
  // session: V = 50257, N = 128, 0.017 / 0.015 ms against 0.022 / 0.021 on the
  // H100 / H200). Since the split statistics end the call in their own launch
  // (thirty-fourth session, H100), they win from 16 MiB (V = 32000, N = 256:
  // 0.017 against 0.019 ms; N = 512: 0.025 against 0.029; V = 50257, N = 256:
  // 0.022 against 0.024; V = 128256, N = 64: 0.018 against 0.020; V = 256000,
  // N = 64: 0.026 against 0.030), while at 4–6 MiB the one launch still does
  // (V = 32000 and 50257, N = 64: 0.012 and 0.014 against 0.013 and 0.016):
  // a block of the cluster waits for its copy before it folds.
  constexpr int64_t kForwardBytes = int64_t{14} << 20;
  const bool bwd = p.mode == Mode::forward_backward;
  if (!bwd && (p.tokens > kCeOneLaunchTokens || p.tokens * p.vocab * dtype_bytes(p.dtype) > kForwardBytes))
    return std::nullopt;
  // Segments held in shared memory: at most kSegBytes, so that three or more
  // blocks share an SM; a few rows split further so that ~kBlocks blocks run.
  constexpr int64_t kSegBytes = 64 * 1024, kBlocks = 256, kMinSegment = 4096;
  const int64_t bytes = dtype_bytes(p.dtype);
  auto seg_of = [&](int64_t splits) { return ce_segment(p.vocab, splits); };
  int64_t splits = 1;
  while (splits < kCeMaxClusterBlocks && seg_of(splits) * bytes > kSegBytes) ++splits;
  // Forward+backward holds the row: past kSegBytes a block an SM (fp32 at V =
  // 256000) is slower than reading the row twice. Forward only needs the launch.
  if (bwd && seg_of(splits) * bytes > kSegBytes) return std::nullopt;
  // Held on chip, the row is read once. Eight blocks a row (V = 256000 in bf16)
  // once lost to two passes on the H200 (1.580 / 12.49 ms against 1.567 / 12.08
  // at N = 4096 / 32768); since the blocks push their partials and the kernel
  // counts its shared-memory loops in 32 bits, fused leads on both GPUs: on the
  // H200 1.334 / 10.51 ms against 1.568 / 12.07, and the H100 ran it 13-15%
  // faster even before (docs/results.md, thirtieth session).
  while (splits < kCeMaxClusterBlocks && p.tokens * splits < kBlocks && seg_of(splits + 1) >= kMinSegment) ++splits;
  KernelConfig c = default_config(p);
  c.fused = true;
  c.block_size = 2048;
  c.threads = 256;
  c.v_chunk = seg_of(splits) < p.vocab ? seg_of(splits) : 0;
  if (c.block_size > c.v_chunk_for(p)) c.block_size = 1024;  // a vocabulary under 2048
  return c;
}

std::optional<KernelConfig> ce_spread_default(const Problem& p) {
  // Measured on the H100 (docs/results.md, sixteenth session; V = 32000, 50257,
  // 128256, 256000, both modes, against the cluster default): at 1 and 4 rows
  // 10–14 µs where the cluster kernel took 11–20; at 16 rows segments of 2048
  // (4096 where 2048 would make more than kSpreadBlocks blocks) were as fast or
  // faster (forward 11–13 µs against 14–15); at 64 rows and beyond slower
  // everywhere (forward 16–60 µs against 14–31), the GPU no longer waits on a
  // few rows' chain. kSpreadBlocks keeps the grid within what a GPU of ~100 SMs
  // holds at once at 57 registers a thread (4 blocks of 256 threads an SM).
  constexpr int64_t kSpreadBlocks = 512, kSpreadTokens = 16;
  if (p.tokens > kSpreadTokens) return std::nullopt;
  for (const int64_t seg : {int64_t{2048}, int64_t{4096}}) {
    const int64_t splits = (p.vocab + seg - 1) / seg;
    if (splits <= kCeMaxClusterBlocks) return std::nullopt;  // a cluster holds it
    if (p.tokens * splits > kSpreadBlocks) continue;
    KernelConfig c = default_config(p);
    c.fused = true;
    c.block_size = static_cast<int>(seg);
    c.threads = 256;
    c.v_chunk = seg;
    return c;
  }
  return std::nullopt;
}

namespace {
// Segments that split V into 2, 4, … 64 blocks of at least 1024 columns
// (ce_segment), and tiles of 1024, 2048 and 4096 columns where they make more segments than a
// cluster holds: a fused row spread over the GPU, one tile a block.
std::vector<int64_t> segments(int64_t vocab) {
  std::vector<int64_t> out{0};
  auto add = [&](int64_t seg) {
    if (seg < 1024 || seg >= vocab || std::find(out.begin(), out.end(), seg) != out.end()) return;
    out.push_back(seg);
  };
  for (int64_t s = 2; s <= 64; s *= 2) add(ce_segment(vocab, s));
  for (const int64_t seg : {1024, 2048, 4096})
    if ((vocab + seg - 1) / seg > kCeMaxClusterBlocks) add(seg);
  return out;
}
}  // namespace

SearchSpace ce_space(const Problem& p) {
  SearchSpace s;
  s.params = {
      {"block_size", {1024, 2048, 4096, 8192, 16384}, [](KernelConfig& c, int64_t v) { c.block_size = int(v); }},
      {"threads", {128, 256, 512, 1024}, [](KernelConfig& c, int64_t v) { c.threads = int(v); }},
      {"v_chunk", segments(p.vocab), [](KernelConfig& c, int64_t v) { c.v_chunk = v; }},
      {"fused", {0, 1}, [](KernelConfig& c, int64_t v) { c.fused = v != 0; }},
  };
  // A fused row split among more blocks than a cluster holds must be one tile a
  // block at a few rows: validate_config, which the backends' checks run, says so.
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
