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
  d.id = j.value("id", std::string());
  d.name = j.at("name").get<std::string>();
  d.arch = j.at("arch").get<std::string>();
  d.sm_count = json_int<int>(j, "sm_count");
  d.memory_bytes = json_int<int64_t>(j, "memory_bytes");
  d.driver = j.at("driver").get<std::string>();
  d.runtime = j.at("runtime").get<std::string>();
  d.cublaslt = j.at("cublaslt").get<std::string>();
  d.cublaslt_version = json_int_or<int64_t>(j, "cublaslt_version", 0);
}

}  // namespace celtune
