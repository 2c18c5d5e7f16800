// What identifies a device in the database and in `celtune devices`. Plain data:
// filled by a backend (CUDA or CPU), stored by the database layer, which never
// sees CUDA.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace celtune {

struct DeviceInfo {
  std::string id;    // how the CLI names it: "cpu", "cuda:0"
  std::string name;  // "NVIDIA H100 80GB HBM3", "cpu: AMD EPYC …"
  std::string arch;  // "sm_90", "cpu"
  int sm_count = 0;  // multiprocessors, or CPU threads
  int64_t memory_bytes = 0;
  std::string driver;    // CUDA driver version, or "" for cpu
  std::string runtime;   // CUDA runtime version, or "" for cpu
  std::string cublaslt;  // cuBLASLt version, or "" for cpu
  int64_t cublaslt_version = 0;

  bool operator==(const DeviceInfo&) const = default;
};

void to_json(nlohmann::json&, const DeviceInfo&);
void from_json(const nlohmann::json&, DeviceInfo&);

}  // namespace celtune
