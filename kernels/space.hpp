// Search spaces: each kernel family declares its tunable parameters, their
// values and its constraints once, next to its kernels (ce/space.cpp,
// flce/space.cpp). The tuner only enumerates. Plain C++: the CPU backend and CI
// tune with the same spaces.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "model/config.hpp"
#include "model/problem.hpp"

namespace celtune {

struct SpaceParam {
  std::string name;
  std::vector<int64_t> values;  // 0 for v_chunk/row_chunk means "all of V / N"
  void (*set)(KernelConfig&, int64_t);
};

// Device limits a space's constraints read (filled by the backend).
struct SpaceLimits {
  size_t max_scratch = SIZE_MAX;  // --max-scratch
  std::function<size_t(const Problem&, const KernelConfig&)> scratch_bytes;
  std::function<bool(const Problem&, const KernelConfig&, std::string*)> supported;  // the backend's check()
};

struct SearchSpace {
  std::vector<SpaceParam> params;
  // Family-specific constraints beyond the backend's (e.g. block_size ≤ v_chunk).
  std::function<bool(const Problem&, const KernelConfig&, std::string*)> constraint;
  // Configs guided search measures right after its start (the built-in
  // default), where they are in the grid: points that single-parameter moves
  // from the default would reach only late in a small budget, such as the other
  // implementation's counterpart of the default.
  std::vector<KernelConfig> seeds;

  // Builds the config at grid point `index` (one value index per parameter).
  KernelConfig at(const std::vector<size_t>& index) const;
};

// A grid point and its config.
struct Candidate {
  std::vector<size_t> index;
  KernelConfig config;
};

// Forward flce's fused statistics GEMM (impl fused, no tile) with row chunks
// whose X stays in L2 (flce/space.cpp says why); a seed of the flce space.
KernelConfig flce_fused_forward(const Problem& p);

// Forward+backward flce on the fused path with the default's chunks, within the
// same scratch budget (partials included); a seed of the flce space.
KernelConfig flce_fused_forward_backward(const Problem& p, size_t budget = kDefaultScratchBudget);

// The ce family's fused path where it is the device default (sm_90: clusters and
// bulk copies): forward+backward where a row fits one or two segments of 64 KiB
// of shared memory, or up to kCeMaxClusterBlocks of them at kCeOneLaunchTokens
// rows or fewer; forward at kCeOneLaunchTokens rows or fewer (one launch).
// nullopt elsewhere.
std::optional<KernelConfig> ce_fused_default(const Problem& p);

// The ce family's fused path with each row spread over more blocks than a
// cluster holds (tiles of 2048 or 4096 columns, one a block) where a call has a
// few rows: device_default tries it before ce_fused_default, and takes it where
// the device's check() accepts it (the grid resident at once). nullopt elsewhere.
std::optional<KernelConfig> ce_spread_default(const Problem& p);

// The built-in default on a device: default_config(p), except where the fused
// path measured faster and the device runs it (`runs`), in 16-bit: forward flce
// takes flce_fused_forward (the ping-pong logits GEMM; Llama-3-8B N=4096 on the
// H100: 1.01× one GEMM, timed in rounds; Gemma-2-2B, GPT-2 likewise ahead), and
// forward+backward at H ≥ 768 takes flce_fused_forward_backward where its row
// chunks are whole rows or 512 or more (space.cpp gives the measurements); ce takes ce_fused_default. The
// runtime, bench and tune all start from this. `budget` bounds flce's scratch
// (the runtime's CELTUNE_MAX_SCRATCH, tune's --max-scratch where smaller); the
// forward's fused default keeps to 64 MiB whatever it is.
KernelConfig device_default(const Problem& p, const std::function<bool(const KernelConfig&)>& runs,
                            size_t budget = kDefaultScratchBudget);

SearchSpace ce_space(const Problem& p);
SearchSpace flce_space(const Problem& p);
SearchSpace space_for(const Problem& p);

// Every valid candidate of the space for a problem under the limits, in grid
// order. `rejected` (optional) counts what the constraints removed.
std::vector<Candidate> enumerate(const SearchSpace& s, const Problem& p, const SpaceLimits& limits,
                                 size_t* rejected = nullptr);

}  // namespace celtune
