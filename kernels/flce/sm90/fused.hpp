// The fused Hopper path of flce: CUTLASS 3 GEMMs (TMA + WGMMA, warp-specialised,
// persistent) whose epilogues do the CE work, behind a plain C++ interface so
// flce.cu, the search space and the tests never include CUTLASS.
//
// Two GEMM roles run on CUTLASS, and a third may: dW, which may also run on
// cuBLASLt (dw_kernel "cublaslt", variants.hpp), and dX, which runs on cuBLASLt
// unless dx_kernel names a row (the one pass only):
//   logits + CE statistics: tile[rows, cols] = X·Wᵀ, and per row and BLOCK_N
//     columns the online-softmax pair (max, Σexp) of ẑ = softcap(round(z) + b),
//     Σẑ when label smoothing needs it, and ẑ at each row's target (a hand-written collective epilogue,
//     ce_epilogue.cuh, reducing each tile in registers). The tile store is
//     optional: forward only writes none.
//   dW: dW[cols, H] = dZᵀ·X + beta·dW, in place, persistent, the dZ slab
//     multicast within a cluster (the read-modify-write of dW across row chunks
//     and the slab reads bound it at small row chunks).
//   dX: dX[rows, H] = dZ·W over all of V, stream-K (gemm_sm90.cuh says why).
// Variants are a short named table (tile, cluster, schedule; variants.hpp), named
// as CUTLASS's profiler names them; the config picks one per role by name, and
// `variant` below is its row. Built without CUTLASS, available() says so and the
// GEMM entry points throw (table_none.cpp).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "kernels/flce/workspace.hpp"
#include "model/types.hpp"

namespace celtune::cuda::sm90 {

// One row's online-softmax state over a span of columns: max m and Σexp(ẑ − m).
struct LsePair {
  float m, d;
};

// Whether this build and device can run the fused path; `why` says why not.
bool available(int device, std::string* why);

using cuda::Workspace;  // the call's GEMM workspace (kernels/flce/workspace.hpp)

// logits (+ statistics). Shapes in the problem's terms: rows of X, cols of W
// starting at the chunk, K = hidden. Partials are [tiles_n][rows_pad] (m-major,
// rows_pad = rows rounded up to block_m), one entry per row and BLOCK_N columns.
struct LogitsArgs {
  int64_t rows = 0, cols = 0, hidden = 0;
  const void* x = nullptr;     // [rows, hidden]
  const void* w = nullptr;     // [cols, hidden]
  const void* bias = nullptr;  // [cols] or null
  float softcap = 0.0f;        // 0: off
  void* tile = nullptr;        // [rows, ld_tile] in the input dtype, or null: no store
  int64_t ld_tile = 0;
  LsePair* lse_partials = nullptr;  // required
  float* sumz_partials = nullptr;   // Σẑ partials, or null (no label smoothing)
  // z_target[i] = ẑ at row i's target column, taken from the tile exactly as the
  // statistics see it (rounded, bias, softcap), so that ℓ = L − ẑ_y cancels the
  // rounding of a confident row's logits as the CE kernels' does. Rows are the
  // GEMM's (offset both pointers to the chunk); a target outside [0, cols) writes
  // nothing. Null z_target: not wanted.
  const void* targets = nullptr;  // [rows], int64 or int32
  bool targets_i64 = true;
  float* z_target = nullptr;
  // Store q instead of the logits (needs the tile): dZ up to a per-row factor, for
  // the one-pass backward without a dZ pass (ce_epilogue.cuh; when: sm90_scaled_dz,
  // variants.hpp). With a softcap q = exp(ẑ − s)·(1 − (ẑ/s)²); without one
  // q = exp(ẑ − m_i) against row_ref[i] = m_i (rows as z_target's; stats.hpp's
  // sample_ref writes it), or against the tile's row max where that lies more
  // than kSm90RefSpan above m_i (the tile's partial says which).
  bool scaled_dz = false;
  const float* row_ref = nullptr;
  // Statistics only (no tile), and no gradient will be formed against them: a
  // softcap within kSm90FixedReferenceMaxSoftcap may take tanh.approx
  // (device_math.cuh's tanh_approx: ẑ off by up to s·2⁻¹¹).
  bool approx_softcap = false;
};
void logits_stats(int variant, DType t, const LogitsArgs& a, const Workspace& ws, cudaStream_t st);

// dW[cols, hidden] = dZ[rows, cols]ᵀ · X[rows, hidden] + beta · dW (in place).
struct DwArgs {
  int64_t rows = 0, cols = 0, hidden = 0;
  const void* dz = nullptr;  // [rows, ld_dz], input dtype
  int64_t ld_dz = 0;
  const void* x = nullptr;   // [rows, hidden]
  void* dw = nullptr;        // [cols, hidden], input dtype or fp32
  bool dw_fp32 = false;
  float beta = 0.0f;
};
void dw_gemm(int variant, DType t, const DwArgs& a, const Workspace& ws, cudaStream_t st);

// dX[rows, hidden] = dZ[rows, cols] · W[cols, hidden], overwriting dX (the one
// pass: cols = V). dX in the input dtype.
struct DxArgs {
  int64_t rows = 0, cols = 0, hidden = 0;
  const void* dz = nullptr;  // [rows, ld_dz], input dtype
  int64_t ld_dz = 0;
  const void* w = nullptr;   // [cols, hidden]
  void* dx = nullptr;        // [rows, hidden]
};
void dx_gemm(int variant, DType t, const DxArgs& a, const Workspace& ws, cudaStream_t st);

}  // namespace celtune::cuda::sm90
