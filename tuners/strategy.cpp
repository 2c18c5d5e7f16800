#include "strategy.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <set>

#include "model/host_case.hpp"

namespace celtune {
namespace {

// Sample, then coordinate descent. A quarter of the budget goes to candidates
// spread over the grid (a seeded random sample, plus the start); from the best of
// them, try every value of one parameter with the others held, move to the best,
// go on to the next parameter, until a whole sweep improves nothing; then descend
// again from the next best sampled point. The sample finds regions that single-
// parameter moves cannot reach (on the H100, forward-only flce's fastest configs
// had row_chunk = N and v_chunk < V, unreachable from the one-pass default because
// the step between them breaks the scratch limit); the descent exploits the
// near-separable rest (chunk sizes set the GEMMs' efficiency, block_size and
// threads the CE kernel's).
void guided(const SearchSpace& space, const std::vector<Candidate>& cands, const EvalFn& eval, size_t budget,
            size_t start, uint64_t seed, const std::vector<size_t>& also) {
  std::map<std::vector<size_t>, size_t> at;
  for (size_t i = 0; i < cands.size(); ++i) at[cands[i].index] = i;
  std::map<size_t, double> seen;
  auto evaluate = [&](size_t i) {
    if (auto it = seen.find(i); it != seen.end()) return it->second;
    return seen[i] = eval(i);
  };
  Rng rng(seed);
  evaluate(start);
  for (size_t i : also)  // earlier winners, then the space's seeds
    if (i < cands.size() && seen.size() < budget) evaluate(i);
  std::vector<size_t> order(cands.size());
  std::iota(order.begin(), order.end(), 0);
  for (size_t i = order.size(); i > 1; --i)
    std::swap(order[i - 1], order[static_cast<size_t>(rng.below(static_cast<int64_t>(i)))]);
  const size_t sample = std::max<size_t>(budget / 4, seen.size());
  for (size_t k = 0; k < order.size() && seen.size() < sample; ++k) evaluate(order[k]);
  std::vector<std::pair<double, size_t>> seeds;
  for (const auto& [i, t] : seen) seeds.push_back({t, i});
  std::sort(seeds.begin(), seeds.end());
  for (const auto& [t0, from] : seeds) {
    if (seen.size() >= budget) break;
    size_t cur = from;
    double cur_t = t0;
    for (bool improved = true; improved && seen.size() < budget;) {
      improved = false;
      for (size_t k = 0; k < space.params.size() && seen.size() < budget; ++k) {
        size_t best_i = cur;
        double best_t = cur_t;
        for (size_t v = 0; v < space.params[k].values.size() && seen.size() < budget; ++v) {
          auto idx = cands[cur].index;
          idx[k] = v;
          auto it = at.find(idx);
          if (it == at.end() || it->second == cur) continue;
          const double t = evaluate(it->second);
          if (t < best_t) best_t = t, best_i = it->second;
        }
        if (best_i != cur) cur = best_i, cur_t = best_t, improved = true;
      }
    }
  }
}

}  // namespace

void run_strategy(Strategy s, const SearchSpace& space, const std::vector<Candidate>& cands, const EvalFn& eval,
                  size_t budget, size_t start, uint64_t seed, const std::vector<size_t>& seeds) {
  if (cands.empty()) return;
  budget = std::min(budget, cands.size());
  switch (s) {
    case Strategy::exhaustive:
      for (size_t i = 0; i < cands.size(); ++i) eval(i);
      return;
    case Strategy::random: {
      std::vector<size_t> order(cands.size());
      std::iota(order.begin(), order.end(), 0);
      Rng rng(seed);
      for (size_t i = order.size(); i > 1; --i)
        std::swap(order[i - 1], order[static_cast<size_t>(rng.below(static_cast<int64_t>(i)))]);
      for (size_t i = 0; i < budget; ++i) eval(order[i]);
      return;
    }
    case Strategy::guided:
      guided(space, cands, eval, budget, std::min(start, cands.size() - 1), seed, seeds);
      return;
  }
}

}  // namespace celtune
