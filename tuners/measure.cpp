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
  for (int i = 0; i < plan.warmup; ++i) {
    w.flush_caches();
    w.run_timed(c);
  }
  std::vector<double> ms;
  while (static_cast<int>(ms.size()) < plan.max_runs) {
    w.flush_caches();
    ms.push_back(w.run_timed(c));
    if (static_cast<int>(ms.size()) >= plan.min_runs &&
        (plan.ci_target <= 0 || median_ci_fraction(ms) <= plan.ci_target))
      break;
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
