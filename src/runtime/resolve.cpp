#include "resolve.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "celtune/celtune.h"
#include "db/paths.hpp"
#include "db/store.hpp"
#include "kernels/space.hpp"
#include "model/error.hpp"

namespace celtune::runtime {

const char* to_string(Source s) {
  switch (s) {
    case Source::explicit_config: return "explicit";
    case Source::env: return "env";
    case Source::exact: return "exact";
    case Source::nearest: return "nearest";
    case Source::same_arch: return "same-arch";
    case Source::default_config: return "default";
  }
  return "?";
}

std::vector<DatabasePath> find_databases(const std::string& explicit_path) {
  std::vector<DatabasePath> out;
  auto exists = [](const std::string& p) {
    std::error_code ec;
    return !p.empty() && std::filesystem::exists(p, ec);
  };
  auto add = [&](std::string p, bool named) {
    for (const auto& d : out)
      if (d.path == p) return;  // the same file named twice is read once
    out.push_back({std::move(p), named});
  };
  if (!explicit_path.empty()) add(explicit_path, true);
  if (const char* e = std::getenv("CELTUNE_DB"); e && *e) add(e, true);
  // Where `celtune tune` writes without --db: a user's tuning is found.
  if (const std::string user = db::user_database_path(); exists(user)) add(user, false);
  // The shipped database, installed beside the library that holds this code.
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&celtune_version), &info) && info.dli_fname) {
    const auto beside = (std::filesystem::path(info.dli_fname).parent_path() / "celtune.sqlite").string();
    if (exists(beside)) add(beside, false);
  }
  return out;
}

DeviceChecks backend_checks(std::shared_ptr<const Backend> backend) {
  DeviceChecks c;
  c.supports = [backend](const Problem& p, const KernelConfig& k) {
    std::string why;
    return backend->supports(p, k, &why) ? std::string() : why;
  };
  c.scratch_bytes = [backend](const Problem& p, const KernelConfig& k) { return backend->scratch_bytes(p, k); };
  return c;
}

Resolver::Resolver(std::vector<DatabasePath> dbs, DeviceInfo device, std::string kernel_hash, std::ostream& warn,
                   DeviceChecks checks)
    : device_(std::move(device)), hash_(std::move(kernel_hash)), warn_(warn), checks_(std::move(checks)) {
  for (auto& d : dbs) dbs_.push_back(Db{std::move(d), false, nullptr});
  const char* log = std::getenv("CELTUNE_LOG");
  log_ = log && *log && std::string(log) != "0";
  // A malformed timeout matters only while a database is locked: one warning and
  // the default, where each database used to refuse to open (a warning each) and
  // every tuned config was lost to the defaults.
  try {
    busy_ms_ = db::busy_timeout_ms();
  } catch (const Error& e) {
    write_warning(warn_, std::string(e.what()) + "; waiting the default " + std::to_string(db::kDefaultBusyTimeoutMs) +
                             " ms for a locked database");
  }
  max_scratch_ = env_max_scratch();  // refused outright when malformed, not warned about
}

Resolver::Resolver(std::string db_path, DeviceInfo device, std::string kernel_hash, std::ostream& warn,
                   DeviceChecks checks)
    : Resolver(db_path.empty() ? std::vector<DatabasePath>{} : std::vector<DatabasePath>{{std::move(db_path), true}},
               std::move(device), std::move(kernel_hash), warn, std::move(checks)) {}

Resolver::~Resolver() = default;

db::Store* Resolver::open(Db& d) {
  if (d.opened) return d.store.get();
  d.opened = true;
  std::error_code ec;
  if (!std::filesystem::exists(d.where.path, ec)) {
    if (d.where.named)
      write_warning(warn_, "database " + d.where.path + " does not exist; using the next source");
    return nullptr;
  }
  try {
    d.store = std::make_unique<db::Store>(d.where.path, db::Access::read_only, busy_ms_);
  } catch (const Error& e) {
    write_warning(warn_, std::string(e.what()) + "; using the next source");
  }
  return d.store.get();
}

std::vector<std::pair<std::string, bool>> Resolver::databases() {
  std::vector<std::pair<std::string, bool>> out;
  for (auto& d : dbs_) out.emplace_back(d.where.path, open(d) != nullptr);
  return out;
}

void Resolver::check_given(const Problem& p, const Resolved& r, const std::string& given) const {
  if (r.source != Source::explicit_config && r.source != Source::env) return;
  if (!checks_.supports) return;
  if (const std::string why = checks_.supports(p, r.config); !why.empty())
    fail_usage((r.source == Source::env ? std::string("CELTUNE_CONFIG") : given) + " cannot run " + p.key() + " on " +
               device_.name + ": " + why);
}

