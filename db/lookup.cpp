#include "lookup.hpp"

#include <algorithm>
#include <cmath>
#include <tuple>

namespace celtune::db {

const char* to_string(Tier t) {
  switch (t) {
    case Tier::exact: return "exact";
    case Tier::nearest: return "nearest";
    case Tier::same_arch: return "same-arch";
  }
  return "?";
}

LookupResult lookup(const Store& s, const DeviceInfo& device, const Problem& p, const std::string& kernel_hash,
                    const FitCheck& fits) {
  LookupResult r;
  // Candidates share everything but the token count (and maybe the device).
  const auto rows = s.best_for_shape(p);
  struct Candidate {
    int tier;
    double dist;
    bool other_targets;  // another ignore_index or target dtype
    const BestEntry* entry;
  };
  std::vector<Candidate> cands;
  const std::string key = p.key();
  for (const BestEntry& e : rows) {
    // By key, not by ==: a C API problem's float options equal the CLI's
    // doubles only in their canonical spelling. The ignore_index value and the
    // target dtype change no kernel's work, so a row that differs only there
    // serves too (after any that match): a padding id as ignore_index (which
    // celtune.torch maps to the dtype's minimum) or int32 targets found no
    // tuned row at all.
    Problem as_ours = e.problem.with_tokens(p.tokens);
    const bool other_targets =
        as_ours.loss.ignore_index != p.loss.ignore_index || as_ours.target_type != p.target_type;
    as_ours.loss.ignore_index = p.loss.ignore_index, as_ours.target_type = p.target_type;
    if (as_ours.key() != key) continue;  // other loss options
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
    // Exact means this very key; a row for other targets is at best nearest.
    cands.push_back({same_device ? (dist == 0 && !other_targets ? 0 : 1) : 2, dist, other_targets, &e});
  }
  // Tier first, then the nearest token count, then matching targets; stable keeps
  // the store's order on ties.
  std::stable_sort(cands.begin(), cands.end(), [](const Candidate& a, const Candidate& b) {
    return std::tie(a.tier, a.dist, a.other_targets) < std::tie(b.tier, b.dist, b.other_targets);
  });
  for (const Candidate& c : cands) {
    const auto tier = static_cast<Tier>(c.tier);
    if (fits) {
      if (std::string why = fits(*c.entry, tier, p); !why.empty()) {
        r.skipped.push_back(c.entry->device.name + " " + c.entry->problem.key() + " (" + to_string(tier) +
                            "): " + why);
        continue;
      }
    }
    r.hit = LookupHit{tier, *c.entry};
    break;
  }
  return r;
}

}  // namespace celtune::db
