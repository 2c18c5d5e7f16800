#include "resolve.hpp"

#include <dlfcn.h>

#include <cstdlib>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "celtune/celtune.h"
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

std::string find_database(const std::string& explicit_path) {
  if (!explicit_path.empty()) return explicit_path;
  if (const char* e = std::getenv("CELTUNE_DB"); e && *e) return e;
  // The shipped database, installed beside the library that holds this code.
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&celtune_version), &info) && info.dli_fname) {
    const auto beside = std::filesystem::path(info.dli_fname).parent_path() / "celtune.sqlite";
    std::error_code ec;
    if (std::filesystem::exists(beside, ec)) return beside.string();
  }
  return "";
}

Resolver::Resolver(std::string db_path, DeviceInfo device, std::string kernel_hash, std::ostream& warn,
                   std::function<bool(const Problem&, const KernelConfig&)> check)
    : db_path_(std::move(db_path)), device_(std::move(device)), hash_(std::move(kernel_hash)), warn_(warn),
      check_(std::move(check)) {
  const char* log = std::getenv("CELTUNE_LOG");
  log_ = log && *log && std::string(log) != "0";
}

Resolver::~Resolver() = default;

void Resolver::open_once() {
  if (opened_) return;
  opened_ = true;
  if (db_path_.empty()) return;
  std::error_code ec;
  if (!std::filesystem::exists(db_path_, ec)) {
    warn_ << "celtune: warning: database " << db_path_ << " does not exist; using built-in defaults\n";
    return;
  }
  try {
    store_ = std::make_unique<db::Store>(db_path_, db::Access::read_only);
  } catch (const Error& e) {
    warn_ << "celtune: warning: " << e.what() << "; using built-in defaults\n";
  }
}

bool Resolver::db_usable() {
  open_once();
  return store_ != nullptr;
}

Resolved Resolver::resolve(const Problem& p, const char* explicit_json) {
  if (explicit_json) {
    Resolved r{parse_config_json(explicit_json), Source::explicit_config, std::nullopt, {}, {}};
    validate_config(p, r.config);
    r.json = nlohmann::json(r.config).dump();
    return r;
  }
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
    return r;
  }
  const std::string key = p.key();
  if (auto it = cache_.find(key); it != cache_.end()) return it->second;
  Resolved r{default_config(p), Source::default_config, std::nullopt, {}, {}};
  open_once();
  if (store_) {
    try {
      db::LookupResult found = db::lookup(*store_, device_, p, hash_);
      r.skipped = std::move(found.skipped);
      if (found.hit) {
        KernelConfig c = found.hit->entry.config;
        bool ok = true;
        try {
          validate_config(p, c);
        } catch (const Error& e) {
          ok = false;
          r.skipped.push_back("stored config " + celtune::to_string(c) + " does not fit " + key + ": " + e.what());
        }
        if (ok && check_ && !check_(p, c)) {
          ok = false;
          r.skipped.push_back("stored config " + celtune::to_string(c) + " is not supported here");
        }
        if (ok) {
          r.config = c;
          r.entry = found.hit->entry;
          r.source = found.hit->tier == db::Tier::exact     ? Source::exact
                     : found.hit->tier == db::Tier::nearest ? Source::nearest
                                                            : Source::same_arch;
        }
      }
    } catch (const Error& e) {
      // A database that opened but fails to read (truncated pages, locked for
      // longer than the busy timeout): warn once, fall back for good.
      warn_ << "celtune: warning: " << e.what() << "; using built-in defaults\n";
      store_.reset();
    }
  }
  r.json = nlohmann::json(r.config).dump();
  if (log_) {
    warn_ << "celtune: " << key << " -> " << celtune::to_string(r.config) << " [" << to_string(r.source) << "]";
    if (r.entry) warn_ << " from " << r.entry->device.name << " N=" << r.entry->problem.tokens;
    for (const auto& s : r.skipped) warn_ << "\n  skipped: " << s;
    warn_ << '\n';
  }
  return cache_[key] = r;
}

}  // namespace celtune::runtime
