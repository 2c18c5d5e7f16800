#include "records.hpp"

#include <chrono>
#include <ctime>

#include <nlohmann/json.hpp>

#include "model/error.hpp"
#include "model/json_get.hpp"

namespace celtune::db {

namespace {
// Only the fields to_json writes (and the record kind) are accepted: a typo in an
// optional field ("cublaslt_verison") was dropped silently and read as 0.
template <class T>
void only_known(const nlohmann::json& j, const T& sample, const char* what) {
  if (!j.is_object()) return;  // get<> names the type error
  const nlohmann::json known = sample;
  for (const auto& [k, v] : j.items())
    if (k != "record" && !known.contains(k)) fail_usage(std::string("unknown ") + what + " field '" + k + "'");
}
// The parts every record has, checked the same way; a problem's "key" (written
// for people reading the file) must say what its fields, parsed as `p`, say.
void only_known_parts(const nlohmann::json& j, const Problem& p) {
  only_known(j.at("device"), DeviceInfo{}, "device");
  only_known(j.at("problem"), Problem{}, "problem");
  only_known(j.at("stats"), Stats{}, "stats");
  const auto& pj = j.at("problem");
  if (!pj.contains("key")) return;
  const auto key = json_field<std::string>(pj, "key");
  if (key != p.key()) fail_usage("problem key '" + key.substr(0, 200) + "' does not match its fields");
}
}  // namespace

void to_json(nlohmann::json& j, const Stats& s) {
  j = nlohmann::json{{"median_ms", s.median_ms}, {"p20_ms", s.p20_ms}, {"p80_ms", s.p80_ms},
                     {"samples", s.samples},     {"spread", s.spread}};
}
void from_json(const nlohmann::json& j, Stats& s) {
  s.median_ms = json_field<double>(j, "median_ms");
  s.p20_ms = json_field<double>(j, "p20_ms");
  s.p80_ms = json_field<double>(j, "p80_ms");
  s.samples = json_int<int64_t>(j, "samples");
  s.spread = json_field<double>(j, "spread");
}

void to_json(nlohmann::json& j, const Measurement& m) {
  j = nlohmann::json{{"device", m.device},
                     {"problem", m.problem},
                     {"config", m.config},
                     {"kernel_hash", m.kernel_hash},
                     {"status", m.status},
                     {"reason", m.reason},
                     {"stats", m.stats},
                     {"clock_start_mhz", m.clock_start_mhz},
                     {"clock_end_mhz", m.clock_end_mhz},
                     {"created_at", m.created_at}};
}
void from_json(const nlohmann::json& j, Measurement& m) {
  only_known(j, Measurement{}, "measurement");
  m.device = json_object<DeviceInfo>(j, "device");
  m.problem = json_object<Problem>(j, "problem");
  only_known_parts(j, m.problem);
  m.config = json_object<KernelConfig>(j, "config");
  m.kernel_hash = json_field<std::string>(j, "kernel_hash");
  m.status = json_field<std::string>(j, "status");
  m.reason = json_field_or<std::string>(j, "reason", "");
  m.stats = json_object<Stats>(j, "stats");
  m.clock_start_mhz = json_field_or<double>(j, "clock_start_mhz", 0.0);
  m.clock_end_mhz = json_field_or<double>(j, "clock_end_mhz", 0.0);
  m.created_at = json_field<std::string>(j, "created_at");
}

void to_json(nlohmann::json& j, const BestEntry& b) {
  j = nlohmann::json{{"device", b.device},
                     {"problem", b.problem},
                     {"config", b.config},
                     {"stats", b.stats},
                     {"default_ms", b.default_ms},
                     {"speedup", b.speedup},
                     {"celtune_version", b.celtune_version},
                     {"kernel_hash", b.kernel_hash},
                     {"cublaslt", b.cublaslt},
                     {"created_at", b.created_at}};
}
void from_json(const nlohmann::json& j, BestEntry& b) {
  only_known(j, BestEntry{}, "best-entry");
  b.device = json_object<DeviceInfo>(j, "device");
  b.problem = json_object<Problem>(j, "problem");
  only_known_parts(j, b.problem);
  b.config = json_object<KernelConfig>(j, "config");
  b.stats = json_object<Stats>(j, "stats");
  b.default_ms = json_field<double>(j, "default_ms");
  b.speedup = json_field<double>(j, "speedup");
  b.celtune_version = json_field<std::string>(j, "celtune_version");
  b.kernel_hash = json_field<std::string>(j, "kernel_hash");
  b.cublaslt = json_field<std::string>(j, "cublaslt");
  b.created_at = json_field<std::string>(j, "created_at");
}

std::string utc_now_iso8601() {
  const std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace celtune::db
