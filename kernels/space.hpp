// Search spaces: each kernel family declares its tunable parameters, their
// values and its constraints once, next to its kernels (ce/space.cpp,
// flce/space.cpp). The tuner only enumerates. Plain C++: the CPU backend and CI
// tune with the same spaces.
#pragma once

#include <cstdint>
#include <functional>
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

  // Builds the config at grid point `index` (one value index per parameter).
  KernelConfig at(const std::vector<size_t>& index) const;
};

// A grid point and its config.
struct Candidate {
  std::vector<size_t> index;
  KernelConfig config;
};

SearchSpace ce_space(const Problem& p);
SearchSpace flce_space(const Problem& p);
SearchSpace space_for(const Problem& p);

// Every valid candidate of the space for a problem under the limits, in grid
// order. `rejected` (optional) counts what the constraints removed.
std::vector<Candidate> enumerate(const SearchSpace& s, const Problem& p, const SpaceLimits& limits,
                                 size_t* rejected = nullptr);

}  // namespace celtune
