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

// Coordinate descent with random restarts. From the current point, try every
// value of one parameter with the others held, move to the best, go on to the
// next parameter; stop when a whole sweep improves nothing, then restart from
// the best unexplored candidate of a random sample. Tuning surfaces here are
// nearly separable (v_chunk/row_chunk set the GEMM efficiency, block_size and
// threads the CE kernel's), which is what coordinate descent exploits.
void guided(const SearchSpace& space, const std::vector<Candidate>& cands, const EvalFn& eval, size_t budget,
            size_t start, uint64_t seed) {
  std::map<std::vector<size_t>, size_t> at;
  for (size_t i = 0; i < cands.size(); ++i) at[cands[i].index] = i;
  std::set<size_t> seen;
  auto evaluate = [&](size_t i) {
    seen.insert(i);
    return eval(i);
  };
  Rng rng(seed);
  size_t cur = start;
  double cur_t = evaluate(cur);
  double best_t = cur_t;
  int restarts = 0;
  while (seen.size() < budget) {
    bool improved = false;
    for (size_t k = 0; k < space.params.size() && seen.size() < budget; ++k) {
      size_t best_i = cur;
      double best_k = cur_t;
      for (size_t v = 0; v < space.params[k].values.size() && seen.size() < budget; ++v) {
        auto idx = cands[cur].index;
        idx[k] = v;
        auto it = at.find(idx);
        if (it == at.end() || it->second == cur) continue;
        const double t = evaluate(it->second);
        if (t < best_k) best_k = t, best_i = it->second;
      }
      if (best_i != cur) cur = best_i, cur_t = best_k, improved = true;
    }
    best_t = std::min(best_t, cur_t);
    if (improved) continue;
    // Converged: restart (at most three times) from a random unseen candidate.
    if (++restarts > 3 || seen.size() >= cands.size()) break;
    std::vector<size_t> unseen;
    for (size_t i = 0; i < cands.size(); ++i)
      if (!seen.count(i)) unseen.push_back(i);
    cur = unseen[static_cast<size_t>(rng.below(static_cast<int64_t>(unseen.size())))];
    cur_t = evaluate(cur);
  }
  (void)best_t;
}

}  // namespace

void run_strategy(Strategy s, const SearchSpace& space, const std::vector<Candidate>& cands, const EvalFn& eval,
                  size_t budget, size_t start, uint64_t seed) {
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
      guided(space, cands, eval, budget, std::min(start, cands.size() - 1), seed);
      return;
  }
}

}  // namespace celtune
