// Config resolution for the runtime: explicit → CELTUNE_CONFIG → database
// (exact, nearest, same-arch) → built-in default, cached per problem key. The
// database is reached through db::lookup, opened read-only on first use; any
// failure to open or read it is one warning and the defaults, never an error.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "db/lookup.hpp"
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
};

// The database the runtime reads: the explicit path, else $CELTUNE_DB, else
// celtune.sqlite beside libceltune; "" when none of them exists.
std::string find_database(const std::string& explicit_path);

class Resolver {
 public:
  // `check` says whether the device can run a config (the backend's check);
  // a stored config it refuses is passed over like a mismatched one.
  Resolver(std::string db_path, DeviceInfo device, std::string kernel_hash, std::ostream& warn,
           std::function<bool(const Problem&, const KernelConfig&)> check = {});
  ~Resolver();

  // Throws Error(usage) for a malformed explicit or CELTUNE_CONFIG config.
  Resolved resolve(const Problem& p, const char* explicit_json);
  const std::string& db_path() const { return db_path_; }
  bool db_usable();

 private:
  void open_once();
  std::string db_path_;
  DeviceInfo device_;
  std::string hash_;
  std::ostream& warn_;
  std::function<bool(const Problem&, const KernelConfig&)> check_;
  bool opened_ = false;
  std::unique_ptr<db::Store> store_;
  std::map<std::string, Resolved> cache_;
  bool log_ = false;
};

}  // namespace celtune::runtime
