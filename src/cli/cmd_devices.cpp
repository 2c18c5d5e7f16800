#include <iostream>

#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "kernels/backend.hpp"
#include "output.hpp"

namespace celtune::cli {

Action register_devices(CLI::App& app) {
  auto* sub = app.add_subcommand("devices", "List every CUDA device (name, sm, SM count, memory, driver, runtime, "
                                            "cuBLASLt) and the CPU backend");
  auto json = std::make_shared<bool>(false);
  sub->add_flag("--json", *json, "Print JSON instead of a table");
  return [json] {
    const auto devs = list_devices();
    if (*json) {
      std::cout << nlohmann::json(devs).dump(2) << '\n';
      return 0;
    }
    Table t({"device", "name", "arch", "SMs/threads", "memory", "driver", "runtime", "cuBLASLt"});
    for (const auto& d : devs)
      t.add({d.id, d.name, d.arch, std::to_string(d.sm_count), human_bytes(static_cast<double>(d.memory_bytes)),
             d.driver.empty() ? "-" : d.driver, d.runtime.empty() ? "-" : d.runtime,
             d.cublaslt.empty() ? "-" : d.cublaslt});
    t.print(std::cout);
    if (!cuda_built()) std::cout << "(this build has no CUDA backend)\n";
    return 0;
  };
}

}  // namespace celtune::cli
