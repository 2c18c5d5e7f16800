// The fused path's dispatch table: maps (variant, dtype, flag) at run time to
// the translation unit that instantiated it (variants.hpp), and says whether
// this device can run it. No CUTLASS headers here: they stay in the units.
#include <string>

#include "kernels/cuda_check.hpp"
#include "kernels/flce/sm90/fused.hpp"
#include "kernels/flce/sm90/variants.hpp"

namespace celtune::cuda::sm90 {

#define CELTUNE_SM90_DECLARE_LOGITS(idx, bm, bn, bk, cm, cn, pp, name)                                          \
  void CELTUNE_SM90_LOGITS_FN(idx, bf16, tile)(const LogitsArgs&, const Workspace&, cudaStream_t);             \
  void CELTUNE_SM90_LOGITS_FN(idx, bf16, stats)(const LogitsArgs&, const Workspace&, cudaStream_t);            \
  void CELTUNE_SM90_LOGITS_FN(idx, fp16, tile)(const LogitsArgs&, const Workspace&, cudaStream_t);             \
  void CELTUNE_SM90_LOGITS_FN(idx, fp16, stats)(const LogitsArgs&, const Workspace&, cudaStream_t);
#define CELTUNE_SM90_DECLARE_DW(idx, bm, bn, bk, cm, cn, pp, name)                       \
  void CELTUNE_SM90_DW_FN(idx, bf16, out)(const DwArgs&, const Workspace&, cudaStream_t); \
  void CELTUNE_SM90_DW_FN(idx, bf16, f32)(const DwArgs&, const Workspace&, cudaStream_t); \
  void CELTUNE_SM90_DW_FN(idx, fp16, out)(const DwArgs&, const Workspace&, cudaStream_t); \
  void CELTUNE_SM90_DW_FN(idx, fp16, f32)(const DwArgs&, const Workspace&, cudaStream_t);
#define CELTUNE_SM90_DECLARE_DX(idx, bm, bn, bk, cm, cn, pp, name)                  \
  void CELTUNE_SM90_DX_FN(idx, bf16)(const DxArgs&, const Workspace&, cudaStream_t); \
  void CELTUNE_SM90_DX_FN(idx, fp16)(const DxArgs&, const Workspace&, cudaStream_t);
CELTUNE_SM90_LOGITS_VARIANTS(CELTUNE_SM90_DECLARE_LOGITS)
CELTUNE_SM90_DW_VARIANTS(CELTUNE_SM90_DECLARE_DW)
CELTUNE_SM90_DX_VARIANTS(CELTUNE_SM90_DECLARE_DX)

namespace {
using LogitsFn = void (*)(const LogitsArgs&, const Workspace&, cudaStream_t);
using DwFn = void (*)(const DwArgs&, const Workspace&, cudaStream_t);
#define CELTUNE_SM90_LOGITS_ENTRY(idx, bm, bn, bk, cm, cn, pp, name)                               \
  {CELTUNE_SM90_LOGITS_FN(idx, bf16, tile), CELTUNE_SM90_LOGITS_FN(idx, bf16, stats),             \
   CELTUNE_SM90_LOGITS_FN(idx, fp16, tile), CELTUNE_SM90_LOGITS_FN(idx, fp16, stats)},
#define CELTUNE_SM90_DW_ENTRY(idx, bm, bn, bk, cm, cn, pp, name)                                                \
  {CELTUNE_SM90_DW_FN(idx, bf16, out), CELTUNE_SM90_DW_FN(idx, bf16, f32), CELTUNE_SM90_DW_FN(idx, fp16, out), \
   CELTUNE_SM90_DW_FN(idx, fp16, f32)},
using DxFn = void (*)(const DxArgs&, const Workspace&, cudaStream_t);
#define CELTUNE_SM90_DX_ENTRY(idx, bm, bn, bk, cm, cn, pp, name) \
  {CELTUNE_SM90_DX_FN(idx, bf16), CELTUNE_SM90_DX_FN(idx, bf16), CELTUNE_SM90_DX_FN(idx, fp16), CELTUNE_SM90_DX_FN(idx, fp16)},
// Per row: {bf16 tile, bf16 stats, fp16 tile, fp16 stats}, {bf16 out, bf16 f32,
// fp16 out, fp16 f32} and dX's {bf16, bf16, fp16, fp16} (dtype_slot's layout).
const LogitsFn kLogits[][4] = {CELTUNE_SM90_LOGITS_VARIANTS(CELTUNE_SM90_LOGITS_ENTRY)};
const DwFn kDw[][4] = {CELTUNE_SM90_DW_VARIANTS(CELTUNE_SM90_DW_ENTRY)};
const DxFn kDx[][4] = {CELTUNE_SM90_DX_VARIANTS(CELTUNE_SM90_DX_ENTRY)};

int dtype_slot(DType t) {
  if (t == DType::fp32) fail_usage("the fused flce path takes bf16 or fp16 inputs (fp32 runs on cuBLASLt)");
  return t == DType::bf16 ? 0 : 2;
}
template <class Row, size_t N>
const Row& row_at(const Row (&rows)[N], int variant) {
  if (variant < 0 || variant >= static_cast<int>(N))
    fail_usage("fused GEMM variant " + std::to_string(variant) + " is not in the compiled table");
  return rows[variant];
}
}  // namespace

bool available(int device, std::string* why) {
  // Attributes, not cudaGetDeviceProperties: this runs on every call's check.
  int major = 0, minor = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
    if (why) *why = "cannot read the device's compute capability";
    return false;
  }
  // The kernels are built for sm_90a only: WGMMA and setmaxnreg exist on Hopper
  // (9.0) and nowhere else, not even on later architectures.
  if (major != 9 || minor != 0) {
    if (why) *why = "the fused kernels need an sm_90 (Hopper) GPU; this is sm_" + std::to_string(major) +
                    std::to_string(minor);
    return false;
  }
  return true;
}

void logits_stats(int variant, DType t, const LogitsArgs& a, const Workspace& ws, cudaStream_t st) {
  row_at(kLogits, variant)[dtype_slot(t) + (a.tile ? 0 : 1)](a, ws, st);
}

void dw_gemm(int variant, DType t, const DwArgs& a, const Workspace& ws, cudaStream_t st) {
  row_at(kDw, variant)[dtype_slot(t) + (a.dw_fp32 ? 1 : 0)](a, ws, st);
}

void dx_gemm(int variant, DType t, const DxArgs& a, const Workspace& ws, cudaStream_t st) {
  row_at(kDx, variant)[dtype_slot(t)](a, ws, st);
}

}  // namespace celtune::cuda::sm90
