// The CE statistics in the logits GEMM's epilogue: a collective epilogue written
// on CuTe, run by CUTLASS's warp-specialised persistent kernels through their
// adapter for operator-style epilogues (Sm90TmaWarpSpecializedAdapter).
//
// Per output tile, straight from the accumulator registers:
//   z = round(acc) to the input dtype   (stored to the tile when StoreTile: the
//                                        same raw logits the cuBLASLt path writes)
//   ẑ = softcap(z + b)                   (flce-math.md step 2)
//   per row, over the tile's BLOCK_N columns: a reference m and d = Σ exp(ẑ − m),
//   and Σẑ when label smoothing needs it (steps 3–4), written as one partial per
//   row and tile to [tiles_n][rows_pad], no atomics; merge_stats (stats.cu) folds
//   them. With a softcap s (up to kSm90FixedReferenceMaxSoftcap), m = s: ẑ ≤ s
//   bounds every term, so one pass does it all; otherwise m = the row's max over
//   the tile, from a first pass over the accumulators.
//   ẑ at the row's target, by the one thread that holds that column.
//   With scaled_dz (bf16; sm90_scaled_dz, variants.hpp, says when), the tile holds
//   instead q = exp(ẑ − m)·g: dZ = a_i·q off the target,
//   a_i = c_i·(1 + 2λL_i)·exp(m − L_i) per row (flce-math.md's backward with
//   ε = 0), so the dZ pass over the tile is not needed. q is the sum's own term
//   times g, so it costs no exponential of its own. With a softcap, m = s and
//   g = 1 − tanh²(z/s): ẑ < s bounds q by 1. Without one, g = 1 and m is the
//   row's sampled reference (row_ref), or the tile's row max where that lies
//   more than kSm90RefSpan above it: the partial's m says which, and
//   scaled_dz_rows rescales such a row to one reference.
//   With approx_softcap (statistics only, for the forward alone), the bounded
//   softcap is one tanh.approx (device_math.cuh's tanh_approx says why only there).
// Rounding before the statistics makes the LSE that of the stored logits, so
// p = exp(ẑ − L) sums to one over what the dZ kernel reads, and the target's ẑ
// taken here is the same number: for a confident row L − ẑ_y is small, and a
// target logit computed apart (in fp32, unrounded) left it off by up to half a
// 16-bit ulp of ẑ, 0.06 at |ẑ| ≈ 20 (validate's confident cases, H200).
//
// Why by hand and not as an epilogue visitor tree: the tree built from stock
// nodes (a column reduction over a custom (m, d) element, a row broadcast for the
// bias) made the GEMM 1.5× slower than the same GEMM without it; ncu put the top
// stall on instruction-cache misses and divergence in the epilogue. Here the
// whole tile is reduced in registers: on Hopper's GMMA accumulator layout each
// row of a warp group's tile lives in the four lanes of one quad, so a row's
// statistics need two shuffles and no shared memory.
//
// Only this file knows CUTLASS's epilogue interface: a CUTLASS upgrade touches it.
#pragma once

#include <cmath>
#include <cstdint>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/detail.hpp"
#include "kernels/device_math.cuh"
#include "kernels/flce/sm90/fused.hpp"
#include "kernels/flce/sm90/variants.hpp"

