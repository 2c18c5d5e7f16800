// CUTLASS 3 kernels of the fused path, composed from CUTLASS's own parts: a
// collective mainloop (TMA loads, WGMMA, stages from the CollectiveBuilder), a
// collective epilogue (the CE visitor tree or a linear combination), and the
// persistent tile scheduler, joined by GemmUniversal. One instantiation per
// translation unit (logits_*.cu, dw_*.cu): each takes ~1 minute of nvcc.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>
#include <string>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/flce/sm90/ce_epilogue.cuh"

namespace celtune::cuda::sm90 {

template <class T>
struct CutlassType;
template <>
struct CutlassType<__nv_bfloat16> {
  using type = cutlass::bfloat16_t;
};
template <>
struct CutlassType<__half> {
  using type = cutlass::half_t;
};

// A variant of the table: tile, cluster and schedule at compile time.
template <int BM, int BN, int BK, int CM, int CN, bool Pingpong>
struct Variant {
  using Tile = cute::Shape<cute::Int<BM>, cute::Int<BN>, cute::Int<BK>>;
  using Cluster = cute::Shape<cute::Int<CM>, cute::Int<CN>, cute::_1>;
  using Mainloop = cute::conditional_t<Pingpong, cutlass::gemm::KernelTmaWarpSpecializedPingpong,
                                       cutlass::gemm::KernelTmaWarpSpecializedCooperative>;
  using Epilogue = cute::conditional_t<Pingpong, cutlass::epilogue::TmaWarpSpecialized,
                                       cutlass::epilogue::TmaWarpSpecializedCooperative>;
};

// A stride type with its one dynamic leading dimension among modes 0 and 1 set to
// `ld` (the other is the static unit stride); the batch mode is unused.
template <class Stride>
Stride leading(int64_t ld) {
  Stride s{};
  if constexpr (!cute::is_static_v<cute::remove_cvref_t<decltype(cute::get<0>(s))>>)
    cute::get<0>(s) = ld;
  else
    cute::get<1>(s) = ld;
  return s;
}

inline int sm_count_of_current_device() {
  int device = 0, sms = 0;
  CELTUNE_CUDA(cudaGetDevice(&device));
  CELTUNE_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  return sms;
}

// The tile scheduler's rasterisation, per role (comments at the callers say why).
// CELTUNE_SM90_RASTER=m|n|auto and CELTUNE_SM90_SWIZZLE=1|2|4|8 override it for
// experiments (read once per process).
using Raster = cutlass::gemm::kernel::detail::RasterOrderOptions;
template <class SchedulerArgs>
void schedule(SchedulerArgs& s, Raster order) {
  static const char* raster = std::getenv("CELTUNE_SM90_RASTER");
  static const char* swizzle = std::getenv("CELTUNE_SM90_SWIZZLE");
  s.raster_order = order;
  if (raster && std::string(raster) == "m") s.raster_order = Raster::AlongM;
  if (raster && std::string(raster) == "n") s.raster_order = Raster::AlongN;
  if (raster && std::string(raster) == "auto") s.raster_order = Raster::Heuristic;
  if (swizzle) s.max_swizzle_size = std::atoi(swizzle);
}

// What TMA itself needs, checked instead of CUTLASS's can_implement: its check
// also asks every contiguous extent (the vocabulary width of a tile, GPT-2's
// 50257) to be a multiple of 16 bytes, which TMA does not need: it clips loads
// and stores per element at the tensor's edge. Strides and base addresses must
// be 16-byte aligned; the driver validates the descriptors again at initialize.
inline void check_tma(const void* ptr, int64_t ld_elems, int elem_bytes, const char* what) {
  if (reinterpret_cast<uintptr_t>(ptr) % 16 || (ld_elems * elem_bytes) % 16)
    fail_usage(std::string("the fused path needs 16-byte aligned rows and base addresses (") + what + ")");
}

// initialize and run, each checked. The workspace (the persistent scheduler's, a
// few bytes) is the context's GEMM workspace: the context's GEMMs run one after
// another on its stream.
template <class Gemm>
void launch(const typename Gemm::Arguments& args, const Workspace& ws, cudaStream_t st, const char* what) {
  Gemm gemm;
  if (Gemm::get_workspace_size(args) > ws.bytes)
    fail_env(std::string("the fused ") + what + " GEMM needs more workspace than the context holds");
  cutlass::Status s = gemm.initialize(args, ws.ptr, st);
  if (s == cutlass::Status::kSuccess) s = gemm.run(st);
  if (s != cutlass::Status::kSuccess)
    fail_env(std::string("CUTLASS ") + what + " GEMM failed: " + cutlassGetStatusString(s));
  CELTUNE_LAUNCHED();
}

// A persistent GEMM from a collective epilogue and the mainloop the builder picks
// for it (stages: what shared memory leaves after the epilogue's), with the
// problem shape (M, N, K, L) and a persistent tile scheduler (the static one
// unless named).
template <class E, class LayoutA, class LayoutB, class V, class CollectiveEpilogue,
          class Scheduler = cutlass::gemm::PersistentScheduler>
struct Persistent {
  using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, E, LayoutA, 8, E, LayoutB, 8, float, typename V::Tile,
      typename V::Cluster,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
          sizeof(typename CollectiveEpilogue::SharedStorage))>,
      typename V::Mainloop>::CollectiveOp;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<cute::Shape<int, int, int, int>, CollectiveMainloop,
                                                      CollectiveEpilogue, Scheduler>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
};

