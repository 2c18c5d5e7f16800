// What the database stores, as plain structs. No SQL here and no CUDA anywhere
// in db/: the kernels never see these, the tuner writes them, the runtime reads.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "model/config.hpp"
#include "model/device.hpp"
#include "model/problem.hpp"

namespace celtune::db {

// Timing statistics of one config on one problem, in milliseconds.
struct Stats {
  double median_ms = 0, p20_ms = 0, p80_ms = 0;
  int64_t samples = 0;
  double spread = 0;  // (p80 − p20) / median
  bool operator==(const Stats&) const = default;
};

// One candidate the tuner timed, or refused (status "failed", with the reason).
struct Measurement {
  DeviceInfo device;
  Problem problem;
  KernelConfig config;
  std::string kernel_hash;
  std::string status = "ok";
  std::string reason;
  Stats stats;
  double clock_start_mhz = 0, clock_end_mhz = 0;
  std::string created_at;
  bool operator==(const Measurement&) const = default;
};

// The chosen config for one (device, problem), with where it came from.
struct BestEntry {
  DeviceInfo device;
  Problem problem;
  KernelConfig config;
  Stats stats;
  double default_ms = 0;
  double speedup = 0;  // default_ms / stats.median_ms
  std::string celtune_version;
  std::string kernel_hash;
  std::string cublaslt;
  std::string created_at;
  bool operator==(const BestEntry&) const = default;
};

void to_json(nlohmann::json&, const Stats&);
void from_json(const nlohmann::json&, Stats&);
void to_json(nlohmann::json&, const Measurement&);
void from_json(const nlohmann::json&, Measurement&);
void to_json(nlohmann::json&, const BestEntry&);
void from_json(const nlohmann::json&, BestEntry&);

std::string utc_now_iso8601();

}  // namespace celtune::db
