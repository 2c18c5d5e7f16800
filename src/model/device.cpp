#include "device.hpp"

#include <nlohmann/json.hpp>

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
  d.sm_count = j.at("sm_count").get<int>();
  d.memory_bytes = j.at("memory_bytes").get<int64_t>();
  d.driver = j.at("driver").get<std::string>();
  d.runtime = j.at("runtime").get<std::string>();
  d.cublaslt = j.at("cublaslt").get<std::string>();
  d.cublaslt_version = j.value("cublaslt_version", int64_t{0});
}

}  // namespace celtune
