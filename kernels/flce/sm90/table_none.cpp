// The fused path in a build without CUTLASS (-Dcutlass=disabled, or the
// nvidia-cutlass headers not found): it reports itself unavailable, so check()
// refuses impl fused with the reason and nothing reaches the entry points.
#include <string>

#include "kernels/flce/sm90/fused.hpp"
#include "model/error.hpp"

namespace celtune::cuda::sm90 {

namespace {
constexpr const char* kWhy =
    "this celtune was built without CUTLASS, so impl fused is unavailable (install the nvidia-cutlass wheel, "
    "as scripts/bootstrap does, and reconfigure with -Dcutlass=enabled)";
}

bool available(int, std::string* why) {
  if (why) *why = kWhy;
  return false;
}
void logits_stats(int, DType, const LogitsArgs&, const Workspace&, cudaStream_t) { fail_usage(kWhy); }
void dw_gemm(int, DType, const DwArgs&, const Workspace&, cudaStream_t) { fail_usage(kWhy); }
void dx_gemm(int, DType, const DxArgs&, const Workspace&, cudaStream_t) { fail_usage(kWhy); }

}  // namespace celtune::cuda::sm90
