#include "measure.hpp"

#include <algorithm>
#include <cmath>

namespace celtune {

namespace {
double quantile_sorted(const std::vector<double>& s, double q) {
  if (s.empty()) return 0;
  const double pos = q * static_cast<double>(s.size() - 1);
  const auto lo = static_cast<size_t>(std::floor(pos));
  const auto hi = std::min(lo + 1, s.size() - 1);
  return s[lo] + (pos - static_cast<double>(lo)) * (s[hi] - s[lo]);
}
}  // namespace

double median_ci_fraction(std::vector<double> ms) {
  if (ms.size() < 6) return 1.0;
  std::sort(ms.begin(), ms.end());
  const double n = static_cast<double>(ms.size());
  const double half = 0.98 * std::sqrt(n);  // 1.96·√n / 2
  const auto lo = static_cast<size_t>(std::max(0.0, std::floor(n / 2 - half)));
  const auto hi = static_cast<size_t>(std::min(n - 1, std::ceil(n / 2 + half)));
  const double med = quantile_sorted(ms, 0.5);
  return med > 0 ? (ms[hi] - ms[lo]) / (2 * med) : 1.0;
}

std::vector<double> time_runs(Workload& w, const KernelConfig& c, const TimingPlan& plan) {
  return time_interleaved({TimedItem{&w, c}}, plan)[0];
}

std::vector<std::vector<double>> time_interleaved(const std::vector<TimedItem>& items, const TimingPlan& plan) {
  for (const TimedItem& t : items)
    for (int i = 0; i < plan.warmup; ++i) {
      t.w->flush_caches();
      t.w->run_timed(t.c);
    }
  std::vector<std::vector<double>> ms(items.size());
  auto settled = [&] {
    if (plan.ci_target <= 0) return true;
    return std::all_of(ms.begin(), ms.end(), [&](const auto& s) { return median_ci_fraction(s) <= plan.ci_target; });
  };
  for (int round = 0; round < plan.max_runs; ++round) {
    for (size_t i = 0; i < items.size(); ++i) {
      items[i].w->flush_caches();
      ms[i].push_back(items[i].w->run_timed(items[i].c));
    }
    if (round + 1 >= plan.min_runs && settled()) break;
  }
  return ms;
}

db::Stats summarize(std::vector<double> ms) {
  std::sort(ms.begin(), ms.end());
  db::Stats s;
  s.samples = static_cast<int64_t>(ms.size());
  s.median_ms = quantile_sorted(ms, 0.5);
  s.p20_ms = quantile_sorted(ms, 0.2);
  s.p80_ms = quantile_sorted(ms, 0.8);
  s.spread = s.median_ms > 0 ? (s.p80_ms - s.p20_ms) / s.median_ms : 0;
  return s;
}

}  // namespace celtune
