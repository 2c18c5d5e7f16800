// Defines one entry point of the table (variants.hpp) per translation unit.
#pragma once

#include "kernels/flce/sm90/gemm_sm90.cuh"
#include "kernels/flce/sm90/variants.hpp"

namespace celtune::cuda::sm90 {

// Row index → compile-time variant, from the same X-macros as the table.
template <int I>
struct LogitsVariant;
template <int I>
struct DwVariant;
template <int I>
struct DxVariant;
#define CELTUNE_SM90_ROW(role, idx, bm, bn, bk, cm, cn, pp) \
  template <>                                              \
  struct role<idx> {                                       \
    using type = Variant<bm, bn, bk, cm, cn, pp>;          \
  };
#define CELTUNE_SM90_LOGITS_ROW(idx, bm, bn, bk, cm, cn, pp, name) CELTUNE_SM90_ROW(LogitsVariant, idx, bm, bn, bk, cm, cn, pp)
#define CELTUNE_SM90_DW_ROW(idx, bm, bn, bk, cm, cn, pp, name) CELTUNE_SM90_ROW(DwVariant, idx, bm, bn, bk, cm, cn, pp)
#define CELTUNE_SM90_DX_ROW(idx, bm, bn, bk, cm, cn, pp, name) CELTUNE_SM90_ROW(DxVariant, idx, bm, bn, bk, cm, cn, pp)
CELTUNE_SM90_LOGITS_VARIANTS(CELTUNE_SM90_LOGITS_ROW)
CELTUNE_SM90_DW_VARIANTS(CELTUNE_SM90_DW_ROW)
CELTUNE_SM90_DX_VARIANTS(CELTUNE_SM90_DX_ROW)
#undef CELTUNE_SM90_LOGITS_ROW
#undef CELTUNE_SM90_DW_ROW
#undef CELTUNE_SM90_DX_ROW
#undef CELTUNE_SM90_ROW

}  // namespace celtune::cuda::sm90

#define CELTUNE_SM90_DEFINE_LOGITS(idx, dt, T, store, Store)                                                  \
  namespace celtune::cuda::sm90 {                                                                             \
  void CELTUNE_SM90_LOGITS_FN(idx, dt, store)(const LogitsArgs& a, const Workspace& ws, cudaStream_t st) {     \
    LogitsGemm<T, LogitsVariant<idx>::type, Store>::run(a, ws, st);                                           \
  }                                                                                                           \
  }

#define CELTUNE_SM90_DEFINE_DW(idx, dt, T, out, OutF32)                                               \
  namespace celtune::cuda::sm90 {                                                                     \
  void CELTUNE_SM90_DW_FN(idx, dt, out)(const DwArgs& a, const Workspace& ws, cudaStream_t st) {       \
    DwGemm<T, DwVariant<idx>::type, OutF32>::run(a, ws, st);                                          \
  }                                                                                                   \
  }

#define CELTUNE_SM90_DEFINE_DX(idx, dt, T)                                                     \
  namespace celtune::cuda::sm90 {                                                              \
  void CELTUNE_SM90_DX_FN(idx, dt)(const DxArgs& a, const Workspace& ws, cudaStream_t st) {     \
    DxGemm<T, DxVariant<idx>::type>::run(a, ws, st);                                           \
  }                                                                                            \
  }