std::string Resolver::fits(const db::BestEntry& e, db::Tier t, const Problem& p, const std::string& db_path) {
  const KernelConfig& c = e.config;
  // Damage first: a row edited by hand or corrupted was skipped in silence
  // unless CELTUNE_LOG=1 (the C API probe), where list and tune warn.
  if (const std::string rule = db::broken_record(e); !rule.empty()) {
    if (damage_warned_.insert(db_path + '\n' + e.device.name + '\n' + e.problem.key()).second)
      write_warning(warn_, db::broken_best_note(db_path, e) + "; skipped, using the next source");
    return "the stored row is damaged: " + rule;
  }
  if (const std::string rule = db::broken_rule(p, c); !rule.empty())
    return "config " + celtune::to_string(c) + " does not fit " + p.key() + ": " + rule;
  if (checks_.supports)
    if (std::string why = checks_.supports(p, c); !why.empty())
      return "config " + celtune::to_string(c) + " is not supported here: " + why;
  if (max_scratch_ && checks_.scratch_bytes) {
    if (const size_t need = checks_.scratch_bytes(p, c); need > *max_scratch_)
      return "config " + celtune::to_string(c) + " at N=" + std::to_string(p.tokens) + " " +
             scratch_over_budget(need, *max_scratch_);
  } else if (t != db::Tier::exact && checks_.scratch_bytes) {
    // A borrowed config (nearest and same-arch tiers) must fit the larger of
    // kDefaultScratchBudget and the scratch it took where it was tuned, since the
    // tuner stored it within the budget it was given. N=64's one-row-chunk config
    // at N=10^6 would need GBs.
    const size_t need = checks_.scratch_bytes(p, c);
    const size_t budget = std::max(kDefaultScratchBudget, checks_.scratch_bytes(e.problem, c));
    if (need > budget)
      return "borrowed config " + celtune::to_string(c) + " needs " + std::to_string(need >> 20) + " MiB of scratch at N=" +
             std::to_string(p.tokens) + ", over the " + std::to_string(budget >> 20) + " MiB budget";
  }
  return "";
}

void Resolver::log(const Problem& p, const Resolved& r) {
  std::string line = p.key() + " -> " + celtune::to_string(r.config) + " [" + to_string(r.source) + "]";
  if (r.entry) line += " from " + r.entry->device.name + " N=" + std::to_string(r.entry->problem.tokens) + " in " + r.database;
  for (const auto& s : r.skipped) line += "\n  skipped: " + s;
  warn_ << "celtune: " << printable_message(line) << '\n';
}

Resolved Resolver::resolve(const Problem& p, const char* explicit_json) {
  auto logged_once = [&](const Resolved& r) {
    // Configs from the call or the environment are not cached (they may change
    // between calls), but CELTUNE_LOG=1 still says once per problem and config
    // what ran and why.
    if (log_ && !logged_.count(p.key() + r.json)) {
      logged_[p.key() + r.json] = true;
      log(p, r);
    }
    return r;
  };
  if (explicit_json) {
    Resolved r{parse_config_json(explicit_json), Source::explicit_config, std::nullopt, {}, {}, {}};
    validate_config(p, r.config);
    r.json = nlohmann::json(r.config).dump();
    return logged_once(r);
  }
  // A malformed CELTUNE_CONFIG fails every call (Error(usage)) rather than
  // falling back: the user asked for a config and must not silently get another.
  if (const char* env = std::getenv("CELTUNE_CONFIG"); env && *env) {
    Resolved r;
    try {
      r.config = parse_config_json(env);
      validate_config(p, r.config);
    } catch (const Error& e) {
      fail_usage(std::string("CELTUNE_CONFIG: ") + e.what());
    }
    r.source = Source::env;
    r.json = nlohmann::json(r.config).dump();
    return logged_once(r);
  }
  const std::string key = p.key();
  if (auto it = cache_.find(key); it != cache_.end()) return it->second;
  // The built-in default for this device (the fused forward where it runs).
  auto runs = [this, &p](const KernelConfig& c) { return checks_.supports && checks_.supports(p, c).empty(); };
  Resolved r{device_default(p, runs, max_scratch_.value_or(kDefaultScratchBudget)), Source::default_config,
             std::nullopt, {}, {}, {}};
  // Rows of this device, from any database, come before a row borrowed from
  // another device of its arch: a CELTUNE_DB holding only another GPU's rows hid
  // the shipped file's exact ones (the README probe). Among this device's rows
  // the first database that has one answers, as the order promises.
  std::optional<db::LookupHit> hit, borrowed;
  std::string hit_from, borrowed_from;
  for (Db& d : dbs_) {
    db::Store* store = open(d);
    if (!store) continue;
    auto fits = [this, &d](const db::BestEntry& e, db::Tier t, const Problem& q) {
      return this->fits(e, t, q, d.where.path);
    };
    try {
      db::LookupResult found = db::lookup(*store, device_, p, hash_, fits);
      for (auto& s : found.skipped) r.skipped.push_back(d.where.path + ": " + s);
      if (found.hit && found.hit->tier != db::Tier::same_arch) {
        hit = std::move(found.hit), hit_from = d.where.path;
        break;
      }
      if (found.hit && !borrowed) borrowed = std::move(found.hit), borrowed_from = d.where.path;
    } catch (const Error& e) {
      // A database that opened but fails to read (truncated pages, locked for
      // longer than the busy timeout): warn once, skip it for good.
      write_warning(warn_, std::string(e.what()) + "; using the next source");
      d.store.reset();
    }
  }
  if (!hit && borrowed) hit = std::move(borrowed), hit_from = borrowed_from;
  // The rule keeps the default's tile within the budget by the GPU's layout, but
  // the row state grows with N (16 bytes a token), and the CPU backend holds its
  // tile in fp32: there the default can need more. It runs all the same (no
  // config would do better on a budget the rule cannot meet), and says so once
  // a problem (the result is cached).
  if (!hit && max_scratch_ && checks_.scratch_bytes)
    if (const size_t need = checks_.scratch_bytes(p, r.config); need > *max_scratch_)
      write_warning(warn_, "the built-in default for " + key + " (" + celtune::to_string(r.config) + ") " +
                               scratch_over_budget(need, *max_scratch_) + " here; running it");
  if (hit) {
    r.config = hit->entry.config;
    r.entry = std::move(hit->entry);
    r.database = hit_from;
    r.source = hit->tier == db::Tier::exact     ? Source::exact
               : hit->tier == db::Tier::nearest ? Source::nearest
                                                : Source::same_arch;
  }
  r.json = nlohmann::json(r.config).dump();
  if (log_) log(p, r);
  return cache_[key] = r;
}

}  // namespace celtune::runtime
