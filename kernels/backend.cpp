#include "backend.hpp"

#include <charconv>

#include "cpu/cpu_backend.hpp"
#include "model/error.hpp"

#ifdef CELTUNE_HAVE_CUDA
#include "kernels/cuda_backend.hpp"
#endif

namespace celtune {

bool Backend::supports(const Problem& p, const KernelConfig& c, std::string* why) const {
  try {
    check(p, c);
    return true;
  } catch (const Error& e) {
    if (why) *why = e.what();
    return false;
  }
}

bool cuda_built() {
#ifdef CELTUNE_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

int cuda_device_count() {
#ifdef CELTUNE_HAVE_CUDA
  return cuda::device_count();
#else
  return 0;
#endif
}

std::unique_ptr<Backend> open_backend(const std::string& device) {
  if (device == "cpu") return cpu::make_backend();
  if (device.empty()) {
    if (cuda_device_count() > 0) return open_backend("0");
    return cpu::make_backend();
  }
  std::string ord = device.rfind("cuda:", 0) == 0 ? device.substr(5) : device;
  int n = -1;
  auto r = std::from_chars(ord.data(), ord.data() + ord.size(), n);
  if (r.ec != std::errc() || r.ptr != ord.data() + ord.size() || n < 0)
    fail_usage("unknown device '" + device + "': use 'cpu' or a CUDA ordinal such as 0 or cuda:0");
  if (!cuda_built()) fail_env("device '" + device + "': this build of celtune has no CUDA backend");
  if (n >= cuda_device_count())
    fail_env("no CUDA device " + std::to_string(n) + " (" + std::to_string(cuda_device_count()) +
             " present)");
#ifdef CELTUNE_HAVE_CUDA
  return cuda::make_backend(n);
#else
  return nullptr;
#endif
}

std::vector<DeviceInfo> list_devices() {
  std::vector<DeviceInfo> out;
#ifdef CELTUNE_HAVE_CUDA
  for (int i = 0; i < cuda::device_count(); ++i) out.push_back(cuda::device_info(i));
#endif
  out.push_back(cpu::device_info());
  return out;
}

}  // namespace celtune
