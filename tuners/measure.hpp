// The one shared timer: warm-up, L2 flush before every timed run, median and
// spread. bench uses it now; tune and the tests use the same code.
#pragma once

#include <vector>

#include "db/records.hpp"
#include "kernels/backend.hpp"

namespace celtune {

struct TimingPlan {
  int warmup = 3;
  int min_runs = 20;
  int max_runs = 200;
  // Keep sampling until the 95% confidence interval of the median is within this
  // fraction of it, or max_runs is reached (0: exactly min_runs).
  double ci_target = 0.01;
};

// Times `c` on `w`; every sample is preceded by a cache flush (outside the timed region).
std::vector<double> time_runs(Workload& w, const KernelConfig& c, const TimingPlan& plan);

// What time_interleaved times: a config on a workload.
struct TimedItem {
  Workload* w;
  KernelConfig c;
};
// Times several items in rounds, one run of each a round (after each one's
// warm-up), each run after a cache flush; samples per item, in the items' order.
// Rounds continue from min_runs until every item's median meets ci_target, up to
// max_runs. Both GPUs run these kernels at their power limit and the clock drifts
// over a run; items timed in rounds see the same drift, so their ratios hold where
// blocks of back-to-back runs did not (docs/results.md, 2026-11-24).
std::vector<std::vector<double>> time_interleaved(const std::vector<TimedItem>& items, const TimingPlan& plan);

// Median, p20, p80, count and spread of samples in milliseconds.
db::Stats summarize(std::vector<double> ms);

// Half-width of the distribution-free 95% confidence interval of the median,
// relative to the median (order statistics at n/2 ± 0.98·√n).
double median_ci_fraction(std::vector<double> ms);

}  // namespace celtune