namespace celtune::cuda::sm90 {

// The epilogue's lambdas are inlined, whatever their size: an outlined one takes
// the accumulators through the stack (with q's store beside z's, ptxas outlined
// the loop, and the logits GEMM ran 4.8× slower, H100).
#define CELTUNE_INLINE __attribute__((always_inline))

// A GMMA accumulator fragment ((2, 2, N/8), MMA_M, MMA_N) seen as (rows, cols):
// the middle 2 is the row pair (r, r + 8), the first 2 adjacent columns.
template <class Layout>
CUTE_HOST_DEVICE constexpr auto rowcol(Layout l) {
  using namespace cute;
  static_assert(decltype(rank<0>(l))::value == 3, "a Hopper GMMA accumulator layout");
  static_assert(decltype(size<0, 0>(l))::value == 2 && decltype(size<0, 1>(l))::value == 2, "GMMA C fragment");
  return make_layout(make_layout(get<0, 1>(l), get<1>(l)), make_layout(get<0, 0>(l), get<0, 2>(l), get<2>(l)));
}

// Two fp32 values rounded to the 16-bit input dtype in one conversion: the pair's
// bits, column c in the low half, as the tile stores them.
template <class Element>
CUTLASS_DEVICE uint32_t pack_pair(float a0, float a1) {
  if constexpr (cute::is_same_v<Element, cutlass::bfloat16_t>) {
    const __nv_bfloat162 p = __floats2bfloat162_rn(a0, a1);
    return reinterpret_cast<const uint32_t&>(p);
  } else {
    static_assert(cute::is_same_v<Element, cutlass::half_t>, "bf16 or fp16");
    const __half2 p = __floats2half2_rn(a0, a1);
    return reinterpret_cast<const uint32_t&>(p);
  }
}
// A packed pair back in fp32.
template <class Element>
CUTLASS_DEVICE void unpack_pair(uint32_t bits, float& f0, float& f1) {
  if constexpr (cute::is_same_v<Element, cutlass::bfloat16_t>) {
    f0 = __uint_as_float(bits << 16), f1 = __uint_as_float(bits & 0xffff0000u);
  } else {
    const float2 f = __half22float2(reinterpret_cast<const __half2&>(bits));
    f0 = f.x, f1 = f.y;
  }
}
// The larger of two packed pairs, lane by lane; a NaN lane takes the other's
// value, as fmaxf does (one HMNMX2).
template <class Element>
CUTLASS_DEVICE uint32_t max_pair(uint32_t a, uint32_t b) {
  if constexpr (cute::is_same_v<Element, cutlass::bfloat16_t>) {
    const __nv_bfloat162 m =
        __hmax2(reinterpret_cast<const __nv_bfloat162&>(a), reinterpret_cast<const __nv_bfloat162&>(b));
    return reinterpret_cast<const uint32_t&>(m);
  } else {
    const __half2 m = __hmax2(reinterpret_cast<const __half2&>(a), reinterpret_cast<const __half2&>(b));
    return reinterpret_cast<const uint32_t&>(m);
  }
}

// The tile is stored straight from registers, 16 bytes a lane where the tile lies
// inside the problem (put_pair: a transpose across each quad, no shared memory).
// Staging it in shared memory for coalesced 16-byte stores measured slower
// (Gemma-2-2B 9%, H100): the stage's 66 KB cost the mainloop one of its four
// pipeline stages.
template <class Element, bool StoreTile>
class CeStatsEpilogue {
 public:
  using ElementC = Element;  // no source is read; named for the kernel's type aliases
  using ElementD = Element;
  using ElementAccumulator = float;
  using StrideC = cute::Stride<int64_t, cute::_1, int64_t>;
  using StrideD = StrideC;
  using GmemTiledCopyC = void;
  using GmemTiledCopyD = void;
  struct ThreadEpilogueOp {  // read by GemmUniversalAdapter's type reflection only
    using ElementAccumulator = float;
    using ElementCompute = float;
    using ElementOutput = Element;
    using ElementD = Element;
  };
  struct SharedStorage {};
  using TensorStorage = SharedStorage;

  struct Arguments {
    Element* tile = nullptr;  // [rows, ld_tile], or null when not StoreTile
    int64_t ld_tile = 0;
    const Element* bias = nullptr;  // [cols] or null
    float softcap = 0.0f;           // 0: off
    LsePair* lse_partials = nullptr;
    float* sumz_partials = nullptr;  // null: no label smoothing
    int64_t rows_pad = 0;            // rows rounded up to BLOCK_M: the partials' row stride
    const void* targets = nullptr;   // [rows] int64 or int32, with z_target
    bool targets_i64 = true;
    float* z_target = nullptr;  // [rows]: ẑ at the row's target, or null
    bool scaled_dz = false;     // StoreTile: store q (file comment), not z
    const float* row_ref = nullptr;  // scaled_dz without a softcap: each row's reference m
    bool approx_softcap = false;  // !StoreTile: the bounded softcap as tanh.approx (file comment)
  };
  using Params = Arguments;

