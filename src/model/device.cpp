#include "device.hpp"

#include <nlohmann/json.hpp>

#include "json_get.hpp"

namespace celtune {

void to_json(nlohmann::json& j, const DeviceInfo& d) {
  j = nlohmann::json{{"id", d.id},           {"name", d.name},
                     {"arch", d.arch},       {"sm_count", d.sm_count},
                     {"memory_bytes", d.memory_bytes}, {"driver", d.driver},
                     {"runtime", d.runtime}, {"cublaslt", d.cublaslt},
                     {"cublaslt_version", d.cublaslt_version}};
}

void from_json(const nlohmann::json& j, DeviceInfo& d) {
  d.id = json_field_or<std::string>(j, "id", "");
  d.name = json_field<std::string>(j, "name");
  d.arch = json_field<std::string>(j, "arch");
  d.sm_count = json_int<int>(j, "sm_count");
  d.memory_bytes = json_int<int64_t>(j, "memory_bytes");
  d.driver = json_field<std::string>(j, "driver");
  d.runtime = json_field<std::string>(j, "runtime");
  d.cublaslt = json_field<std::string>(j, "cublaslt");
  d.cublaslt_version = json_int_or<int64_t>(j, "cublaslt_version", 0);
}

}  // namespace celtune
