// The CUDA backend's factory; the implementation lives in cuda_backend.cu.
#pragma once

#include <memory>

#include "kernels/backend.hpp"

namespace celtune::cuda {

int device_count();  // 0 when there is no driver or no device, never throws
DeviceInfo device_info(int ordinal);
std::unique_ptr<Backend> make_backend(int ordinal);

}  // namespace celtune::cuda