  template <class ProblemShape>
  static constexpr Params to_underlying_arguments(ProblemShape const&, Arguments const& a, void*) {
    return a;
  }
  template <class ProblemShape>
  static size_t get_workspace_size(ProblemShape const&, Arguments const&) {
    return 0;
  }
  template <class ProblemShape>
  static cutlass::Status initialize_workspace(ProblemShape const&, Arguments const&, void*, cudaStream_t,
                                              cutlass::CudaHostAdapter* = nullptr) {
    return cutlass::Status::kSuccess;
  }
  template <class ProblemShape>
  static bool can_implement(ProblemShape const&, Arguments const& a) {
    // scaled_dz: q against a bounded softcap (the one-pass sums) or against the
    // rows' references.
    const bool fixed = a.softcap > 0.0f && a.softcap <= kSm90FixedReferenceMaxSoftcap;
    const bool sampled = a.softcap == 0.0f && a.row_ref != nullptr;
    return a.lse_partials != nullptr && (!StoreTile || a.tile != nullptr) &&
           (!a.scaled_dz || (StoreTile && (fixed || sampled))) && (!a.approx_softcap || !StoreTile);
  }

  CUTLASS_HOST_DEVICE explicit CeStatsEpilogue(Params const& p, SharedStorage const& = SharedStorage()) : params(p) {}

  CUTLASS_DEVICE bool is_source_needed() { return false; }

