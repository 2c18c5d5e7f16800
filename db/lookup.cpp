#include "lookup.hpp"

#include <cmath>

namespace celtune::db {

const char* to_string(Tier t) {
  switch (t) {
    case Tier::exact: return "exact";
    case Tier::nearest: return "nearest";
    case Tier::same_arch: return "same-arch";
  }
  return "?";
}

LookupResult lookup(const Store& s, const DeviceInfo& device, const Problem& p, const std::string& kernel_hash) {
  LookupResult r;
  // Candidates share everything but the token count (and maybe the device).
  const auto rows = s.best_for_shape(p);
  const BestEntry* best[3] = {nullptr, nullptr, nullptr};
  double best_dist[3] = {INFINITY, INFINITY, INFINITY};
  for (const BestEntry& e : rows) {
    if (e.problem.with_tokens(p.tokens) != p) continue;  // other loss options
    const bool same_device = e.device.name == device.name && e.device.arch == device.arch;
    const bool same_arch = e.device.arch == device.arch;
    if (!same_device && !same_arch) continue;
    if (e.kernel_hash != kernel_hash) {
      r.skipped.push_back(e.device.name + " " + e.problem.key() + ": kernel source hash " + e.kernel_hash +
                          " is not this build's " + kernel_hash);
      continue;
    }
    if (!e.config.gemm_algos.empty() && e.config.gemm_algos_cublaslt != device.cublaslt_version) {
      r.skipped.push_back(e.device.name + " " + e.problem.key() + ": tuned cuBLASLt algorithms for version " +
                          std::to_string(e.config.gemm_algos_cublaslt) + ", this is " +
                          std::to_string(device.cublaslt_version));
      continue;
    }
    const double dist = std::fabs(std::log(static_cast<double>(e.problem.tokens) / static_cast<double>(p.tokens)));
    const int tier = same_device ? (dist == 0 ? 0 : 1) : 2;
    if (dist < best_dist[tier]) best_dist[tier] = dist, best[tier] = &e;
  }
  for (int t = 0; t < 3; ++t)
    if (best[t]) {
      r.hit = LookupHit{static_cast<Tier>(t), *best[t]};
      break;
    }
  return r;
}

}  // namespace celtune::db
