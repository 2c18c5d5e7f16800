// A build without CUDA has no GPU reference; validate then judges against the
// fp64 reference alone (see gpu.hpp).
#include "gpu.hpp"

#include "model/error.hpp"

namespace celtune::reference {

RefOutputs run_gpu(const Problem&, const HostCase&, int, bool) {
  fail_env("this build of celtune has no CUDA backend, so no GPU reference");
}

}  // namespace celtune::reference