  template <class ProblemShapeMNKL, class BlockShapeMNK, class BlockCoordMNKL, class FrgEngine, class FrgLayout,
            class TiledMma, class ResidueMNK>
  CUTLASS_DEVICE void operator()(ProblemShapeMNKL problem, BlockShapeMNK, BlockCoordMNKL blk_coord,
                                 cute::Tensor<FrgEngine, FrgLayout> const& accumulators, TiledMma tiled_mma, ResidueMNK,
                                 int thread_idx, char*) {
    using namespace cute;
    constexpr int kBM = size<0>(BlockShapeMNK{}), kBN = size<1>(BlockShapeMNK{});
    // Each row's BLOCK_N columns must sit in one warp group's quad: warp groups
    // tile M only (the cooperative and ping-pong schedules' layouts).
    static_assert(decltype(size<2>(typename TiledMma::ThrLayoutVMNK{}))::value == 1,
                  "warp groups must not split a tile's columns");
    const int64_t m_tile = get<0>(blk_coord), n_tile = get<1>(blk_coord);
    const int64_t m0 = m_tile * kBM, n0 = n_tile * kBN;
    const int valid_m = static_cast<int>(cute::min(int64_t{kBM}, int64_t(get<0>(problem)) - m0));
    const int valid_n = static_cast<int>(cute::min(int64_t{kBN}, int64_t(get<1>(problem)) - n0));
    if (valid_m <= 0 || valid_n <= 0) return;

    Tensor cD = make_identity_tensor(make_shape(Int<kBM>{}, Int<kBN>{}));
    Tensor tCcD = tiled_mma.get_thread_slice(thread_idx).partition_C(cD);
    Tensor acc = make_tensor(accumulators.data(), rowcol(accumulators.layout()));
    Tensor crd = make_tensor(tCcD.data(), rowcol(tCcD.layout()));
    constexpr int kR = decltype(size<0>(acc))::value, kC = decltype(size<1>(acc))::value;
    static_assert(kC % 2 == 0, "columns come in adjacent pairs");
    // Every accumulator rounded to the input dtype first, two columns a register
    // (the statistics are those of the rounded logits: file comment). The 192
    // floats of the ping-pong tile are dead from here, and 96 packed registers in
    // their place leave the loops below room to keep several elements in flight.
    // Rounded pair by pair inside the loops, the floats stayed live through them:
    // ptxas spilled 7 KB in the tile-storing GEMM (its mainloop reloaded two
    // values every k-block), the epilogue ran at ~6 cycles an instruction on
    // dependency stalls, and at Gemma-2-2B the tensor pipe was busy 72% of the
    // time. Packed first: 88%, the GEMM 1.90 → 1.69 ms a 1024-row chunk (H100,
    // docs/results.md, twenty-seventh session).
    uint32_t zb[kR][kC / 2];
    CUTLASS_PRAGMA_UNROLL
    for (int c = 0; c < kC; c += 2) {
      CUTLASS_PRAGMA_UNROLL
      for (int r = 0; r < kR; ++r) zb[r][c / 2] = pack_pair<Element>(acc(r, c), acc(r, c + 1));
    }

    float mx[kR], sum[kR], sz[kR];
    CUTLASS_PRAGMA_UNROLL
    for (int r = 0; r < kR; ++r) mx[r] = -INFINITY, sum[r] = 0.0f, sz[r] = 0.0f;
    const bool smoothing = params.sumz_partials != nullptr;
    const float inv_cap = params.softcap > 0.0f ? 1.0f / params.softcap : 0.0f;
    // Each row's target column within this tile, or −1 where it lies elsewhere or
    // the row is padding (one load a row and tile, from L2).
    int tcol[kR];
    CUTLASS_PRAGMA_UNROLL
    for (int r = 0; r < kR; ++r) {
      tcol[r] = -1;
      const int row = get<0>(crd(r, 0));
      if (params.z_target == nullptr || row >= valid_m) continue;
      const int64_t y = params.targets_i64 ? static_cast<const int64_t*>(params.targets)[m0 + row]
                                           : static_cast<const int32_t*>(params.targets)[m0 + row];
      if (y >= n0 && y < n0 + valid_n) tcol[r] = static_cast<int>(y - n0);
    }

    // Addresses as a pointer per row plus the column's offset from the thread's
    // first column, which is a constant once the loops unroll: from (m0 + row)·ld
    // + n0 + col, nvcc computed and kept a 64-bit address for every pair, and the
    // ping-pong tile's 192 accumulators left no registers for them (10 KB of
    // spills).
    const int col0 = get<1>(crd(0, 0));
    // ẑ at a row's target, kept by the thread that holds its column pair and
    // written after the loop: a store under a branch in every pair split the
    // loop into blocks that ptxas scheduled, and spilled, one by one. A thread
    // holds the pairs col0 + 8j (the GMMA C fragment: a quad's four lanes hold
    // eight adjacent columns of a row, two each), so whether it holds the target
    // is known before the loop, and a pair is the target's when the pair index
    // (col − col0)/2, a constant once the loops unroll, equals tpair: one compare
    // and a select a pair (a test of col against tcol and a flag kept per pair
    // were a sixth of Gemma-2-2B's epilogue instructions).
    float zt[kR];
    int tpair[kR];
    CUTLASS_PRAGMA_UNROLL
    for (int r = 0; r < kR; ++r) zt[r] = 0.0f, tpair[r] = tcol[r] < 0 ? -1 : (tcol[r] - col0) >> 1;
    auto target = [&](int r, int col, float x0, float x1) CELTUNE_INLINE {
      zt[r] = tpair[r] == (col - col0) >> 1 ? ((tcol[r] & 1) ? x1 : x0) : zt[r];
    };
    Element* row_at[kR] = {};
    if constexpr (StoreTile) {
      CUTLASS_PRAGMA_UNROLL
      for (int r = 0; r < kR; ++r) row_at[r] = params.tile + (m0 + get<0>(crd(r, 0))) * params.ld_tile + n0 + col0;
    }
    const Element* bias_at = params.bias ? params.bias + n0 + col0 : nullptr;
    auto store_pair = [&](int r, int col, bool ok1, uint32_t bits) CELTUNE_INLINE {
      Element* at = row_at[r] + (col - col0);
      if (ok1)
        *reinterpret_cast<uint32_t*>(at) = bits;
      else
        *reinterpret_cast<uint16_t*>(at) = static_cast<uint16_t>(bits);
    };
    // In a tile wholly inside the problem a row goes out 16 bytes a lane. The
    // GMMA C fragment gives each lane of a quad two columns of every 8-column
    // group of the row (col0 + 8j); four groups' pairs, once held, are
    // transposed across the quad (two rounds of shuffles: bit 0 of the lane and
    // the group, then bit 1) so that lane q holds group 4g + q's eight columns
    // whole. A warp's store then fills whole 32-byte sectors, with a quarter of
    // the store instructions of a pair a store, whose half-sector writes held
    // the mainloop back: the tile-storing GEMM of a 1024-row chunk of
    // Llama-3-8B, 2.19 → 2.10 M cycles, tensor pipe busy 91% → 95%, 1.453 →
    // 1.417 ms (H100, ncu; docs/results.md, forty-third session; the
    // statistics-only GEMM: 2.07 M, 96%). ld_tile keeps rows 16-byte aligned
    // (the tile is a TMA operand of the dX and dW GEMMs: check_tma). Not where
    // a softcap's q is stored (the one-pass branch below): there the epilogue
    // is bound by its exponentials' latency chains, not by the stores, and the
    // shuffles lengthen them (Gemma-2-2B's GEMM, 1024 rows: 2.51 M cycles and
    // tensor pipe busy 90% with pair stores, 2.73 M and 82% with these; H100,
    // ncu; docs/results.md, forty-fourth session).
    static_assert(kC % 8 == 0, "a row's pairs come in groups of four");
    const int lane_q = thread_idx & 3;  // the lane's place in its quad
    const bool odd_lane = lane_q & 1, high_lane = lane_q & 2;
    uint32_t held[kR][4];
    auto put_pair = [&](auto full, int r, int col, bool in, bool ok1, uint32_t bits) CELTUNE_INLINE {
      if constexpr (decltype(full)::value) {
        const int j = (col - col0) >> 3;  // the pair's group; a constant once the loops unroll
        held[r][j & 3] = bits;
        if ((j & 3) != 3) return;
        uint32_t(&v)[4] = held[r];
        CUTLASS_PRAGMA_UNROLL
        for (int k = 0; k < 4; k += 2) {
          const uint32_t got = __shfl_xor_sync(0xffffffffu, odd_lane ? v[k] : v[k + 1], 1);
          if (odd_lane)
            v[k] = got;
          else
            v[k + 1] = got;
        }
        CUTLASS_PRAGMA_UNROLL
        for (int k = 0; k < 2; ++k) {
          const uint32_t got = __shfl_xor_sync(0xffffffffu, high_lane ? v[k] : v[k + 2], 2);
          if (high_lane)
            v[k] = got;
          else
            v[k + 2] = got;
        }
        // From this lane's col0 (the quad's first column + 2q), group j − 3 =
        // 4g starts at col − col0 − 24, and group 4g + q at 8q − 2q past that.
        *reinterpret_cast<uint4*>(row_at[r] + (col - col0) - 24 + 6 * lane_q) = make_uint4(v[0], v[1], v[2], v[3]);
      } else if (in) {
        store_pair(r, col, ok1, bits);
      }
    };
    // Every adjacent column pair of each row this thread holds: f(r, col, in,
    // ok0, ok1, x0, x1, bits) with the pair rounded to the input dtype (bits, as
    // the tile stores them) and with its bias added (x); ok: the column is inside
    // the vocabulary, in: and the row inside the problem (the pair is stored).
    // has_bias and full (the tile lies wholly inside the problem) are compile-time
    // flags: the loop carries no test for what they rule out.
    auto each_pair = [&](auto has_bias, auto full, auto&& f) CELTUNE_INLINE {
      auto pair = [&](int r, int c, float b0, float b1) CELTUNE_INLINE {
        const int col = get<1>(crd(0, c));  // even; col + 1 is column c + 1
        const bool ok0 = full || col < valid_n, ok1 = full || col + 1 < valid_n;
        float x0, x1;
        const uint32_t bits = zb[r][c / 2];
        unpack_pair<Element>(bits, x0, x1);
        if constexpr (decltype(has_bias)::value) x0 += b0, x1 += b1;
        f(r, col, full || (ok0 && get<0>(crd(r, c)) < valid_m), ok0, ok1, x0, x1, bits);
      };
      if constexpr (decltype(has_bias)::value) {
        // Column by column, so each bias pair is loaded once for all rows.
        CUTLASS_PRAGMA_UNROLL
        for (int c = 0; c < kC; c += 2) {
          const int col = get<1>(crd(0, c));
          float b0 = 0.0f, b1 = 0.0f;
          if (full || col < valid_n) b0 = static_cast<float>(bias_at[col - col0]);
          if (full || col + 1 < valid_n) b1 = static_cast<float>(bias_at[col - col0 + 1]);
          CUTLASS_PRAGMA_UNROLL
          for (int r = 0; r < kR; ++r) pair(r, c, b0, b1);
        }
      } else {
        // Row by row: one row's state (its store pointer, reference, sums and
        // target) is live in the inner loop at a time. Against column by column
        // (the bias case's order), the tile-storing GEMM of a 1024-row chunk of
        // Llama-3-8B kept the tensor pipe busy 91% of the time against 87%,
        // 1.43 against 1.47 ms (H100, ncu; docs/results.md, forty-second
        // session).
        CUTLASS_PRAGMA_UNROLL
        for (int r = 0; r < kR; ++r) {
          CUTLASS_PRAGMA_UNROLL
          for (int c = 0; c < kC; c += 2) pair(r, c, 0.0f, 0.0f);
        }
      }
    };
    // Runs g(has_bias, full) with both flags as compile-time constants.
    auto with_flags = [&](auto&& g) CELTUNE_INLINE {
      const bool full = valid_m == kBM && valid_n == kBN;
      auto fit = [&](auto has_bias) CELTUNE_INLINE {
        if (full)
          g(has_bias, cute::true_type{});
        else
          g(has_bias, cute::false_type{});
      };
      if (params.bias)
        fit(cute::true_type{});
      else
        fit(cute::false_type{});
    };

    if (params.softcap > 0.0f && params.softcap <= kSm90FixedReferenceMaxSoftcap) {
      // One pass: with a softcap, ẑ ≤ s, so exp(ẑ − s) cannot overflow, and for
      // s ≤ kSm90FixedReferenceMaxSoftcap it stays above FLT_MIN (≥ e^(−2s)): the row
      // needs no max, and the partial's reference is s. No ẑ is kept for a second
      // pass (128 registers a thread fewer), and with scaled_dz the sum's own term
      // gives q = exp(ẑ − s)·(1 − tanh²) with no row factor; 1 − tanh² comes from
      // the softcap's own exponential (softcap_scaled), accurate where 1 − (ẑ/s)²
      // would cancel (|z| ≫ s). ẑ is taken in log2 units, y = ẑ·log2(e) =
      // sl·tanh(z/s) with sl = s·log2(e): the sum's exponent is then y − sl, one add.
      const float sl = params.softcap * kLog2e, k = -2.0f * kLog2e * inv_cap;
      auto bounded = [&](auto has_bias, auto full, auto store_q, auto store_z, auto approx) CELTUNE_INLINE {
        each_pair(has_bias, full,
            [&](int r, int col, bool in, bool ok0, bool ok1, float z0, float z1, uint32_t bits) CELTUNE_INLINE {
          if constexpr (decltype(store_z)::value)
            put_pair(full, r, col, in, ok1, bits);
          float e0, e1, r0, r1, y0, y1;
          if constexpr (decltype(approx)::value) {
            y0 = sl * tanh_approx(z0 * inv_cap), y1 = sl * tanh_approx(z1 * inv_cap);
          } else {
            y0 = softcap_scaled(z0, k, sl, &e0, &r0), y1 = softcap_scaled(z1, k, sl, &e1, &r1);
          }
          target(r, col, y0, y1);
          // With q stored, the terms are 4·exp(ẑ − s) (the sum is scaled back
          // after the loop, exactly), and q = that·(1 − tanh²)/4: one multiply
          // fewer an element.
          const float sl_t = decltype(store_q)::value ? sl - 2.0f : sl;
          const float t0 = ok0 ? exp2_approx(y0 - sl_t) : 0.0f;
          const float t1 = ok1 ? exp2_approx(y1 - sl_t) : 0.0f;
          sum[r] += t0 + t1;
          if (smoothing) sz[r] += (ok0 ? y0 : 0.0f) + (ok1 ? y1 : 0.0f);
          if constexpr (decltype(store_q)::value) {
            // q = exp(ẑ − s)·(1 − tanh²), a pair a store (put_pair's comment)
            put_pair(cute::false_type{}, r, col, in, ok1,
                     pack_pair<Element>(t0 * softcap_dtanh_quarter(e0, r0), t1 * softcap_dtanh_quarter(e1, r1)));
          }
        });
        if constexpr (decltype(store_q)::value) {
          CUTLASS_PRAGMA_UNROLL
          for (int r = 0; r < kR; ++r) sum[r] *= 0.25f;
        }
      };
      with_flags([&](auto has_bias, auto full) CELTUNE_INLINE {
        constexpr cute::true_type yes{};
        constexpr cute::false_type no{};
        if constexpr (StoreTile) {
          if (params.scaled_dz)
            bounded(has_bias, full, yes, no, no);
          else
            bounded(has_bias, full, no, yes, no);
        } else {
          if (params.approx_softcap)
            bounded(has_bias, full, no, no, yes);
          else
            bounded(has_bias, full, no, no, no);
        }
      });
      CUTLASS_PRAGMA_UNROLL
      for (int r = 0; r < kR; ++r) sz[r] *= kLn2, zt[r] *= kLn2;  // Σẑ from Σy, ẑ from y
      CUTLASS_PRAGMA_UNROLL
      for (int r = 0; r < kR; ++r) mx[r] = params.softcap;
    } else {
      // Two passes over the rounded logits, neither of which keeps ẑ: first each
      // row's reference m, the max of ẑ over the tile, then store z, bias,
      // softcap (above kSm90FixedReferenceMaxSoftcap), Σ exp(ẑ − m) and Σẑ. A
      // float copy of ẑ for the second pass would hold 128 (cooperative) or 192
      // (ping-pong) more registers a thread (most of the ping-pong tile kernel's
      // former 10 KB of spills were the per-pair store addresses, as the comment
      // on row_at says). The softcap is monotonic, so without a bias m =
      // softcap(max z) is the max of ẑ exactly; with one, the first pass adds the
      // bias itself. fmaxf (and HMNMX2) drop NaN; the sum carries it.
      auto row_max = [&](auto has_bias, auto full) CELTUNE_INLINE {
        auto take = [&](int r, bool ok0, bool ok1, float x0, float x1) CELTUNE_INLINE {
          mx[r] = fmaxf(mx[r], fmaxf(ok0 ? x0 : -INFINITY, ok1 ? x1 : -INFINITY));
        };
        if constexpr (decltype(has_bias)::value) {
          each_pair(has_bias, full,
              [&](int r, int, bool, bool ok0, bool ok1, float x0, float x1, uint32_t) CELTUNE_INLINE {
            take(r, ok0, ok1, x0, x1);
          });
        } else {
          // On the packed pairs, one HMNMX2 a pair; masked columns read as −inf.
          constexpr uint32_t kNegInf16 = cute::is_same_v<Element, cutlass::bfloat16_t> ? 0xff80u : 0xfc00u;
          CUTLASS_PRAGMA_UNROLL
          for (int r = 0; r < kR; ++r) {
            uint32_t m2 = kNegInf16 | kNegInf16 << 16;
            CUTLASS_PRAGMA_UNROLL
            for (int c = 0; c < kC; c += 2) {
              const int col = get<1>(crd(0, c));
              uint32_t b = zb[r][c / 2];
              if (!(full || col < valid_n)) b = (b & 0xffff0000u) | kNegInf16;
              if (!(full || col + 1 < valid_n)) b = (b & 0xffffu) | kNegInf16 << 16;
              m2 = max_pair<Element>(m2, b);
            }
            float lo, hi;
            unpack_pair<Element>(m2, lo, hi);
            mx[r] = fmaxf(lo, hi);
          }
        }
        CUTLASS_PRAGMA_UNROLL
        for (int r = 0; r < kR; ++r) {
          // The quad that shares a row holds all of its BLOCK_N columns.
          mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
          mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
          if (params.softcap > 0.0f) mx[r] = softcap_fast(mx[r], params.softcap, inv_cap);
        }
      };
      // With scaled_dz (no softcap here: scaled_dz's softcaps take the one-pass
      // branch) the tile takes q = exp(ẑ − m), the sum's term, in place of z.
      const bool store_q = StoreTile && params.scaled_dz;
      auto sums = [&](auto has_bias, auto full, auto capped) CELTUNE_INLINE {
        float ml[kR];  // (ẑ − m)·log2(e) = ẑ·log2(e) − ml: one FFMA an element
        CUTLASS_PRAGMA_UNROLL
        for (int r = 0; r < kR; ++r) ml[r] = mx[r] * kLog2e;
        each_pair(has_bias, full,
            [&](int r, int col, bool in, bool ok0, bool ok1, float x0, float x1, uint32_t bits) CELTUNE_INLINE {
          if constexpr (decltype(capped)::value) {
            x0 = softcap_fast(x0, params.softcap, inv_cap);
            x1 = softcap_fast(x1, params.softcap, inv_cap);
          }
          target(r, col, x0, x1);
          // Masked columns add nothing; a row of NaN (m = −inf) sums to NaN.
          const float t0 = ok0 ? exp2_approx(fmaf(x0, kLog2e, -ml[r])) : 0.0f;
          const float t1 = ok1 ? exp2_approx(fmaf(x1, kLog2e, -ml[r])) : 0.0f;
          sum[r] += t0 + t1;
          if (smoothing) sz[r] += (ok0 ? x0 : 0.0f) + (ok1 ? x1 : 0.0f);
          if constexpr (StoreTile)
            put_pair(full, r, col, in, ok1, store_q ? pack_pair<Element>(t0, t1) : bits);
        });
      };
      // The sampled reference m_i where the tile's max lies within kSm90RefSpan
      // of it (q ≤ e^span), else the tile's own max; a reference that is not
      // finite (a NaN or inf in the row's samples) is never taken.
      auto take_reference = [&]() CELTUNE_INLINE {
        CUTLASS_PRAGMA_UNROLL
        for (int r = 0; r < kR; ++r) {
          const int row = get<0>(crd(r, 0));
          const float ref = row < valid_m ? params.row_ref[m0 + row] : 0.0f;
          if (isfinite(ref) && mx[r] <= ref + kSm90RefSpan) mx[r] = ref;
        }
      };
      with_flags([&](auto has_bias, auto full) CELTUNE_INLINE {
        row_max(has_bias, full);
        if (store_q) take_reference();
        if (params.softcap > 0.0f)
          sums(has_bias, full, cute::true_type{});
        else
          sums(has_bias, full, cute::false_type{});
      });
    }
    CUTLASS_PRAGMA_UNROLL
    for (int r = 0; r < kR; ++r) {
      sum[r] += __shfl_xor_sync(0xffffffffu, sum[r], 1);
      sum[r] += __shfl_xor_sync(0xffffffffu, sum[r], 2);
      if (smoothing) {
        sz[r] += __shfl_xor_sync(0xffffffffu, sz[r], 1);
        sz[r] += __shfl_xor_sync(0xffffffffu, sz[r], 2);
      }
    }
    CUTLASS_PRAGMA_UNROLL
    for (int r = 0; r < kR; ++r)
      if (tcol[r] >= 0 && ((tcol[r] - col0) & 7) < 2) params.z_target[m0 + get<0>(crd(r, 0))] = zt[r];
    if (thread_idx % 4 != 0) return;  // one lane of the quad writes the row's partial
    CUTLASS_PRAGMA_UNROLL
    for (int r = 0; r < kR; ++r) {
      const int row = get<0>(crd(r, 0));
      if (row >= valid_m) continue;
      const int64_t at = n_tile * params.rows_pad + m0 + row;
      params.lse_partials[at] = LsePair{mx[r], sum[r]};
      if (smoothing) params.sumz_partials[at] = sz[r];
    }
  }

 private:
  Params params;
};

// The kernel-facing form: the adapter gives it the TMA epilogue's interface
// (no loads, no store pipeline) and calls operator() once per output tile.
template <class Element, bool StoreTile>
using CeEpilogue = cutlass::epilogue::collective::detail::Sm90TmaWarpSpecializedAdapter<CeStatsEpilogue<Element, StoreTile>>;

}  // namespace celtune::cuda::sm90
