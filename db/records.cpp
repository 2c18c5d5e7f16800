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
  if (pj.contains("key") && pj.at("key").get<std::string>() != p.key())
    fail_usage("problem key '" + pj.at("key").get<std::string>().substr(0, 200) + "' does not match its fields");
}
}  // namespace

void to_json(nlohmann::json& j, const Stats& s) {
  j = nlohmann::json{{"median_ms", s.median_ms}, {"p20_ms", s.p20_ms}, {"p80_ms", s.p80_ms},
                     {"samples", s.samples},     {"spread", s.spread}};
}
void from_json(const nlohmann::json& j, Stats& s) {
  s.median_ms = j.at("median_ms").get<double>();
  s.p20_ms = j.at("p20_ms").get<double>();
  s.p80_ms = j.at("p80_ms").get<double>();
  s.samples = json_int<int64_t>(j, "samples");
  s.spread = j.at("spread").get<double>();
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
  m.device = j.at("device").get<DeviceInfo>();
  m.problem = j.at("problem").get<Problem>();
  only_known_parts(j, m.problem);
  m.config = j.at("config").get<KernelConfig>();
  m.kernel_hash = j.at("kernel_hash").get<std::string>();
  m.status = j.at("status").get<std::string>();
  m.reason = j.value("reason", std::string());
  m.stats = j.at("stats").get<Stats>();
  m.clock_start_mhz = j.value("clock_start_mhz", 0.0);
  m.clock_end_mhz = j.value("clock_end_mhz", 0.0);
  m.created_at = j.at("created_at").get<std::string>();
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
  b.device = j.at("device").get<DeviceInfo>();
  b.problem = j.at("problem").get<Problem>();
  only_known_parts(j, b.problem);
  b.config = j.at("config").get<KernelConfig>();
  b.stats = j.at("stats").get<Stats>();
  b.default_ms = j.at("default_ms").get<double>();
  b.speedup = j.at("speedup").get<double>();
  b.celtune_version = j.at("celtune_version").get<std::string>();
  b.kernel_hash = j.at("kernel_hash").get<std::string>();
  b.cublaslt = j.at("cublaslt").get<std::string>();
  b.created_at = j.at("created_at").get<std::string>();
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
