// The CPU backend: both kernel families on the host, in fp32 with fp32
// accumulation, running the same chunked algorithm as the CUDA kernels so that
// validate and tune exercise the whole pipeline on a machine without a GPU.
#pragma once

#include <memory>

#include "kernels/backend.hpp"

namespace celtune::cpu {

std::unique_ptr<Backend> make_backend();
DeviceInfo device_info();

// The algorithm itself, exposed for the tests.
HostOutputs run(const Problem& p, const KernelConfig& c, const HostCase& in);

}  // namespace celtune::cpu
