// Config resolution for the runtime: explicit → CELTUNE_CONFIG → databases
// (exact, nearest, same-arch) → built-in default, cached per problem key. The
// databases are read through db::lookup, in order (explicit path, $CELTUNE_DB,
// the user's database, the shipped one), each opened read-only on first use;
// rows come from the first that has an entry that fits. Any failure to open or
// read one is one warning and the next, never an error.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "db/lookup.hpp"
#include "kernels/backend.hpp"
#include "model/config.hpp"
#include "model/device.hpp"
#include "model/problem.hpp"

namespace celtune::runtime {

enum class Source { explicit_config, env, exact, nearest, same_arch, default_config };
const char* to_string(Source s);

struct Resolved {
  KernelConfig config;
  Source source = Source::default_config;
  std::optional<db::BestEntry> entry;  // the database row it came from
  std::vector<std::string> skipped;    // database rows passed over, and why
  std::string json;                    // the config as JSON (filled once, for reporting)
  std::string database;                // the database the entry came from ("" if none)
};

// A database the runtime may read, and whether a missing file deserves a
// warning (a path the user named does; the user's own database need not exist).
struct DatabasePath {
  std::string path;
  bool named = true;
};

// The databases the runtime reads, in order: the explicit path, $CELTUNE_DB,
// the user's database (where `celtune tune` writes by default), celtune.sqlite
// beside libceltune. Named paths are kept even when missing (to warn once);
// the user's and the shipped database only when they exist.
std::vector<DatabasePath> find_databases(const std::string& explicit_path);

// What the device can run, from its backend. Both may be empty (no check).
struct DeviceChecks {
  // "" when the device can run the config for the problem, else why not
  // (compiled table, alignment, registers).
  std::function<std::string(const Problem&, const KernelConfig&)> supports;
  // Device scratch the config needs for the problem.
  std::function<size_t(const Problem&, const KernelConfig&)> scratch_bytes;
};
DeviceChecks backend_checks(std::shared_ptr<const Backend> backend);

class Resolver {
 public:
  // A stored config the device refuses, or a borrowed one whose scratch grows
  // past the budget at the target problem, is passed over with its reason and
  // the next candidate (next tier, next database) tried. Both constructors throw
  // Error(usage) for a malformed CELTUNE_MAX_SCRATCH or one below kMinScratchBudget.
  Resolver(std::vector<DatabasePath> dbs, DeviceInfo device, std::string kernel_hash, std::ostream& warn,
           DeviceChecks checks = {});
  // One database the caller named (tests, benchmarks).
  Resolver(std::string db_path, DeviceInfo device, std::string kernel_hash, std::ostream& warn,
           DeviceChecks checks = {});
  ~Resolver();

  // Throws Error(usage) for a malformed explicit or CELTUNE_CONFIG config.
  Resolved resolve(const Problem& p, const char* explicit_json);
  // A config from the call or CELTUNE_CONFIG is taken as given when it is
  // resolved: the kernel call refuses it if the device cannot run it. A report
  // of the resolution (lookup, celtune_*_config, Python's explain) checks it
  // here instead, so that it does not print as if it would run a config the
  // call refuses: Error(usage) naming `given` (the explicit config's origin,
  // e.g. "--config") or CELTUNE_CONFIG, the problem, the device and why.
  void check_given(const Problem& p, const Resolved& r, const std::string& given) const;
  // The databases in lookup order, and whether each opened.
  std::vector<std::pair<std::string, bool>> databases();

 private:
  struct Db {
    DatabasePath where;
    bool opened = false;
    std::unique_ptr<db::Store> store;
  };
  db::Store* open(Db& d);
  // "" when row e (from the database at db_path) serves p at tier t, else why
  // not. A row that breaks a rule for its own problem is damage (import never
  // stores one): it is also warned about once, as list and tune name it.
  std::string fits(const db::BestEntry& e, db::Tier t, const Problem& p, const std::string& db_path);
  void log(const Problem& p, const Resolved& r);
  std::vector<Db> dbs_;
  DeviceInfo device_;
  std::string hash_;
  std::ostream& warn_;
  DeviceChecks checks_;
  std::map<std::string, Resolved> cache_;
  std::map<std::string, bool> logged_;  // configs from the call or CELTUNE_CONFIG, logged once per problem
  std::set<std::string> damage_warned_;  // damaged rows already warned about
  bool log_ = false;
  int busy_ms_ = db::kDefaultBusyTimeoutMs;  // for every database it opens (read once)
  // CELTUNE_MAX_SCRATCH (read once): the built-in default keeps to it and a
  // stored row over it is passed over, in every tier. Unset: the default's
  // kDefaultScratchBudget, and only borrowed rows are bounded (fits()).
  std::optional<size_t> max_scratch_;
};

}  // namespace celtune::runtime
