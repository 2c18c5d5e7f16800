// Search strategies over a family's enumerated candidates. A strategy only
// decides which candidate to evaluate next; evaluation (gate, timing, storage,
// reuse of stored measurements) belongs to the tune loop, which memoises it.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kernels/space.hpp"

namespace celtune {

enum class Strategy { exhaustive, random, guided };

// Median milliseconds of candidate i, or +inf when it failed the gate or ran.
using EvalFn = std::function<double(size_t)>;

// Evaluates candidates in the strategy's order until it is done or `budget`
// distinct candidates have been evaluated. `start` is where guided search begins
// (the default config's candidate when it is in the space); guided measures the
// candidates in `seeds` next (the space's seeds found in the grid), before its sample.
void run_strategy(Strategy s, const SearchSpace& space, const std::vector<Candidate>& cands, const EvalFn& eval,
                  size_t budget, size_t start, uint64_t seed, const std::vector<size_t>& seeds = {});

}  // namespace celtune
