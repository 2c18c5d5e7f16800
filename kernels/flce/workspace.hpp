// Device memory a GEMM may use: cuBLASLt's split-K partials, CUTLASS's tile
// scheduler. A piece of the call's scratch (kernels/flce/flce.cu's Layout), sized
// by the config's workspace_mib, so the memory a config states is what it uses.
#pragma once

#include <cstddef>

namespace celtune::cuda {

struct Workspace {
  void* ptr = nullptr;
  size_t bytes = 0;
};

}  // namespace celtune::cuda