// logits + CE statistics. A = X [rows, H] row-major (K-major), B = W [cols, H]
// (K-major), the tile [rows, ld] row-major or none; the epilogue is CeEpilogue
// (ce_epilogue.cuh), which needs no shared memory: every stage goes to the mainloop.
template <class T, class V, bool StoreTile>
struct LogitsGemm {
  using E = typename CutlassType<T>::type;
  using CollectiveEpilogue = CeEpilogue<E, StoreTile>;
  using Built = Persistent<E, cutlass::layout::RowMajor, cutlass::layout::ColumnMajor, V, CollectiveEpilogue>;
  using Kernel = typename Built::Kernel;
  using Gemm = typename Built::Gemm;
  static constexpr int kBlockM = cute::size<0>(typename V::Tile{});

  static void run(const LogitsArgs& a, const Workspace& ws, cudaStream_t st) {
    typename Gemm::Arguments args{};
    args.mode = cutlass::gemm::GemmUniversalMode::kGemm;
    args.problem_shape = {static_cast<int>(a.rows), static_cast<int>(a.cols), static_cast<int>(a.hidden), 1};
    args.mainloop.ptr_A = static_cast<const E*>(a.x);
    args.mainloop.dA = leading<typename Kernel::StrideA>(a.hidden);
    args.mainloop.ptr_B = static_cast<const E*>(a.w);
    args.mainloop.dB = leading<typename Kernel::StrideB>(a.hidden);
    args.epilogue.tile = static_cast<E*>(a.tile);
    args.epilogue.ld_tile = a.ld_tile;
    args.epilogue.bias = static_cast<const E*>(a.bias);
    args.epilogue.softcap = a.softcap;
    args.epilogue.lse_partials = a.lse_partials;
    args.epilogue.sumz_partials = a.sumz_partials;
    args.epilogue.targets = a.targets, args.epilogue.targets_i64 = a.targets_i64;
    args.epilogue.z_target = a.z_target;
    args.epilogue.scaled_dz = a.scaled_dz, args.epilogue.row_ref = a.row_ref;
    args.epilogue.approx_softcap = a.approx_softcap;
    args.epilogue.rows_pad = (a.rows + kBlockM - 1) / kBlockM * kBlockM;  // = sm90_partial_rows
    args.hw_info.sm_count = sm_count_of_current_device();
    // Along M: the CTAs that run together share one W tile (the large operand)
    // and the row chunk's X stays in L2 (on the H100, along N was 16% slower).
    schedule(args.scheduler, Raster::AlongM);
    check_tma(a.x, a.hidden, sizeof(E), "X"), check_tma(a.w, a.hidden, sizeof(E), "W");
    if (a.tile) check_tma(a.tile, a.ld_tile, sizeof(E), "logits tile");
    if (!CollectiveEpilogue::can_implement(args.problem_shape, args.epilogue))
      fail_usage(
          "the CE epilogue needs its partials, the tile where it stores one, and for scaled dZ a softcap within "
          "kSm90FixedReferenceMaxSoftcap or, without a softcap, the rows' references; an approximate softcap "
          "stores no tile");
    launch<Gemm>(args, ws, st, "logits");
  }
};

// dW [cols, H] = dZᵀ·X + beta·dW. A = dZ viewed [cols, rows] (M-major, ld_dz),
// B = X viewed [H, rows] (N-major), C = D = dW row-major (in place).
template <class T, class V, bool OutF32>
struct DwGemm {
  using E = typename CutlassType<T>::type;
  using Out = cute::conditional_t<OutF32, float, E>;
  static constexpr int kOutAlign = 16 / sizeof(Out);
  using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, typename V::Tile, typename V::Cluster,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, Out, cutlass::layout::RowMajor, kOutAlign, Out,
      cutlass::layout::RowMajor, kOutAlign, typename V::Epilogue>::CollectiveOp;
  using Built = Persistent<E, cutlass::layout::ColumnMajor, cutlass::layout::RowMajor, V, CollectiveEpilogue>;
  using Kernel = typename Built::Kernel;
  using Gemm = typename Built::Gemm;

