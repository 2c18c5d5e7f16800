#include "compare.hpp"

#include <cmath>

#include <nlohmann/json.hpp>

namespace celtune {

template <typename Got>
ErrorStats compare(const Got* got, const double* ref, size_t n, double atol, double rtol, size_t keep) {
  ErrorStats s;
  s.count = static_cast<int64_t>(n);
  double diff2 = 0, ref2 = 0, got2 = 0;
  for (size_t i = 0; i < n; ++i) {
    const double g = static_cast<double>(got[i]), r = ref[i];
    const double a = std::fabs(g - r);
    const bool bad = std::isfinite(r) && !std::isfinite(g);
    if (bad) ++s.nonfinite;
    if (std::isfinite(r)) s.ref_max = std::max(s.ref_max, std::fabs(r));
    if (std::isfinite(a)) {
      s.max_abs = std::max(s.max_abs, a);
      s.max_rel = std::max(s.max_rel, a / std::max(std::fabs(r), 1e-30));
      diff2 += a * a;
    }
    ref2 += std::isfinite(r) ? r * r : 0.0;
    got2 += std::isfinite(g) ? g * g : 0.0;
    // NaN compares false, so the negated form counts NaN/Inf as mismatches.
    const bool within = std::isnan(r) ? std::isnan(g) : (a <= atol + rtol * std::fabs(r));
    if (!within || bad) {
      ++s.mismatches;
      if (s.first.size() < keep) s.first.push_back({static_cast<int64_t>(i), g, r});
    }
  }
  s.rel_l2 = ref2 > 0 ? std::sqrt(diff2 / ref2) : std::sqrt(got2);
  return s;
}

template ErrorStats compare<float>(const float*, const double*, size_t, double, double, size_t);
template ErrorStats compare<double>(const double*, const double*, size_t, double, double, size_t);

void to_json(nlohmann::json& j, const ErrorStats& s) {
  nlohmann::json first = nlohmann::json::array();
  for (const auto& m : s.first) first.push_back({{"index", m.index}, {"got", m.got}, {"ref", m.ref}});
  j = nlohmann::json{{"count", s.count},           {"max_abs", s.max_abs},
                     {"max_rel", s.max_rel},       {"rel_l2", s.rel_l2},
                     {"mismatches", s.mismatches}, {"nonfinite", s.nonfinite},
                     {"first_mismatches", first}};
}

}  // namespace celtune
