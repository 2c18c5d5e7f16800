// The CUDA half of the one error policy (model/error.hpp): every CUDA and
// cuBLASLt call goes through one of these macros, which stringify the call,
// record file:line and throw celtune::Error(environment) with the status.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <new>
#include <string>

#include "model/error.hpp"

namespace celtune::cuda {

[[noreturn]] inline void throw_cuda(cudaError_t e, const char* expr, const char* file, int line) {
  throw Error(Status::environment, std::string("CUDA error ") + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) +
                                       ") in " + expr + " at " + file + ":" + std::to_string(line));
}
[[noreturn]] inline void throw_cublas(cublasStatus_t s, const char* expr, const char* file, int line) {
  throw Error(Status::environment, std::string("cuBLASLt error ") + std::to_string(static_cast<int>(s)) + " in " +
                                       expr + " at " + file + ":" + std::to_string(line));
}

}  // namespace celtune::cuda

#define CELTUNE_CUDA(expr)                                                                 \
  do {                                                                                     \
    const cudaError_t celtune_e_ = (expr);                                                 \
    if (celtune_e_ != cudaSuccess) ::celtune::cuda::throw_cuda(celtune_e_, #expr, __FILE__, __LINE__); \
  } while (0)

#define CELTUNE_CUBLAS(expr)                                                                   \
  do {                                                                                         \
    const cublasStatus_t celtune_s_ = (expr);                                                  \
    if (celtune_s_ != CUBLAS_STATUS_SUCCESS) ::celtune::cuda::throw_cublas(celtune_s_, #expr, __FILE__, __LINE__); \
  } while (0)

// After every kernel launch: launch-configuration errors surface here, not later.
#define CELTUNE_LAUNCHED() CELTUNE_CUDA(cudaGetLastError())

namespace celtune::cuda {

// CUDA's current device belongs to the host thread. Every entry point that
// touches a device makes its device current for the call and restores the
// caller's after, so a backend or context made on one thread works from any
// other (tune --devices runs one worker thread per GPU; training code calls the
// C API from its own threads) and the caller's own choice of device survives.
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    CELTUNE_CUDA(cudaGetDevice(&saved_));
    if (saved_ != device) CELTUNE_CUDA(cudaSetDevice(device));
    changed_ = saved_ != device;
  }
  // For destructors, which must not throw: where the switch fails, the device is
  // left as it was and nothing is restored.
  DeviceScope(int device, std::nothrow_t) noexcept {
    if (cudaGetDevice(&saved_) != cudaSuccess) return;
    changed_ = saved_ != device && cudaSetDevice(device) == cudaSuccess;
  }
  ~DeviceScope() {
    if (changed_) cudaSetDevice(saved_);
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int saved_ = 0;
  bool changed_ = false;
};

}  // namespace celtune::cuda