  static void run(const DwArgs& a, const Workspace& ws, cudaStream_t st) {
    typename Gemm::Arguments args{};
    args.mode = cutlass::gemm::GemmUniversalMode::kGemm;
    args.problem_shape = {static_cast<int>(a.cols), static_cast<int>(a.hidden), static_cast<int>(a.rows), 1};
    args.mainloop.ptr_A = static_cast<const E*>(a.dz);
    args.mainloop.dA = leading<typename Kernel::StrideA>(a.ld_dz);
    args.mainloop.ptr_B = static_cast<const E*>(a.x);
    args.mainloop.dB = leading<typename Kernel::StrideB>(a.hidden);
    args.epilogue.thread.alpha = 1.0f;
    args.epilogue.thread.beta = a.beta;
    args.epilogue.ptr_C = static_cast<const Out*>(a.dw);
    args.epilogue.dC = leading<typename Kernel::StrideC>(a.hidden);
    args.epilogue.ptr_D = static_cast<Out*>(a.dw);
    args.epilogue.dD = leading<typename Kernel::StrideD>(a.hidden);
    args.hw_info.sm_count = sm_count_of_current_device();
    // Along N (hidden): the CTAs that run together share one dZ slab, read from
    // DRAM once; along M re-read it for every N tile (a 128×128 tile read 7 GB
    // instead of 0.4 GB per 896-row chunk of Llama-3-8B on the H100: 2.75 ms
    // instead of 1.83).
    schedule(args.scheduler, Raster::AlongN);
    check_tma(a.dz, a.ld_dz, sizeof(E), "dZ"), check_tma(a.x, a.hidden, sizeof(E), "X");
    check_tma(a.dw, a.hidden, sizeof(Out), "dW");
    launch<Gemm>(args, ws, st, "dW");
  }
};

// dX [rows, H] = q·W, one output per row chunk (the one pass: K = V, beta = 0).
// A = the tile [rows, ld_tile] row-major (K-major), B = W [V, H] viewed [H, V]
// (N-major), D = dX's rows. Stream-K: the output is small for its K (Qwen2.5-7B's
// 1280 × 3584 is 140 tiles of 128×256, 1.06 waves of 132 SMs), so data-parallel
// tiles leave SMs idle for a whole sweep of V; stream-K gives every SM an equal
// share of the K iterations and merges the split tiles' partial sums through the
// workspace in a fixed order (Deterministic: the same sums every run). Where the
// context's workspace cannot hold those partials it runs data-parallel, which
// needs none (variants.hpp says where the default takes it).
template <class T, class V>
struct DxGemm {
  using E = typename CutlassType<T>::type;
  static constexpr int kAlign = 16 / sizeof(E);
  using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, typename V::Tile, typename V::Cluster,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, cutlass::layout::RowMajor, kAlign, E,
      cutlass::layout::RowMajor, kAlign, typename V::Epilogue>::CollectiveOp;
  using Built = Persistent<E, cutlass::layout::RowMajor, cutlass::layout::RowMajor, V, CollectiveEpilogue,
                           cutlass::gemm::StreamKScheduler>;
  using Kernel = typename Built::Kernel;
  using Gemm = typename Built::Gemm;
  using Mode = cutlass::gemm::kernel::detail::DecompositionMode;

  static void run(const DxArgs& a, const Workspace& ws, cudaStream_t st) {
    typename Gemm::Arguments args{};
    args.mode = cutlass::gemm::GemmUniversalMode::kGemm;
    args.problem_shape = {static_cast<int>(a.rows), static_cast<int>(a.hidden), static_cast<int>(a.cols), 1};
    args.mainloop.ptr_A = static_cast<const E*>(a.dz);
    args.mainloop.dA = leading<typename Kernel::StrideA>(a.ld_dz);
    args.mainloop.ptr_B = static_cast<const E*>(a.w);
    args.mainloop.dB = leading<typename Kernel::StrideB>(a.hidden);
    args.epilogue.thread.alpha = 1.0f;
    args.epilogue.thread.beta = 0.0f;
    args.epilogue.ptr_D = static_cast<E*>(a.dx);
    args.epilogue.dD = leading<typename Kernel::StrideD>(a.hidden);
    args.hw_info.sm_count = sm_count_of_current_device();
    args.scheduler.decomposition_mode = Mode::StreamK;
    args.scheduler.reduction_mode = decltype(args.scheduler.reduction_mode)::Deterministic;
    if (Gemm::get_workspace_size(args) > ws.bytes) args.scheduler.decomposition_mode = Mode::DataParallel;
    check_tma(a.dz, a.ld_dz, sizeof(E), "q"), check_tma(a.w, a.hidden, sizeof(E), "W");
    check_tma(a.dx, a.hidden, sizeof(E), "dX");
    launch<Gemm>(args, ws, st, "dX");
  }
};

}  // namespace celtune::cuda::sm90
