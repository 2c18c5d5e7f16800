// Runtime lookup of a stored best config, in tiers (db layer: SQL only, no CUDA):
//   exact      this device, this problem key
//   nearest    this device, same problem but the token count nearest in log distance,
//              or the same token count with another ignore_index value or target
//              dtype (which change no kernel's work; a row that matches them wins
//              a tie)
//   same-arch  another device of the same sm architecture (exact key, else nearest)
// Entries measured with another kernel build (source hash) or, when they carry
// tuned cuBLASLt algorithms, another cuBLASLt version are skipped, and said so.
// A candidate the caller's `fits` refuses (a borrowed config whose scratch or
// alignment does not suit the target problem) is skipped with its reason, and
// the next candidate, then the next tier, is tried.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "records.hpp"
#include "store.hpp"

namespace celtune::db {

enum class Tier { exact, nearest, same_arch };
const char* to_string(Tier t);

struct LookupHit {
  Tier tier;
  BestEntry entry;
};

struct LookupResult {
  std::optional<LookupHit> hit;
  std::vector<std::string> skipped;  // entries passed over, with the reason
};

// Returns "" when entry's config may serve p at tier t, else the reason not.
using FitCheck = std::function<std::string(const BestEntry& entry, Tier t, const Problem& p)>;

LookupResult lookup(const Store& s, const DeviceInfo& device, const Problem& p, const std::string& kernel_hash,
                    const FitCheck& fits = {});

}  // namespace celtune::db
