// CE kernels: cross-entropy over a tile of logits, online softmax in BLOCK_SIZE-wide tiles.
//
// What they compute (flce-math.md steps 2–5 and the backward): for each row of a
// logits tile, ẑ = softcap(z); the running (max m, sum-exp d) pair is updated one
// BLOCK_SIZE tile at a time and merged across threads, and across vocabulary
// chunks through the RowState in device memory, with the ⊕ rule. On the chunk
// that completes a row, L = m + log d, the per-token loss and the LSE are written;
// dZ = c·((1+2λL)p − (1−ε)[j=y] − ε/V)·(1 − (ẑ/s)²) is formed in fp32 (the target
// term before rounding) and written over the tile in the input dtype.
//
// Variants: fold (one block per row or per chunk of rows; with `grad`, also dZ
// in the same kernel when the tile holds whole rows: flce's one pass), grad (dZ
// from the final LSE: pass 2, and split rows), part + merge (the ce family's
// rows split into segments, one block each, so a few rows still fill the GPU),
// cluster (ce forward+backward with the row held on chip: bulk copies into
// shared memory, split among a thread-block cluster when it does not fit one
// block). Chosen by the flce schedule and the ce family from the config.
//
// Mapping: each thread owns ELEMS consecutive elements of every BLOCK_SIZE =
// ELEMS × threads tile, loaded with the widest aligned vector loads (16 bytes
// when possible), so a warp reads contiguous memory; rows that start off the
// 16-byte grid take a few masked elements first. ELEMS is the compile-time part
// (registers must be indexed by constants); the table below instantiates ELEMS ∈
// {1, …, 32} per dtype and maps the runtime config to a kernel pointer. threads
// stays a runtime launch parameter.
#include <cooperative_groups.h>
#include <cub/device/device_radix_sort.cuh>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <type_traits>

#include "ce.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/device_math.cuh"
#include "kernels/flce/sm90/variants.hpp"

namespace celtune::cuda {
namespace {

namespace cg = cooperative_groups;

template <int BYTES>
struct VecT;
template <>
struct VecT<16> {
  using type = uint4;
};
template <>
struct VecT<8> {
  using type = uint2;
};
template <>
struct VecT<4> {
  using type = uint32_t;
};
template <>
struct VecT<2> {
  using type = uint16_t;
};

// The widest access one thread's ELEMS elements allow, capped at 16 bytes.
template <typename T, int ELEMS>
struct Access {
  static constexpr int kBytes = (ELEMS * int(sizeof(T)) < 16) ? ELEMS * int(sizeof(T)) : 16;
  static constexpr int kPer = kBytes / int(sizeof(T));
  using V = typename VecT<kBytes>::type;
  static_assert(ELEMS % kPer == 0, "a thread's elements split into whole vectors");
};

constexpr float kNegInf = -INFINITY;

// (m, d) ⊕ (m2, d2), flce-math.md step 3. exp(−inf) = 0 handles one empty side;
// two empty sides stay empty instead of producing exp(−inf − −inf) = NaN.
__device__ __forceinline__ void merge(float& m, float& d, float m2, float d2) {
  const float M = fmaxf(m, m2);
  if (M == kNegInf) return;
  d = d * __expf(m - M) + d2 * __expf(m2 - M);
  m = M;
}

// Partials (m, d, Σẑ, ẑ_target) q[0..n) folded into (m, d, zs, zt) in a fixed
// order, the max first: every d is scaled once to the common max, so the n
// exponentials are independent, where merge's chain took two at each of n
// dependent steps (a cluster's 16 blocks: 16 steps, on a few rows' path).
// An empty partial (m = −inf) adds nothing; all empty stays (m, d) as it was.
template <typename Q>
__device__ __forceinline__ void merge_span(float& m, float& d, float& zs, float& zt, int n, Q q) {
  float M = m;
  for (int k = 0; k < n; ++k) M = fmaxf(M, q(k).x);
  float s = M == kNegInf || m == kNegInf ? 0.0f : d * __expf(m - M);
  for (int k = 0; k < n; ++k) {
    const float4 e = q(k);
    if (e.x != kNegInf) s += e.y * __expf(e.x - M);
    zs += e.z, zt += e.w;
  }
  if (M != kNegInf) m = M, d = s;
}

__device__ __forceinline__ int64_t target_of(const LossParams& p, int64_t row) {
  return p.targets_i64 ? static_cast<const int64_t*>(p.targets)[row]
                       : static_cast<int64_t>(static_cast<const int32_t*>(p.targets)[row]);
}

// Starts a row's target on its way into L2 without holding a register for it:
// the split statistics read it only after their sweep, which at a few rows made
// its load from device memory one more round trip at the end of the call, and
// part_kernel_64 has no register to spare through the sweep.
__device__ __forceinline__ void prefetch_target(const LossParams& p, int64_t row) {
  const void* a = p.targets_i64 ? static_cast<const void*>(static_cast<const int64_t*>(p.targets) + row)
                                : static_cast<const void*>(static_cast<const int32_t*>(p.targets) + row);
  asm volatile("prefetch.global.L2 [%0];" ::"l"(a));
}

// Valid: not ignored and inside [0, V). Out-of-range targets are reported by
// count_targets; here they are treated as ignored so no kernel reads out of bounds.
__device__ __forceinline__ bool valid_target(const LossParams& p, int64_t y) {
  return y != p.ignore_index && y >= 0 && y < p.vocab;
}

// The per-token scale c_i of flce-math.md, with n valid targets.
__device__ __forceinline__ float token_scale(const LossParams& p, int64_t row, int64_t y, int64_t n) {
  if (!valid_target(p, y)) return 0.0f;
  switch (p.reduction) {
    case Reduction::mean: return n ? *p.grad_scale / static_cast<float>(n) : 0.0f;
    case Reduction::sum: return *p.grad_scale;
    case Reduction::none: return p.grad_tokens[row];
  }
  return 0.0f;
}
// a·v, or 0 where a = 0: a row the loss ignores contributes nothing, whatever
// (NaN, inf) its scaled operand held (scaled_dz_rows and its consumers).
__device__ __forceinline__ float scaled_by(float a, float v) { return a == 0.0f ? 0.0f : a * v; }

// n read from count_targets' result (mean only: the others never touch it).
__device__ __forceinline__ float token_scale(const LossParams& p, int64_t row, int64_t y) {
  return token_scale(p, row, y, p.reduction == Reduction::mean && valid_target(p, y) ? *p.n_valid : 0);
}

// The bias for columns col … col+ELEMS of the problem, added in fp32 (flce only).
template <typename T, int ELEMS>
__device__ __forceinline__ void add_bias(const LossParams& p, int64_t col, int64_t valid, float (&x)[ELEMS]) {
  if (!p.bias) return;
  const T* b = static_cast<const T*>(p.bias);
#pragma unroll
  for (int k = 0; k < ELEMS; ++k)
    if (k < valid) x[k] += Conv<T>::to(b[col + k]);
}

// Elements at or past `limit` read as −inf (they vanish in the max and in exp)
// and are not written: the ragged head and tail of a row. Whole tiles take the
// wide, pipelined path (Raw) instead.
template <typename T, int ELEMS>
__device__ __forceinline__ void load_masked(const T* row, int64_t start, int64_t limit, float (&x)[ELEMS]) {
#pragma unroll
  for (int k = 0; k < ELEMS; ++k) x[k] = (start + k < limit) ? Conv<T>::to(row[start + k]) : kNegInf;
}

template <typename T, int ELEMS>
__device__ __forceinline__ void store_masked(T* row, int64_t start, int64_t limit, const float (&x)[ELEMS]) {
#pragma unroll
  for (int k = 0; k < ELEMS; ++k)
    if (start + k < limit) row[start + k] = Conv<T>::from(x[k]);
}

// One thread's ELEMS elements of a tile as raw vectors: what is in flight while
// earlier tiles are being computed (software pipelining: the loads of tile t+D
// are issued before tile t's arithmetic, so memory latency overlaps it).
template <typename T, int ELEMS>
struct Raw {
  using A = Access<T, ELEMS>;
  static constexpr int kVecs = ELEMS / A::kPer;
  typename A::V v[kVecs];
  __device__ __forceinline__ void load(const T* p) {
#pragma unroll
    for (int i = 0; i < kVecs; ++i) v[i] = *reinterpret_cast<const typename A::V*>(p + i * A::kPer);
  }
  __device__ __forceinline__ void store(T* p) const {
#pragma unroll
    for (int i = 0; i < kVecs; ++i) *reinterpret_cast<typename A::V*>(p + i * A::kPer) = v[i];
  }
  __device__ __forceinline__ void to_float(float (&x)[ELEMS]) const {
    if constexpr (std::is_same_v<T, __nv_bfloat16> && ELEMS % 2 == 0) {
      // A bf16 is the top half of its float: a shift or a mask a value, where
      // the conversion intrinsic took a PRMT and a shift for the upper one.
      const uint32_t* w = reinterpret_cast<const uint32_t*>(v);
#pragma unroll
      for (int j = 0; j < ELEMS / 2; ++j) {
        x[2 * j] = __uint_as_float(w[j] << 16);
        x[2 * j + 1] = __uint_as_float(w[j] & 0xffff0000u);
      }
    } else {
#pragma unroll
      for (int i = 0; i < kVecs; ++i) {
        const T* e = reinterpret_cast<const T*>(&v[i]);
#pragma unroll
        for (int q = 0; q < A::kPer; ++q) x[i * A::kPer + q] = Conv<T>::to(e[q]);
      }
    }
  }
  __device__ __forceinline__ void from_float(const float (&x)[ELEMS]) {
#pragma unroll
    for (int i = 0; i < kVecs; ++i) {
      T* e = reinterpret_cast<T*>(&v[i]);
#pragma unroll
      for (int q = 0; q < A::kPer; ++q) e[q] = Conv<T>::from(x[i * A::kPer + q]);
    }
  }
};

// Tiles a thread keeps in flight on the whole-tile path: about 64 bytes, at most
// four tiles. One tile ahead (16 bytes a thread at bf16 × 8) read the H200 at 71–
// 80% of its copy bandwidth: too few bytes in flight for its memory latency.
template <typename T, int ELEMS>
inline constexpr int kDepth = std::clamp(64 / (ELEMS * static_cast<int>(sizeof(T))), 1, 4);

// How a sweep covers `cols` elements of a row: `head` elements up to the first
// address Raw's vectors may load from (a ce problem at an odd V, GPT-2's 50257,
// starts its rows anywhere), then n_full whole tiles on the pipelined path, then
// a last partial tile whose whole vectors still load wide (`vec`) and whose last
// few elements are masked. Reading one row and writing another (dZ into a
// separate buffer) needs both at the same offset from alignment; otherwise
// everything is masked. The shared-memory cache is indexed from `head`.
template <typename T, int ELEMS>
struct Sweep {
  int64_t head, n_full, body_end;
  bool vec;
  __device__ __forceinline__ Sweep(const T* in, const T* out, int64_t cols, int64_t block) {
    constexpr uintptr_t kB = Access<T, ELEMS>::kBytes;
    const uintptr_t a = reinterpret_cast<uintptr_t>(in), b = reinterpret_cast<uintptr_t>(out);
    vec = (a - b) % kB == 0;
    head = vec ? min(cols, static_cast<int64_t>((kB - a % kB) % kB / sizeof(T))) : cols;
    n_full = (cols - head) / block;
    body_end = head + n_full * block;
  }
};

// exp(x − m) from shift_of<T>(m): m·log2 e for 16-bit inputs, m for fp32. The CE
// kernels are bound by instruction issue on the H200 at short rows
// (docs/results.md: schedulers busy 87–89% of cycles at V = 32000), so for
// 16-bit inputs log2 e is folded into one FFMA before ex2; its error grows with
// |m| (a few 1e-6 relative at |m| ≈ 100), far under their own rounding (4e-3
// for bf16). fp32 inputs take x − m first, exactly: the folded form failed fp32
// validation at large logits (dZ off by 1.5e-6 where the bound was ~1e-9 +
// 5e-5·max|ref|).
template <typename T>
__device__ __forceinline__ float shift_of(float m) {
  if constexpr (std::is_same_v<T, float>)
    return m;
  else
    return m * kLog2e;
}
template <typename T>
__device__ __forceinline__ float exp_shifted(float x, float shift) {
  if constexpr (std::is_same_v<T, float>)
    return exp2_approx((x - shift) * kLog2e);
  else
    return exp2_approx(fmaf(x, kLog2e, -shift));
}

// A row's LSE as an unevaluated sum hi + lo: hi = L rounded to fp32 (the lse
// output), lo what that rounding dropped. A confident token's loss L − ẑ_y and
// its gradient's exp(ẑ_y − L) are a few 1e-6 or less, and one ulp of L is 1e-6
// at |L| ≈ 10 (4e-6 at 60): formed from hi alone they carried that as error, up
// to all of their value, where PyTorch, keeping m and log d apart, is exact to
// fp32's 6e-8. From hi + lo they are too (flce-math.md steps 3–5).
// `folded`: 16-bit inputs, whose d summed 2^(z·log2 e − fl(m·log2 e)) (shift_of),
// so d carries 2^δ, δ = m·log2 e − fl(m·log2 e), exactly the FMA's residual
// below, which comes off log d. Not finite (a row all −inf, +inf, NaN): lo = 0,
// and hi is m + log d as it always was.
struct Lse {
  float hi, lo;
};
__device__ __forceinline__ Lse lse_of(float m, float d, bool folded) {
  float ld = logf(d);
  if (folded && isfinite(m)) ld -= kLn2 * fmaf(m, kLog2e, -(m * kLog2e));
  const float hi = m + ld;
  // m − hi is exact where it matters: hi within a factor 2 of m (Sterbenz), as
  // it is wherever log d is small against |m|.
  return {hi, isfinite(hi) ? (m - hi) + ld : 0.0f};
}
template <typename T>
__device__ __forceinline__ Lse lse_of(float m, float d) {
  return lse_of(m, d, !std::is_same_v<T, float>);
}
// The LSE as GradOp takes it: hi, and `rest`, what turns exp_shifted<T>(z,
// shift_of<T>(hi)) into exp(z − (hi + lo)): e^−lo, and for 16-bit inputs 2^−δ
// for the shift's own rounding (fl(hi·log2 e)). rest is 1 where hi is not finite
// (lo is 0 there), so those rows' dZ is what it always was. Formed once a row,
// by the thread that merged it, and shared like L was: each thread forming it
// (an exp2 and its FMAs) is work the 64-register kernels may redo every tile.
struct GradLse {
  float hi, rest;
};
template <typename T>
__device__ __forceinline__ GradLse grad_lse(Lse L) {
  if (!isfinite(L.hi)) return {L.hi, 1.0f};
  float e = L.lo * kLog2e;
  if constexpr (!std::is_same_v<T, float>) e += fmaf(L.hi, kLog2e, -shift_of<T>(L.hi));
  return {L.hi, exp2_approx(-e)};
}

// op over N values in four interleaved chains, then a tree over the four, in a
// fixed order. One chain of N dependent max or add steps (the form the compiler
// keeps: it may not reassociate them) had the fused ce kernel's warps stalled on
// fixed-latency results a quarter of the time on the H200 (ncu "wait", V =
// 256000, N = 8192, forward+backward, 24 warps an SM). A full tree keeps every
// exponential live at once, which spilled the 64-register kernels.
template <int N, typename Op>
__device__ __forceinline__ float tree_reduce(const float (&x)[N], Op op) {
  constexpr int kLanes = N < 4 ? N : 4;
  float t[kLanes];
#pragma unroll
  for (int k = 0; k < kLanes; ++k) t[k] = x[k];
#pragma unroll
  for (int k = kLanes; k < N; ++k) t[k % kLanes] = op(t[k % kLanes], x[k]);
#pragma unroll
  for (int w = 1; w < kLanes; w *= 2)
#pragma unroll
    for (int k = 0; k + w < kLanes; k += 2 * w) t[k] = op(t[k], t[k + w]);
  return t[0];
}

// The online update of a thread's (max m, sum-exp d, Σẑ) by one tile's values:
// bias, softcap, then the fold. Elements k ≥ valid are masked (−inf). Branches on
// the softcap and on label smoothing are taken once per tile, not per element.
// NaN is not tested here: max_nan carries it into m and d, where the block
// checks once (block_partial). Σẑ is only needed under label smoothing.
// kPlain: the caller has found no bias, softcap or label smoothing, so the tile
// skips their tests and the bias's address (see plain_logits).
// kTree: the max and the sum of exponentials as tree_reduce forms them, else as
// chains. Wider tiles keep the chains by default: their trees spilled the
// 64-register kernels, and each of their chains already has twice the
// independent work. The fused kernel's pair of 8-element tiles asks for the
// tree at 16 (kPairs): there it fits.
template <typename T, int ELEMS, bool kPlain = false, bool kTree = (ELEMS <= 8)>
__device__ __forceinline__ void fold_tile(const LossParams& p, int64_t col, int64_t valid, float (&x)[ELEMS], float& tm,
                                          float& td, float& tzs) {
  if constexpr (!kPlain) {
    add_bias<T, ELEMS>(p, col, valid, x);
    const float s = p.softcap;
    if (s > 0.0f) {
      const float inv_s = 1.0f / s;
#pragma unroll
      for (int k = 0; k < ELEMS; ++k) x[k] = softcap_fast(x[k], s, inv_s);
    }
  }
  float lm = kNegInf;
#pragma unroll
  for (int k = 0; k < ELEMS; ++k) {
    if (k < valid) {
      if constexpr (!kTree) lm = max_nan(lm, x[k]);
    } else {
      x[k] = kNegInf;  // softcap made the masked −inf finite again
    }
  }
  if constexpr (kTree) lm = tree_reduce(x, [](float a, float b) { return max_nan(a, b); });
  if (!kPlain && p.label_smoothing > 0.0f) {
#pragma unroll
    for (int k = 0; k < ELEMS; ++k)
      if (k < valid) tzs += x[k];
  }
  const float nm = max_nan(tm, lm);
  if (nm == kNegInf) return;
  const float shift = shift_of<T>(nm);
  float acc = 0.0f;
  if constexpr (kTree) {
    float e[ELEMS];
#pragma unroll
    for (int k = 0; k < ELEMS; ++k) e[k] = exp_shifted<T>(x[k], shift);  // masked: exp(−inf) = 0
    acc = tree_reduce(e, [](float a, float b) { return a + b; });
  } else {
#pragma unroll
    for (int k = 0; k < ELEMS; ++k) acc += exp_shifted<T>(x[k], shift);
  }
  td = td * exp_shifted<float>(tm, nm) + acc;
  tm = nm;
}

// Logits that the fold takes as they are: no bias, no softcap, no label
// smoothing (the common case, and the one fold_tile<…, true> compiles for).
__device__ __forceinline__ bool plain_logits(const LossParams& p) {
  return p.bias == nullptr && !(p.softcap > 0.0f) && !(p.label_smoothing > 0.0f);
}

// One thread's running statistics.
struct ThreadStats {
  float m = kNegInf, d = 0.0f, zs = 0.0f;
};

// One masked tile of a sweep: this thread's elements from `start` up to `limit`.
template <typename T, int ELEMS, bool kPlain = false>
__device__ __forceinline__ void fold_masked(const T* row, int64_t start, int64_t limit, int64_t v0,
                                            const LossParams& p, ThreadStats& t) {
  float x[ELEMS];
  load_masked<T, ELEMS>(row, start, limit, x);
  fold_tile<T, ELEMS, kPlain>(p, v0 + start, limit - start, x, t.m, t.d, t.zs);
}

// Folds this thread's share of `cols` elements of a row (problem column v0 first)
// into t. `cache` (the fused one-block path) receives the wide-loaded elements so
// the gradient sweep can read them from shared memory instead of device memory.
template <typename T, int ELEMS>
__device__ __forceinline__ void thread_stats(const T* row, int64_t cols, int64_t v0, const LossParams& p, T* cache,
                                             int64_t cache_elems, ThreadStats& t) {
  const int64_t block = int64_t{ELEMS} * blockDim.x, mine = int64_t{threadIdx.x} * ELEMS;
  const Sweep<T, ELEMS> sw(row, row, cols, block);
  auto masked = [&](int64_t base, int64_t limit) { fold_masked<T, ELEMS>(row, base + mine, limit, v0, p, t); };
  auto keep = [&](const Raw<T, ELEMS>& r, int64_t start) {
    if (start - sw.head + ELEMS <= cache_elems) r.store(cache + (start - sw.head));
  };
  if (sw.head > 0)
    for (int64_t base = 0; base < sw.head; base += block) masked(base, sw.head);
  constexpr int D = kDepth<T, ELEMS>;
  Raw<T, ELEMS> buf[D];
#pragma unroll
  for (int j = 0; j < D; ++j)
    if (j < sw.n_full) buf[j].load(row + sw.head + j * block + mine);
  for (int64_t q = 0; q < sw.n_full; q += D) {
#pragma unroll
    for (int j = 0; j < D; ++j) {
      if (q + j >= sw.n_full) break;
      const int64_t start = sw.head + (q + j) * block + mine;
      keep(buf[j], start);
      float x[ELEMS];
      buf[j].to_float(x);
      if (q + j + D < sw.n_full) buf[j].load(row + start + D * block);
      fold_tile<T, ELEMS>(p, v0 + start, ELEMS, x, t.m, t.d, t.zs);
    }
  }
  if (sw.body_end < cols) {  // the last partial tile: whole vectors wide, the rest masked
    const int64_t start = sw.body_end + mine;
    if (start + ELEMS <= cols) {
      Raw<T, ELEMS> r;
      r.load(row + start);
      keep(r, start);
      float x[ELEMS];
      r.to_float(x);
      fold_tile<T, ELEMS>(p, v0 + start, ELEMS, x, t.m, t.d, t.zs);
    } else {
      masked(sw.body_end, cols);
    }
  }
}

// thread_stats for part_kernel_64's plain logits (no bias, softcap or smoothing;
// no cache; 16-bit, 8 elements a thread), where the split statistics are issue-bound
// (V = 32000, N = 1024 on the H200: 61% of cycles issuing, ~16 instructions an
// element). Whole tiles fold without the per-tile tests, their offsets count in
// 32 bits (the caller checks the row fits), and in the steady state each tile's
// successor D tiles on is loaded without a condition, so it lands in the
// registers just converted: ~64 instructions a tile of 8 bf16 against ~85. Wider
// tiles keep thread_stats: this sweep raised their registers past the occupancy
// they need at large N (docs/results.md, thirty-first session).
template <typename T, int ELEMS>
__device__ __forceinline__ void plain_stats(const T* row, int64_t cols, int64_t v0, const LossParams& p,
                                            ThreadStats& t) {
  const int64_t block = int64_t{ELEMS} * blockDim.x, mine = int64_t{threadIdx.x} * ELEMS;
  const Sweep<T, ELEMS> sw(row, row, cols, block);
  auto masked = [&](int64_t base, int64_t limit) { fold_masked<T, ELEMS, true>(row, base + mine, limit, v0, p, t); };
  if (sw.head > 0)
    for (int64_t base = 0; base < sw.head; base += block) masked(base, sw.head);
  const T* const body = row + sw.head;
  const int n_full = static_cast<int>(sw.n_full), step = static_cast<int>(block), first = static_cast<int>(mine);
  constexpr int D = kDepth<T, ELEMS>;
  Raw<T, ELEMS> buf[D];
#pragma unroll
  for (int j = 0; j < D; ++j)
    if (j < n_full) buf[j].load(body + j * step + first);
  auto group = [&](int q, auto steady) {
#pragma unroll
    for (int j = 0; j < D; ++j) {
      if (!decltype(steady)::value && q + j >= n_full) break;
      const int off = (q + j) * step + first;
      float x[ELEMS];
      buf[j].to_float(x);
      if (decltype(steady)::value || q + j + D < n_full) buf[j].load(body + off + D * step);
      fold_tile<T, ELEMS, true>(p, 0, ELEMS, x, t.m, t.d, t.zs);
    }
  };
  int q = 0;
  for (; q + 2 * D <= n_full; q += D) group(q, std::true_type{});
  for (; q < n_full; q += D) group(q, std::false_type{});
  if (sw.body_end < cols) {
    const int64_t start = sw.body_end + mine;
    if (start + ELEMS <= cols) {
      Raw<T, ELEMS> r;
      r.load(row + start);
      float x[ELEMS];
      r.to_float(x);
      fold_tile<T, ELEMS, true>(p, v0 + start, ELEMS, x, t.m, t.d, t.zs);
    } else {
      masked(sw.body_end, cols);
    }
  }
}

// A row's softmax statistics over a span: (max m, Σ exp(ẑ − m), Σẑ).
struct Partial {
  float m, d, zs;
};

// A float's order as a signed integer (its bits, the negative ones' magnitude
// bits flipped): ordered_key(a) < ordered_key(b) where a < b, for every
// non-NaN float, ±0 and ±inf included. The map is its own inverse, so a warp's
// max is one redux instruction (__reduce_max_sync takes integers on sm_90).
// A NaN's key lies past +inf's with its sign bit clear and below −inf's with it
// set, so warp_max would take the one and drop the other: its callers take NaN
// aside first (block_partial does).
__device__ __forceinline__ int ordered_key(float x) {
  const int i = __float_as_int(x);
  return i >= 0 ? i : i ^ 0x7fffffff;
}
__device__ __forceinline__ float warp_max(float x) {
  const int k = __reduce_max_sync(0xffffffffu, ordered_key(x));
  return __int_as_float(k >= 0 ? k : k ^ 0x7fffffff);
}

// The block's Partial from every thread's statistics; valid in thread 0. The
// block's max first (a redux a warp, one exchange through shared memory), then
// each thread's d scaled to it once and summed: one exponential a thread. The
// butterflies of pairwise merges this replaces (ten dependent steps of two
// shuffles and two exponentials each) were a third of a few rows' spread
// forward past its reads (H100, scripts/probe/finish.cu: ~0.9 µs of 8.5).
__device__ __forceinline__ Partial block_partial(ThreadStats t) {
  // NaN inputs must give a NaN loss (as PyTorch): poison d, and give m a finite
  // value so the max below (which would take a NaN past +inf, or drop one with
  // its sign bit set: ordered_key) never sees one. A NaN anywhere in the thread's values is a NaN in its m (max_nan) or
  // its d (+inf beside −inf: exp(inf − inf)).
  if (isnan(t.m) || isnan(t.d)) t.d = NAN, t.m = 0.0f;
  __shared__ float sm[32], sd[32], sz[32];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, nwarps = blockDim.x / 32;
  float M = warp_max(t.m);
  if (lane == 0) sm[warp] = M;
  __syncthreads();
  M = sm[0];
#pragma unroll 1
  for (int w = 1; w < nwarps; ++w) M = fmaxf(M, sm[w]);
  // An empty thread (m = −inf) adds nothing; an empty block (M = −inf) stays d = 0.
  float d = t.m == kNegInf ? 0.0f : t.d * __expf(t.m - M), zs = t.zs;
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    d += __shfl_xor_sync(0xffffffffu, d, off);
    zs += __shfl_xor_sync(0xffffffffu, zs, off);
  }
  if (lane == 0) sd[warp] = d, sz[warp] = zs;
  __syncthreads();
  // sm is not written again before every thread has passed the barrier above, nor
  // sd and sz before thread 0 has reached the first barrier of a next call.
  if (threadIdx.x == 0)
#pragma unroll 1
    for (int w = 1; w < nwarps; ++w) d += sd[w], zs += sz[w];
  return {M, d, zs};
}

template <typename T, int ELEMS>
__device__ __forceinline__ Partial row_stats(const T* row, int64_t cols, int64_t v0, const LossParams& p, T* cache,
                                             int64_t cache_elems) {
  ThreadStats t;
  thread_stats<T, ELEMS>(row, cols, v0, p, cache, cache_elems, t);
  return block_partial(t);
}

// ẑ at the target if it lies in columns [v0, v0+cols) held at `row`, else 0
// (partials add their target terms: exactly one is non-zero).
template <typename T>
__device__ __forceinline__ float target_logit(const LossParams& p, const T* row, int64_t v0, int64_t cols, int64_t y) {
  if (!valid_target(p, y) || y < v0 || y >= v0 + cols) return 0.0f;
  float z = Conv<T>::to(row[y - v0]);
  if (p.bias) z += Conv<T>::to(static_cast<const T*>(p.bias)[y]);
  return p.softcap > 0.0f ? softcap_fast(z, p.softcap, 1.0f / p.softcap) : z;
}

// The row's loss from its merged statistics (flce-math.md step 5). Without
// label smoothing its term is left out, not multiplied by 0: a logit of −inf
// (a masked column) makes Σẑ −inf, and 0·(−inf) was a NaN loss where PyTorch's
// is finite (as is every other output here). L − ẑ_y as (hi − ẑ_y) + lo: exact
// where ẑ_y is the row's max (hi − m is), the loss then log d to fp32's precision.
__device__ __forceinline__ float row_loss(const LossParams& p, Lse L, float zs, float zt, int64_t y) {
  if (!valid_target(p, y)) return 0.0f;
  const float eps = p.label_smoothing;
  const float smooth = eps > 0.0f ? eps * ((L.hi - zs / static_cast<float>(p.vocab)) + L.lo) : 0.0f;
  return (1.0f - eps) * ((L.hi - zt) + L.lo) + smooth + p.z_loss * L.hi * L.hi;
}
// The row's LSE from its merged (m, d) for the kernels' dtype, written to the
// outputs: hi to lse, lo to lse_lo where a later gradient kernel needs it.
__device__ __forceinline__ Lse lse_of(const LossParams& p, float m, float d) {
  return lse_of(m, d, p.dtype != DType::fp32);
}

// dZ = c·((1+2λL)p − (1−ε)[j=y] − ε/V)·(1 − (ẑ/s)²) for one row once L is final:
// applied to a thread's ELEMS logits starting at the row's column `start`. The
// constants are folded once a row, so an element costs one FFMA after its
// exponential; the target term only in the thread whose elements hold it, in
// fp32 before rounding dZ. (grad_kernel_80 caps registers at 80: keep the state
// this small.)
template <typename T, int ELEMS>
struct GradOp {
  const LossParams& p;
  // shift_of<T>(hi); then k·c(1+2λL)·rest, k·cε/V, k·c(1−ε), with k = 4 under
  // a softcap (its chain factor is formed as a quarter, softcap_dtanh_quarter)
  // and 1 without.
  float shift, cp, c_smooth, c_target;
  int64_t v0, y_local;                  // the span's first problem column; the target's column in it
  int y32;                              // y_local where it fits 32 bits and is ≥ 0, else −1 (see nonzero)
  __device__ __forceinline__ GradOp(const LossParams& lp, GradLse L, float c, int64_t v0_, int64_t y)
      // cp from c only where c ≠ 0: an ignored row's L may be NaN (a NaN logit)
      // or −inf (a row all −inf), and 0·(1 + 2λL) is then NaN, not the 0 that
      // zero() takes aside. k is a power of 2, so k·c is exact.
      : GradOp(lp, L, c, lp.softcap > 0.0f ? 4.0f * c : c, v0_, y) {}
  __device__ __forceinline__ GradOp(const LossParams& lp, GradLse L, float c, float kc, int64_t v0_, int64_t y)
      : p(lp), shift(shift_of<T>(L.hi)), cp(c == 0.0f ? 0.0f : kc * (1.0f + 2.0f * lp.z_loss * L.hi) * L.rest),
        c_smooth(kc * (lp.label_smoothing / static_cast<float>(lp.vocab))), c_target(kc * (1.0f - lp.label_smoothing)),
        v0(v0_), y_local(y - v0_), y32(y_local >= 0 && y_local <= INT32_MAX ? static_cast<int>(y_local) : -1) {}
  __device__ __forceinline__ bool zero() const { return cp == 0.0f && c_smooth == 0.0f && c_target == 0.0f; }
  __device__ __forceinline__ void operator()(int64_t start, float (&x)[ELEMS], int64_t valid) const {
    // c = 0 (an ignored token): zeros, whatever the logits hold (NaN included).
    if (zero()) {
#pragma unroll
      for (int k = 0; k < ELEMS; ++k) x[k] = 0.0f;
      return;
    }
    nonzero(start, x, valid);
  }
  // The gradient where the caller has already taken zero() aside; kBias = false
  // where it has also taken aside a bias (whose address the loop would otherwise
  // form, and its pointer reload, on every tile).
  // kSoftcap = false where the caller has found no softcap (its test, on every
  // tile, goes too).
  // Start is int64_t, or int where the caller counts in 32 bits (a span held in
  // shared memory, start ≥ 0): then the target's test takes two instructions
  // instead of five (y32 = −1 makes y32 − start negative, so never in the tile).
  template <bool kBias = true, bool kSoftcap = true, typename I = int64_t>
  __device__ __forceinline__ void nonzero(I start, float (&x)[ELEMS], int64_t valid) const {
    if constexpr (kBias) add_bias<T, ELEMS>(p, v0 + start, valid, x);
    // The target's index among this thread's elements, or ELEMS when elsewhere.
    // A row's target lies in one thread's elements of one tile: every other tile
    // takes the form without the per-element test (two instructions an element
    // of about seven; the ce kernels are bound by instruction issue on the H200).
    using U = std::make_unsigned_t<I>;
    U yk;
    if constexpr (std::is_same_v<I, int>)
      yk = static_cast<U>(y32 - start);
    else
      yk = static_cast<U>(y_local - start);
    if (yk < static_cast<U>(ELEMS))
      form<true, kSoftcap>(x, static_cast<int>(yk));
    else
      form<false, kSoftcap>(x, ELEMS);
  }
  template <bool kTarget, bool kSoftcap = true>
  __device__ __forceinline__ void form(float (&x)[ELEMS], int ty) const {
    auto offset = [&](int k) { return kTarget && k == ty ? -c_smooth - c_target : -c_smooth; };
    const float s = p.softcap;
    if (kSoftcap && s > 0.0f) {
      // The chain factor 1 − (ẑ/s)² as 4e·r² from the softcap's own e and r
      // (softcap_dtanh_quarter; the 4 is in the constants): 1 − (ẑ/s)² cancels
      // where the softcap saturates, to a relative error of 1 at s = 0.05 on unit
      // logits. Three instructions an element after ẑ, as 1 − (ẑ/s)² took.
      const float inv_s = 1.0f / s;
#pragma unroll
      for (int k = 0; k < ELEMS; ++k) {
        float e, r;
        const float z = softcap_fast(x[k], s, inv_s, &e, &r), q = softcap_dtanh_quarter(e, r);
        x[k] = fmaf(cp, exp_shifted<T>(z, shift), offset(k)) * q;
      }
    } else {
#pragma unroll
      for (int k = 0; k < ELEMS; ++k) x[k] = fmaf(cp, exp_shifted<T>(x[k], shift), offset(k));
    }
  }
};

// Writes dZ for `cols` elements of one row whose first is problem column v0. Every
// element is written, zeros for ignored tokens, since the gradient GEMMs read the
// whole tile. Whole tiles are pipelined (see Raw); `cache` holds the first
// cache_elems elements from the sweep's head when a fused path kept them on chip.
template <typename T, int ELEMS>
__device__ __forceinline__ void write_grad_row(const T* row, T* orow, int64_t v0, int64_t cols, const LossParams& p,
                                               GradLse L, float c, int64_t y, const T* cache, int64_t cache_elems) {
  const int64_t block = int64_t{ELEMS} * blockDim.x, mine = int64_t{threadIdx.x} * ELEMS;
  const Sweep<T, ELEMS> sw(row, orow, cols, block);
  const GradOp<T, ELEMS> grad(p, L, c, v0, y);
  auto masked = [&](int64_t base, int64_t limit) {
    const int64_t start = base + mine;
    float x[ELEMS];
    if (c != 0.0f) load_masked<T, ELEMS>(row, start, limit, x);
    grad(start, x, limit - start);
    store_masked<T, ELEMS>(orow, start, limit, x);
  };
  auto src = [&](int64_t start) {
    const int64_t at = start - sw.head;
    return at + ELEMS <= cache_elems ? cache + at : row + start;
  };
  if (sw.head > 0)
    for (int64_t base = 0; base < sw.head; base += block) masked(base, sw.head);
  constexpr int D = kDepth<T, ELEMS>;
  Raw<T, ELEMS> buf[D];
  if (c != 0.0f) {
#pragma unroll
    for (int j = 0; j < D; ++j)
      if (j < sw.n_full) buf[j].load(src(sw.head + j * block + mine));
  }
  for (int64_t q = 0; q < sw.n_full; q += D) {
#pragma unroll
    for (int j = 0; j < D; ++j) {
      if (q + j >= sw.n_full) break;
      const int64_t start = sw.head + (q + j) * block + mine;
      float x[ELEMS];
      if (c != 0.0f) {
        buf[j].to_float(x);
        if (q + j + D < sw.n_full) buf[j].load(src(start + D * block));
      }
      grad(start, x, ELEMS);
      Raw<T, ELEMS> out;
      out.from_float(x);
      out.store(orow + start);
    }
  }
  if (sw.body_end < cols) {
    const int64_t start = sw.body_end + mine;
    if (start + ELEMS <= cols) {
      float x[ELEMS];
      if (c != 0.0f) {
        Raw<T, ELEMS> r;
        r.load(src(start));
        r.to_float(x);
      }
      grad(start, x, ELEMS);
      Raw<T, ELEMS> out;
      out.from_float(x);
      out.store(orow + start);
    } else {
      masked(sw.body_end, cols);
    }
  }
}

// flce's chunk schedule: one block per row of the view, folding into the RowState
// across vocabulary chunks (first, last).
template <typename T, int ELEMS>
__global__ void fold_kernel(TileView v, LossParams p, RowState st, bool first, bool last, bool grad, float* lse,
                            float* token_loss, int64_t cache_elems) {
  extern __shared__ uint4 cache_raw[];  // fused path only: the row's leading elements
  T* cache = reinterpret_cast<T*>(cache_raw);
  const int64_t r = blockIdx.x, gr = v.r0 + r;
  T* row = static_cast<T*>(v.tile) + r * v.ld;
  const Partial s = row_stats<T, ELEMS>(row, v.cols, v.v0, p, cache, cache_elems);
  __shared__ GradLse s_L;
  __shared__ float s_c;
  __shared__ int64_t s_y;
  if (threadIdx.x == 0) {
    float m = s.m, d = s.d, zs = s.zs, zt = 0.0f;
    if (!first) {  // fold in the chunks already seen
      merge(m, d, st.m[gr], st.d[gr]);
      zs += st.z_sum[gr];
      zt = st.z_target[gr];
    }
    const int64_t y = target_of(p, gr);
    zt += target_logit(p, row, v.v0, v.cols, y);
    if (!last) {
      st.m[gr] = m, st.d[gr] = d, st.z_sum[gr] = zs, st.z_target[gr] = zt;
    } else {
      const Lse L = lse_of<T>(m, d);
      lse[gr] = L.hi;
      if (st.lse_lo) st.lse_lo[gr] = L.lo;  // the chunks' gradients after this launch (ce_grad)
      token_loss[gr] = row_loss(p, L, zs, zt, y);
      s_L = grad_lse<T>(L);
      // Forward-only calls pass no upstream gradient (grad_scale and
      // grad_tokens may be null): read it only when this launch writes dZ.
      s_c = grad ? token_scale(p, gr, y) : 0.0f;
      s_y = y;
    }
  }
  if (!grad) return;
  // Every thread needs the final L; the barrier also orders this block's reads of
  // the row above before the in-place writes below.
  __syncthreads();
  write_grad_row<T, ELEMS>(row, static_cast<T*>(v.out) + r * v.ld_out, v.v0, v.cols, p, s_L, s_c, s_y, cache,
                           cache_elems);
}

// Split rows: block b handles segment b % splits (seg columns) of row b / splits,
// so a few rows still fill the GPU. The segments' partials are merged afterwards.
struct Segment {
  int64_t r, c0, cols;
  __device__ __forceinline__ Segment(const TileView& v, int64_t seg, int splits) {
    r = blockIdx.x / splits;
    c0 = (blockIdx.x % splits) * seg;
    cols = min(seg, v.cols - c0);
  }
};

// ---- the bulk copy engine (sm_90 TMA, no tensor map: cp.async.bulk) ----
// One instruction moves a contiguous, 16-byte aligned span of global memory into
// shared memory and signals an mbarrier with the bytes: the fused path loads a
// whole segment with a few of them. (Streaming every ce read through a ring of
// such copies, 4–8 KiB each, measured 1.5–1.9x slower than per-thread loads on
// the H100.)
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
// Arrives on the barrier and raises the bytes it waits for by `bytes`.
__device__ __forceinline__ void expect_bytes(uint64_t* bar, uint32_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes) : "memory");
#endif
}
__device__ __forceinline__ void bulk_load(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
  expect_bytes(bar, bytes);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(smem_addr(dst)),
      "l"(src), "r"(bytes), "r"(smem_addr(bar))
      : "memory");
#endif
}
__device__ __forceinline__ void bar_init(uint64_t* bar, unsigned count) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count) : "memory");
#endif
}
__device__ __forceinline__ void bar_init_fence() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#endif
}
__device__ __forceinline__ void bar_wait(uint64_t* bar, uint32_t parity) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "{\n"
      ".reg .pred P1;\n"
      "WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 P1, [%0], %1;\n"
      "@P1 bra DONE;\n"
      "bra WAIT;\n"
      "DONE:\n"
      "}\n" ::"r"(smem_addr(bar)),
      "r"(parity)
      : "memory");
#endif
}

// The part of a row's `cols` elements that bulk copies can move: from the first
// 16-byte boundary, whole 16-byte units. The few elements outside take the
// per-thread path.
template <typename T>
struct BulkSpan {
  int64_t b0, b1;
  __device__ __forceinline__ BulkSpan(const T* row, int64_t cols, int64_t limit) {
    constexpr int64_t kUnit = 16 / sizeof(T);
    b0 = min(cols, static_cast<int64_t>((16 - reinterpret_cast<uintptr_t>(row) % 16) % 16 / sizeof(T)));
    b1 = b0 + min(limit, cols - b0) / kUnit * kUnit;
  }
};

// dZ from the final LSE, block b on segment b % splits of row b / splits.
template <typename T, int ELEMS>
__device__ __forceinline__ void grad_segment(const TileView& v, const LossParams& p, const float* lse,
                                             const float* lse_lo, int64_t seg,
                                             int splits) {
  const Segment g(v, seg, splits);
  const int64_t gr = v.r0 + g.r, y = target_of(p, gr);
  const T* row = static_cast<const T*>(v.tile) + g.r * v.ld + g.c0;
  T* orow = static_cast<T*>(v.out) + g.r * v.ld_out + g.c0;
  const GradLse L = grad_lse<T>(Lse{lse[gr], lse_lo ? lse_lo[gr] : 0.0f});
  write_grad_row<T, ELEMS>(row, orow, v.v0 + g.c0, g.cols, p, L, token_scale(p, gr, y), y, nullptr, 0);
}
template <typename T, int ELEMS>
__global__ void grad_kernel(TileView v, LossParams p, const float* lse, const float* lse_lo, int64_t seg, int splits) {
  grad_segment<T, ELEMS>(v, p, lse, lse_lo, seg, splits);
}
// 16-bit inputs at 16 elements a thread (the ce default's 4096-wide tiles): left
// alone the compiler takes 84 registers, so two blocks of 256 threads share an
// SM; capped at 80 (no spills, ptxas -v) three do, and the H100 wrote dZ 1–7%
// faster (docs/results.md, 2026-11-23). The cap is not applied to every ELEMS:
// where it exceeds the compiler's own count, ptxas spends the headroom and
// occupancy falls. With GradOp's folded constants (85 registers uncapped) the
// cap spills 12 bytes a thread outside the element loop: to be timed against
// the uncapped kernel on the next GPU run.
template <typename T>
__global__ void __maxnreg__(80) grad_kernel_80(TileView v, LossParams p, const float* lse, const float* lse_lo,
                                               int64_t seg, int splits) {
  grad_segment<T, 16>(v, p, lse, lse_lo, seg, splits);
}

// Tiles of 8 elements (the fused default's) go two at a time through the fused
// kernel's shared-memory loops: both loads first, so one's latency hides under
// the other's arithmetic (one tile at a time, each LDS stalled its warp before
// the tile's first instruction: ncu "short scoreboard", H200). Wider tiles
// already carry that much work, and pairs of 4 spilled at the 64 registers.
template <int ELEMS>
inline constexpr bool kPairs = ELEMS == 8;
// Two of a thread's tiles, `step` elements apart in shared memory, widened; both
// loads issue before either value is used.
template <typename T, int ELEMS>
__device__ __forceinline__ void load_pair(const T* at, int step, float (&x0)[ELEMS], float (&x1)[ELEMS]) {
  Raw<T, ELEMS> r0, r1;
  r0.load(at);
  r1.load(at + step);
  r0.to_float(x0);
  r1.to_float(x1);
}
constexpr int kPieces = 4;  // bulk copies per segment: the fold starts when the first lands

// use(i, load(i)) for this thread's i = threadIdx.x, + blockDim.x, … < n, in
// that order, with the loads of kBatch steps issued before their uses. The
// kernels of one block of 1024 threads that only count and reduce
// (count_targets, reduce_loss, count_reduce) take kSweepBatch: one load at a
// time, each a round trip to L2 or DRAM before the next, was 32 in a row a
// thread at 32768 rows, and in batches ce forward at 32768 × 32000 took 0.506
// ms against 0.514 (H200, docs/results.md, fortieth session). The ce kernels'
// own finishes keep batches of one: their sweeps are short, and batches raised
// the split-row kernels' registers (part_kernel_64 spilled at 8).
constexpr int kSweepBatch = 4;
template <int kBatch, class Load, class Use>
__device__ __forceinline__ void block_sweep(int64_t n, Load load, Use use) {
  const int64_t stride = blockDim.x;
  int64_t i = threadIdx.x;
  if constexpr (kBatch > 1) {
    for (; i + (kBatch - 1) * stride < n; i += kBatch * stride) {
      decltype(load(i)) v[kBatch];
#pragma unroll
      for (int k = 0; k < kBatch; ++k) v[k] = load(i + k * stride);
#pragma unroll
      for (int k = 0; k < kBatch; ++k) use(i + k * stride, v[k]);
    }
  }
  for (; i < n; i += stride) use(i, load(i));
}

// Token i's part of block_count_targets' count (below; y its target): c counts it
// if valid, b takes i if out of range.
__device__ __forceinline__ void count_target(const LossParams& p, int64_t i, int64_t y, long long& c, long long& b) {
  if (y == p.ignore_index) return;
  if (y < 0 || y >= p.vocab) {
    b = min(b, static_cast<long long>(i));
    return;
  }
  ++c;
}
__device__ __forceinline__ void block_targets(long long c, long long b, int64_t& count, int64_t& bad) {
  count = block_reduce(c, [](long long x, long long y) { return x + y; }, 0ll);
  const long long first = block_reduce(b, [](long long x, long long y) { return min(x, y); }, (long long)INT64_MAX);
  bad = first == INT64_MAX ? -1 : first;
}
// The valid targets among the first `tokens` (count) and the first target outside
// [0, V) that is not ignore_index (bad, −1 if none), over the whole block; valid
// in thread 0.
template <int kBatch = 1>
__device__ __forceinline__ void block_count_targets(const LossParams& p, int64_t tokens, int64_t& count,
                                                    int64_t& bad) {
  long long c = 0, b = INT64_MAX;
  block_sweep<kBatch>(
      tokens, [&](int64_t i) { return target_of(p, i); }, [&](int64_t i, int64_t y) { count_target(p, i, y, c, b); });
  block_targets(c, b, count, bad);
}

// loss from the token losses (mean: over n valid targets, 0 when none); thread 0.
// Read through L2 (ld.cg): in the one launch, other blocks wrote them just now.
template <int kBatch = 1>
__device__ __forceinline__ float block_loss(const float* token_loss, int64_t tokens, Reduction red, int64_t n) {
  float acc = 0.0f;
  block_sweep<kBatch>(tokens, [&](int64_t i) { return __ldcg(token_loss + i); }, [&](int64_t, float l) { acc += l; });
  return reduced_loss(block_reduce(acc, [](float x, float y) { return x + y; }, 0.0f), red, n);
}

// Run by the whole block that wrote a row's token loss (n valid targets, in
// thread 0).
__device__ __forceinline__ void finish_call(const TileView& v, const LossParams& p, const float* token_loss, int64_t n,
                                            const OneLaunch& one) {
  if (!last_to_arrive(one.done, static_cast<unsigned>(v.rows))) return;
  const float loss = block_loss(token_loss + v.r0, v.rows, p.reduction, n);
  if (threadIdx.x == 0) *one.loss = loss, *one.done = 0;
}
// The first `tokens` targets counted (count, bad as block_count_targets gives
// them) and their token losses reduced (the loss, as reduced_loss), in one sweep
// by the whole block: valid in thread 0. Read through L2: in a call's own
// launch, other blocks wrote the losses just now.
template <int kBatch = 1>
__device__ __forceinline__ float count_and_reduce_block(const LossParams& p, const float* token_loss, int64_t tokens,
                                                        int64_t& count, int64_t& bad) {
  long long c = 0, b = INT64_MAX;
  float acc = 0.0f;
  struct Token {
    float loss;
    int64_t y;
  };
  block_sweep<kBatch>(
      tokens, [&](int64_t i) { return Token{__ldcg(token_loss + i), target_of(p, i)}; },
      [&](int64_t i, Token t) {
        acc += t.loss;
        count_target(p, i, t.y, c, b);
      });
  block_targets(c, b, count, bad);
  return reduced_loss(block_reduce(acc, [](float x, float y) { return x + y; }, 0.0f), p.reduction, count);
}
// The same for the split statistics, whose token losses need no count: the last
// block also counts the call's `tokens` targets into one.n_valid and one.bad, in
// the sweep that sums their losses (indexed from 0: the ce family's whole call).
__device__ __forceinline__ void finish_split(const LossParams& p, const float* token_loss, int64_t tokens,
                                             unsigned arrivals, const OneLaunch& one) {
  if (!last_to_arrive(one.done, arrivals)) return;
  int64_t count, bad;
  const float loss = count_and_reduce_block(p, token_loss, tokens, count, bad);
  if (threadIdx.x == 0) *one.n_valid = count, *one.bad = bad, *one.loss = loss, *one.done = 0;
}

// Folds [lo, hi) of a row from device memory, ELEMS a thread, scalar loads: the
// few elements the bulk copies cannot move (before the first 16-byte boundary,
// after the last whole 16 bytes, beyond shared memory). Short and simple, so the
// kernel's registers stay those of its shared-memory loop.
template <typename T, int ELEMS>
__device__ __forceinline__ void fold_global(const T* row, int64_t lo, int64_t hi, int64_t v0, const LossParams& p,
                                            ThreadStats& t) {
  const int64_t block = int64_t{ELEMS} * blockDim.x;
  for (int64_t i = lo + int64_t{threadIdx.x} * ELEMS; i < hi; i += block) {
    float x[ELEMS];
    load_masked<T, ELEMS>(row, i, hi, x);
    fold_tile<T, ELEMS>(p, v0 + i, hi - i, x, t.m, t.d, t.zs);
  }
}
template <typename T, int ELEMS>
__device__ __forceinline__ void grad_global(const T* row, T* orow, int64_t lo, int64_t hi, const GradOp<T, ELEMS>& grad,
                                            float c) {
  const int64_t block = int64_t{ELEMS} * blockDim.x;
  for (int64_t i = lo + int64_t{threadIdx.x} * ELEMS; i < hi; i += block) {
    float x[ELEMS];
    if (c != 0.0f) load_masked<T, ELEMS>(row, i, hi, x);
    grad(i, x, hi - i);
    store_masked<T, ELEMS>(orow, i, hi, x);
  }
}

// The exchange of partials between a row's blocks. cluster.sync() compiles to a
// GPU-scope fence (MEMBAR.ALL.GPU) before its arrive, which waits for the
// block's stores to reach the GPU; two of them a block cost the fused kernel
// where a row is two to eight blocks. Instead each block pushes its partial
// into every other block's shared memory with st.async, which counts its bytes
// on the receiver's mbarrier, and waits on its own mbarrier for the others'.
// The one cluster barrier that remains, arrived at (relaxed) right after the
// mbarriers are initialised and waited on only before the pushes, makes sure
// every receiver's mbarrier exists: by then it has long completed.
__device__ __forceinline__ uint32_t cluster_addr(const void* local, uint32_t rank) {
  uint32_t r = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(smem_addr(local)), "r"(rank));
#endif
  return r;
}
__device__ __forceinline__ void push_partial(float4* slot, uint64_t* bar, uint32_t rank, float4 v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.f32 [%0], {%1, %2, %3, %4}, [%5];" ::"r"(
                   cluster_addr(slot, rank)),
               "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w), "r"(cluster_addr(bar, rank))
               : "memory");
#endif
}
__device__ __forceinline__ void cluster_arrive_relaxed() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
#endif
}
__device__ __forceinline__ void cluster_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.wait.aligned;" ::: "memory");
#endif
}

// Forward (and backward) with each row read from device memory once: a
// thread-block cluster of `splits` blocks shares the row (sm_90; one block when
// splits = 1), each holding its segment in shared memory, loaded by bulk copies.
// The blocks push their partials into each other's shared memory (see the
// exchange above), every block merges them in the same order (so all agree on L
// bit for bit), then, with `grad`, each writes its segment's dZ from the copy it
// holds.
//
// Registers are what makes this fast: the bytes in flight are the bulk copies',
// not the threads', so a thread needs only one tile of ELEMS values, and
// __launch_bounds__(1024) holds it to 64 registers: three or more blocks share an
// SM, one copying while the others fold or write. (At 124–128 registers, one
// block an SM, the same schedule ran 1.4–1.95× the floor: docs/results.md.)
//
// One launch (`one.on`, a few rows): the whole call in this kernel, since at a few
// rows three launches cost more than the data. Every block counts the targets
// itself (so its gradient's scale needs no earlier kernel); the cluster's first
// block of each row adds the row to a counter after its token loss, and the last
// row to arrive sums the token losses in a fixed order and resets the counter.
template <typename T, int ELEMS>
__global__ void __launch_bounds__(1024) cluster_kernel(TileView v, LossParams p, int64_t seg, int splits, float* lse,
                                                       float* token_loss, int64_t cache_elems, bool grad, OneLaunch one) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  // 128-byte aligned: the bulk copies land here. Left to follow the static arrays
  // it moved with them (64-byte aligned, then 16 when s_L grew to two floats,
  // and the forward+backward at V = 32000 ran 4-7.5% slower on the H200). At 128
  // it runs 1-2.3% faster than at 64 from 768 rows, 256 gains nothing more, 1024
  // loses 2% again; at 384-512 rows it is 3-8% slower (docs/results.md,
  // fifty-third session).
  extern __shared__ __align__(128) uint4 cache_raw[];
  T* cache = reinterpret_cast<T*>(cache_raw);
  __shared__ uint64_t bars[kPieces], s_xbar;
  __shared__ float4 s_parts[kCeMaxClusterBlocks];  // every block's partial, by rank
  __shared__ GradLse s_L;
  __shared__ float s_c;
  __shared__ int64_t s_n;
  cg::cluster_group cluster = cg::this_cluster();
  const Segment g(v, seg, splits);
  const int64_t gr = v.r0 + g.r, y = target_of(p, gr), v0 = v.v0 + g.c0;
  const T* row = static_cast<const T*>(v.tile) + g.r * v.ld + g.c0;
  // The bulk span [b0, b1): from the first 16-byte boundary, whole 16-byte units,
  // as much as shared memory holds; pieces of whole tiles so threads' vectors align.
  const int64_t block = int64_t{ELEMS} * blockDim.x, mine = int64_t{threadIdx.x} * ELEMS;
  const BulkSpan<T> span(row, g.cols, cache_elems);
  const int64_t b0 = span.b0, b1 = span.b1;
  const int64_t piece = ((b1 - b0 + kPieces - 1) / kPieces + block - 1) / block * block;
  if (threadIdx.x == 0) {
    for (int k = 0; k < kPieces; ++k) bar_init(&bars[k], 1);
    bar_init(&s_xbar, 1);
    bar_init_fence();
    expect_bytes(&s_xbar, static_cast<uint32_t>((splits - 1) * sizeof(float4)));
    for (int k = 0; k < kPieces; ++k) {
      const int64_t lo = b0 + k * piece, hi = min(b1, lo + piece);
      if (lo < hi) bulk_load(cache + (lo - b0), row + lo, static_cast<uint32_t>((hi - lo) * sizeof(T)), &bars[k]);
    }
  }
  if (one.on) {  // while the copies fly
    int64_t n, bad;
    block_count_targets(p, one.tokens, n, bad);
    if (threadIdx.x == 0) {
      s_n = n;
      if (blockIdx.x == 0) *one.n_valid = n, *one.bad = bad;
    }
  }
  if (splits > 1) cluster_arrive_relaxed();  // this block's s_xbar exists (see the exchange)
  __syncthreads();  // the barriers are initialised before anyone waits on them
  ThreadStats t;
  fold_global<T, ELEMS>(row, 0, b0, v0, p, t);        // before the boundary
  fold_global<T, ELEMS>(row, b1, g.cols, v0, p, t);  // beyond shared memory
  // The loops over shared memory count in 32 bits (the span is at most what
  // shared memory holds): with 64-bit indices each tile of 8 elements carried
  // ~25 instructions of index and address arithmetic, a third of the loop.
  const int n_held = static_cast<int>(b1 - b0), step = static_cast<int>(block), first_i = static_cast<int>(mine);
  // Plain logits take a fold without the per-tile tests for bias, softcap and
  // label smoothing and without the bias's address: ~10 of its ~70 instructions
  // a tile.
  auto fold_held = [&](auto plain) {
    constexpr bool kPlain = decltype(plain)::value;
    for (int k = 0; k < kPieces; ++k) {
      const int lo = k * static_cast<int>(piece), hi = min(n_held, lo + static_cast<int>(piece));
      if (lo >= hi) break;
      bar_wait(&bars[k], 0);
      int i = lo + first_i;
      if constexpr (kPairs<ELEMS>) {
        for (; i + step + ELEMS <= hi; i += 2 * step) {
          float x0[ELEMS], x1[ELEMS];
          load_pair<T, ELEMS>(cache + i, step, x0, x1);
          if constexpr (kPlain) {  // no column is read: fold the pair as one tile
            float x[2 * ELEMS];
#pragma unroll
            for (int e = 0; e < ELEMS; ++e) x[e] = x0[e], x[ELEMS + e] = x1[e];
            fold_tile<T, 2 * ELEMS, true, true>(p, 0, 2 * ELEMS, x, t.m, t.d, t.zs);
          } else {
            fold_tile<T, ELEMS>(p, v0 + b0 + i, ELEMS, x0, t.m, t.d, t.zs);
            fold_tile<T, ELEMS>(p, v0 + b0 + i + step, ELEMS, x1, t.m, t.d, t.zs);
          }
        }
      }
      for (; i < hi; i += step) {
        float x[ELEMS];
        // Whole tiles with a constant count, so fold_tile compiles without its
        // per-element masks (a third of the loop's instructions).
        if (i + ELEMS <= hi) {
          Raw<T, ELEMS> r;
          r.load(cache + i);
          r.to_float(x);
          fold_tile<T, ELEMS, kPlain>(p, v0 + b0 + i, ELEMS, x, t.m, t.d, t.zs);
        } else {
          load_masked<T, ELEMS>(cache, i, hi, x);
          fold_tile<T, ELEMS, kPlain>(p, v0 + b0 + i, hi - i, x, t.m, t.d, t.zs);
        }
      }
    }
  };
  if (plain_logits(p))
    fold_held(std::true_type{});
  else
    fold_held(std::false_type{});
  const Partial s = block_partial(t);
  if (splits > 1) cluster_wait();  // every block of the row has its s_xbar
  const uint32_t rank = cluster.block_rank();  // read here: the fold has no register to spare
  const bool first = rank == 0;
  if (threadIdx.x == 0) {
    const float4 mine_part = make_float4(s.m, s.d, s.zs, target_logit(p, row, v0, g.cols, y));
    s_parts[rank] = mine_part;
    for (int k = 0; k < splits; ++k)
      if (k != static_cast<int>(rank)) push_partial(&s_parts[rank], &s_xbar, k, mine_part);
    if (splits > 1) bar_wait(&s_xbar, 0);
    // Every block merges the same partials in the same order: all agree on L.
    float m = kNegInf, d = 0.0f, zs = 0.0f, zt = 0.0f;
    merge_span(m, d, zs, zt, splits, [&](int k) { return s_parts[k]; });
    const Lse L = lse_of<T>(m, d);
    if (first) lse[gr] = L.hi, token_loss[gr] = row_loss(p, L, zs, zt, y);
    s_L = grad_lse<T>(L);
    s_c = !grad ? 0.0f : one.on ? token_scale(p, gr, y, s_n) : token_scale(p, gr, y);
  }
  // Every thread needs s_L and s_c. No block reads another's shared memory, and
  // each has received every push into its own before it gets here, so a block
  // may leave without waiting for the others.
  __syncthreads();
  if (grad) {
    T* orow = static_cast<T*>(v.out) + g.r * v.ld_out + g.c0;
    const float c = s_c;
    const GradOp<T, ELEMS> op(p, s_L, c, v0, y);
    grad_global<T, ELEMS>(row, orow, 0, b0, op, c);
    grad_global<T, ELEMS>(row, orow, b1, g.cols, op, c);
    const bool wide = (reinterpret_cast<uintptr_t>(orow + b0) % 16) == 0;
    const GradOp<T, ELEMS> body(p, s_L, c, v0 + b0, y);
    // One sweep for an ignored token's zeros and one for the gradient, so the
    // gradient's loop carries neither the test nor the zeros' registers.
    auto sweep = [&](int from, auto form) {
      for (int i = from; i < n_held; i += step) {
        float x[ELEMS];
        const int valid = n_held - i;
        if (valid >= ELEMS) {  // whole tiles with a constant count, as in the fold
          form(i, x, ELEMS, true);
          if (wide) {
            Raw<T, ELEMS> out;
            out.from_float(x);
            out.store(orow + b0 + i);
          } else {
            store_masked<T, ELEMS>(orow + b0, i, n_held, x);
          }
        } else {
          form(i, x, valid, false);
          store_masked<T, ELEMS>(orow + b0, i, n_held, x);
        }
      }
    };
    if (body.zero()) {
      sweep(first_i, [](int, float(&x)[ELEMS], int, bool) {
#pragma unroll
        for (int k = 0; k < ELEMS; ++k) x[k] = 0.0f;
      });
    } else {
      auto gradient = [&](auto bias, auto softcap) {
        constexpr bool kBias = decltype(bias)::value, kSoftcap = decltype(softcap)::value;
        int from = first_i;
        if constexpr (kPairs<ELEMS>) {
          if (wide) {
            for (; from + step + ELEMS <= n_held; from += 2 * step) {
              float x0[ELEMS], x1[ELEMS];
              load_pair<T, ELEMS>(cache + from, step, x0, x1);
              body.template nonzero<kBias, kSoftcap>(from, x0, ELEMS);
              body.template nonzero<kBias, kSoftcap>(from + step, x1, ELEMS);
              Raw<T, ELEMS> r0, r1;
              r0.from_float(x0);
              r1.from_float(x1);
              r0.store(orow + b0 + from);
              r1.store(orow + b0 + from + step);
            }
          }
        }
        sweep(from, [&](int i, float(&x)[ELEMS], int valid, bool whole) {
          if (whole) {
            Raw<T, ELEMS> r;
            r.load(cache + i);
            r.to_float(x);
            body.template nonzero<kBias, kSoftcap>(i, x, ELEMS);
          } else {
            load_masked<T, ELEMS>(cache, i, n_held, x);
            body.template nonzero<kBias, kSoftcap>(i, x, valid);
          }
        });
      };
      if (p.bias)
        gradient(std::true_type{}, std::true_type{});
      else if (p.softcap > 0.0f)
        gradient(std::false_type{}, std::true_type{});
      else
        gradient(std::false_type{}, std::false_type{});
    }
  }
  if (one.on && first) finish_call(v, p, token_loss, s_n, one);
#endif
}

// ---- a few rows spread over the whole GPU ----
// The call's serial chain at a few rows is what costs (docs/results.md: one
// launch of the cluster kernel at one row of V = 128256 took 12–17 µs, eight
// blocks each copying, folding and writing 32 KiB). Here a row is split among as
// many blocks as it has tiles: each block holds one segment in registers (one
// tile a thread, seg ≤ block_size), so a block's chain is one load, one exchange
// and one store, and a row of V = 128256 runs on 63 SMs instead of 8.
//
// The exchange goes through global memory: each block publishes its partial.
// Forward: every block arrives at the call's counter, and the last to arrive
// merges every row and ends the call (finish_rows). Forward+backward: each block
// counts itself in at its row's counter (release) and waits until its row's
// count is full (acquire), so all blocks of a row must be resident at once: the
// launch is cooperative and check() refuses a grid the GPU cannot hold. Each
// block then merges the row's partials in the same fixed order (merge_row_parts:
// every block gets the same bits), and writes its dZ. The
// counters (Context::ce_counters) are zero between calls: the last block to
// leave a row returns its counter to zero.
__device__ __forceinline__ unsigned load_acquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ unsigned add_acq_rel(unsigned* p, unsigned x) {
  unsigned old;
  asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], %2;" : "=r"(old) : "l"(p), "r"(x) : "memory");
  return old;
}

// A row's partials (m, d, Σẑ, ẑ_target) merged by a group of G lanes (G a power
// of two ≤ 32; the group's lanes are consecutive, `gl` the lane's place in it)
// in a fixed order: each lane merges partials gl, gl+G, … in turn, then the
// group takes the max of the lanes' m and sums their d, each scaled once to that
// max, and their Σẑ and ẑ_target, in butterflies. Every lane of the group, and
// every block that merges the same row with the same G, gets the same bits. The
// butterfly of pairwise merges this replaces had two exponentials in each of its
// five dependent steps (H100, globaltimer inside the kernel: ~1 µs of a few
// rows' 7 µs call went to the merge). A lane's loads, up to kAhead of them, are
// in flight together. Read through L2: other blocks wrote them in this launch.
// `valid` false: the lane's group has no row (its loads are skipped, the
// shuffles still taken: every lane of the warp must reach them).
constexpr int kMergeAhead = 4;
__device__ __forceinline__ void merge_row_parts(const float4* q, int splits, int G, int gl, bool valid, float& m,
                                                float& d, float& zs, float& zt) {
  constexpr int kAhead = kMergeAhead;
  m = kNegInf, d = 0.0f, zs = 0.0f, zt = 0.0f;
  for (int k0 = gl; k0 < splits; k0 += G * kAhead) {
    float4 e[kAhead];
#pragma unroll
    for (int j = 0; j < kAhead; ++j)
      e[j] = valid && k0 + j * G < splits ? __ldcg(q + k0 + j * G) : make_float4(kNegInf, 0.0f, 0.0f, 0.0f);
    merge_span(m, d, zs, zt, kAhead, [&](int j) { return e[j]; });
  }
  float M = m;
  for (int off = G / 2; off > 0; off >>= 1) M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, off));
  // An empty lane (m = −inf) adds nothing; no row at all (M = −inf) stays d = 0.
  d = m == kNegInf ? 0.0f : d * __expf(m - M);
  for (int off = G / 2; off > 0; off >>= 1) {
    d += __shfl_xor_sync(0xffffffffu, d, off);
    zs += __shfl_xor_sync(0xffffffffu, zs, off);
    zt += __shfl_xor_sync(0xffffffffu, zt, off);
  }
  m = M;
}

// The lanes a row's merge takes: a warp from 32 partials up, else the power of
// two that covers them (four rows of 8 partials share a warp); fewer where the
// block's `threads` would otherwise take the rows in more than one pass and
// each lane still loads its partials in one round (16 rows of 32 partials: 16
// lanes a row, one pass of 256 threads where a warp a row took two, each a
// round trip to L2 and a chain of shuffles). The spread backward asks with the
// same arguments as the forward's end, so both modes merge a row alike.
__device__ __forceinline__ int merge_group(int splits, int64_t rows, int threads) {
  int g = 1;
  while (g < splits && g < 32) g *= 2;
  while (g > 1 && rows * g > threads && (splits + g / 2 - 1) / (g / 2) <= kMergeAhead) g /= 2;
  return g;
}

// The forward's end in one arrival (forward, a few rows): every block of the
// launch has published its segment's partial in `parts` ([rows][splits]) and
// arrived at one.done; the last to arrive merges every row (merge_row_parts,
// merge_group's lanes a row, as many as the spread backward takes for it: the
// same bits in both modes), writes its LSE and token loss,
// counts the targets and reduces the loss, all in one sweep whose sums meet in
// shared memory behind one barrier. A row's last block and then the call's
// last, two arrivals in a row, and three block-wide reductions after them, cost
// a few rows' forward several µs (H100, globaltimer inside the kernel); with
// this end, the acquire-release arrival and the target from registers, the
// forward at 1–4 rows took 15–18% less time on the H100 (docs/results.md).
__device__ __forceinline__ void finish_rows(const LossParams& p, const float4* parts, int splits, int64_t r0,
                                            int64_t rows, float* lse, float* lse_lo, float* token_loss,
                                            const OneLaunch& one) {
  const int G = merge_group(splits, rows, blockDim.x), lane = threadIdx.x % 32, warp = threadIdx.x / 32,
            nwarps = blockDim.x / 32;
  const int per_warp = 32 / G, gl = lane % G;
  float acc = 0.0f;  // the group's first lane's token losses, its rows in order
  long long c = 0, b = INT64_MAX;
  for (int64_t base = int64_t{warp} * per_warp; base < rows; base += int64_t{nwarps} * per_warp) {
    const int64_t r = base + lane / G;
    const bool valid = r < rows;
    const int64_t y = valid && gl == 0 ? target_of(p, r0 + r) : p.ignore_index;
    float m, d, zs, zt;
    merge_row_parts(parts + r * splits, splits, G, gl, valid, m, d, zs, zt);
    if (valid && gl == 0) {
      const Lse L = lse_of(p, m, d);
      const float l = row_loss(p, L, zs, zt, y);
      lse[r0 + r] = L.hi, token_loss[r0 + r] = l;
      if (lse_lo) lse_lo[r0 + r] = L.lo;
      acc += l;
      count_target(p, r0 + r, y, c, b);
    }
  }
  // The groups' sums in a fixed order: lanes, then warps. Only a group's first
  // lane holds any (the others add 0), so the lanes G apart are all there is to
  // sum: none at a warp a row. Warps past the rows' hold none either.
  __shared__ float s_acc[32];
  __shared__ long long s_c[32], s_b[32];
  for (int off = 16; off >= G; off >>= 1) {
    acc += __shfl_xor_sync(0xffffffffu, acc, off);
    c += __shfl_xor_sync(0xffffffffu, c, off);
    b = min(b, __shfl_xor_sync(0xffffffffu, b, off));
  }
  if (lane == 0) s_acc[warp] = acc, s_c[warp] = c, s_b[warp] = b;
  __syncthreads();
  if (threadIdx.x == 0) {
    float total = 0.0f;
    long long count = 0, first = INT64_MAX;
    const int used = rows >= int64_t{nwarps} * per_warp ? nwarps : static_cast<int>((rows + per_warp - 1) / per_warp);
    for (int w = 0; w < used; ++w) total += s_acc[w], count += s_c[w], first = min(first, s_b[w]);
    *one.n_valid = count, *one.bad = first == INT64_MAX ? -1 : first;
    *one.loss = reduced_loss(total, p.reduction, count);
    *one.done = 0;
  }
}

// kGrad: forward+backward. Each mode has its own kernel: the forward's without
// the backward's code behind a runtime flag, which held the raw logits live
// beside the fold's copy and cost a few rows' forward ~0.8 µs of its ~8 at
// 1 × 32000, 1 × 256000 and 16 × 128256 (H100, scripts/probe/finish.cu,
// docs/results.md, forty-eighth session).
template <typename T, int ELEMS, bool kGrad>
__global__ void __launch_bounds__(1024) spread_kernel(TileView v, LossParams p, int64_t seg, int splits, float4* parts,
                                                      float* lse, float* token_loss, OneLaunch one) {
  __shared__ GradLse s_L;
  __shared__ float s_c;
  __shared__ bool s_owner;
  const Segment g(v, seg, splits);
  const int64_t gr = v.r0 + g.r, y = target_of(p, gr), v0 = v.v0 + g.c0;
  const T* row = static_cast<const T*>(v.tile) + g.r * v.ld + g.c0;
  const int64_t mine = int64_t{threadIdx.x} * ELEMS;
  constexpr uintptr_t kB = Access<T, ELEMS>::kBytes;
  // The raw logits stay in x for the gradient; the backward's fold works on a copy.
  float x[ELEMS];
  if (mine + ELEMS <= g.cols && reinterpret_cast<uintptr_t>(row + mine) % kB == 0) {
    Raw<T, ELEMS> r;
    r.load(row + mine);
    r.to_float(x);
  } else {
    load_masked<T, ELEMS>(row, mine, g.cols, x);
  }
  // ẑ at the target, from the registers of the thread that holds it, to thread 0
  // through shared memory (behind block_partial's barrier): its own load after
  // the target's was one more round trip on the call's path (~0.9 µs of a few
  // rows' 7 µs on the H100).
  __shared__ float s_zt;
  const bool holds_target = valid_target(p, y) && y >= v0 + mine && y < v0 + min(mine + ELEMS, g.cols);
  if (holds_target) {
    float z = 0.0f;
#pragma unroll
    for (int k = 0; k < ELEMS; ++k)
      if (v0 + mine + k == y) z = x[k];
    if (p.bias) z += Conv<T>::to(static_cast<const T*>(p.bias)[y]);
    s_zt = p.softcap > 0.0f ? softcap_fast(z, p.softcap, 1.0f / p.softcap) : z;
  }
  const bool block_holds_target = valid_target(p, y) && y >= v0 && y < v0 + g.cols;
  int64_t n = 0, bad = -1;  // while the loads fly; the forward's end counts them itself (finish_rows)
  if constexpr (kGrad) {
    block_count_targets(p, one.tokens, n, bad);
    if (threadIdx.x == 0 && blockIdx.x == 0) *one.n_valid = n, *one.bad = bad;
  }
  ThreadStats t;
  if constexpr (kGrad) {
    float z[ELEMS];
#pragma unroll
    for (int k = 0; k < ELEMS; ++k) z[k] = x[k];
    fold_tile<T, ELEMS>(p, v0 + mine, g.cols - mine, z, t.m, t.d, t.zs);
  } else {
    fold_tile<T, ELEMS>(p, v0 + mine, g.cols - mine, x, t.m, t.d, t.zs);
  }
  const Partial s = block_partial(t);
  const float zt = block_holds_target ? s_zt : 0.0f;  // valid in thread 0
  if (threadIdx.x == 0) parts[blockIdx.x] = make_float4(s.m, s.d, s.zs, zt);
  if constexpr (!kGrad) {
    if (last_to_arrive(one.done, gridDim.x))
      finish_rows(p, parts, splits, v.r0, v.rows, lse, nullptr, token_loss, one);
    return;
  }
  unsigned* const count = one.rows + g.r;
  if (threadIdx.x == 0) {
    add_acq_rel(count, 1u);
    while (load_acquire(count) < static_cast<unsigned>(splits)) __nanosleep(32);
    s_owner = g.c0 == 0;
  }
  __syncthreads();
  if (threadIdx.x < 32) {
    float m, d, zs, zsum_t;
    const int G = merge_group(splits, v.rows, blockDim.x);
    merge_row_parts(parts + g.r * splits, splits, G, threadIdx.x % G, true, m, d, zs, zsum_t);
    if (threadIdx.x == 0) {
      const Lse L = lse_of<T>(m, d);
      if (s_owner) lse[gr] = L.hi, token_loss[gr] = row_loss(p, L, zs, zsum_t, y);
      s_L = grad_lse<T>(L);
      s_c = token_scale(p, gr, y, n);
    }
  }
  __syncthreads();
  const GradOp<T, ELEMS> op(p, s_L, s_c, v0, y);
  op(mine, x, g.cols - mine);
  T* orow = static_cast<T*>(v.out) + g.r * v.ld_out + g.c0;
  if (mine + ELEMS <= g.cols && reinterpret_cast<uintptr_t>(orow + mine) % kB == 0) {
    Raw<T, ELEMS> out;
    out.from_float(x);
    out.store(orow + mine);
  } else {
    store_masked<T, ELEMS>(orow, mine, g.cols, x);
  }
  // Leaving: the last block out returns the counter to zero (every block has
  // seen it full by then, so no one still waits on it). Here, not before the
  // merge: its round trip was one more on every block's path to the gradient.
  if (threadIdx.x == 0 && atomicAdd(count, 1u) == 2u * static_cast<unsigned>(splits) - 1u) *count = 0;
  if (s_owner) finish_call(v, p, token_loss, n, one);
}

// ---- the split statistics (ce_split_stats) ----
// The ce family's statistics: block b folds segment b % splits of row b / splits.
// A whole row (one segment) is written by its block. Up to kCeOneLaunchTokens
// rows (one.on) the call ends in the same launch: split rows' partials are
// merged by the call's last block to arrive (finish_rows, as in spread_kernel's
// forward); whole rows' blocks write their token losses and arrive at
// finish_split, whose last arrival counts the targets and reduces the loss. At a
// few hundred rows a forward is 10–30 µs, of which the launches that merged the
// rows and reduced the loss took several (H100: 4–19% of it). Past that,
// merge_parts_kernel and count_reduce_kernel end the call.
template <typename T, int ELEMS, bool kPlainSweep>
__device__ __forceinline__ void part_segment(const TileView& v, const LossParams& p, int64_t seg, int splits,
                                             float4* parts, float* lse, float* lse_lo, float* token_loss,
                                             const OneLaunch& one) {
  if (threadIdx.x == 0) prefetch_target(p, v.r0 + blockIdx.x / splits);
  Partial s;
  {
    const Segment g(v, seg, splits);
    const T* row = static_cast<const T*>(v.tile) + g.r * v.ld + g.c0;
    const int64_t v0 = v.v0 + g.c0;
    // Offsets up to a few tiles past the row (a tile is at most 8192 elements here).
    if (kPlainSweep && plain_logits(p) && g.cols <= INT32_MAX - (int64_t{1} << 20)) {
      ThreadStats t;
      plain_stats<T, ELEMS>(row, g.cols, v0, p, t);
      s = block_partial(t);
    } else {
      s = row_stats<T, ELEMS>(row, g.cols, v0, p, nullptr, 0);
    }
  }
  // The segment again, from a fresh read of the block index: what the sweep kept
  // live through its loop spilled part_kernel_64 at its 64 registers.
  unsigned b;
  asm volatile("mov.u32 %0, %%ctaid.x;" : "=r"(b));
  const int64_t r = b / splits, c0 = (b % splits) * seg, gr = v.r0 + r;
  if (threadIdx.x == 0) {
    const int64_t y = target_of(p, gr);
    const float zt = target_logit(p, static_cast<const T*>(v.tile) + r * v.ld + c0, v.v0 + c0, min(seg, v.cols - c0), y);
    if (splits == 1) {
      const Lse L = lse_of<T>(s.m, s.d);
      lse[gr] = L.hi;
      if (lse_lo) lse_lo[gr] = L.lo;
      token_loss[gr] = row_loss(p, L, s.zs, zt, y);
    } else {
      parts[b] = make_float4(s.m, s.d, s.zs, zt);
    }
  }
  if (!one.on) return;  // merge_parts_kernel and count_reduce_kernel end the call
  if (splits > 1) {
    if (last_to_arrive(one.done, gridDim.x))
      finish_rows(p, parts, splits, v.r0, v.rows, lse, lse_lo, token_loss, one);
    return;
  }
  finish_split(p, token_loss, one.tokens, static_cast<unsigned>(v.rows), one);
}
template <typename T, int ELEMS>
__global__ void part_kernel(TileView v, LossParams p, int64_t seg, int splits, float4* parts, float* lse,
                            float* lse_lo, float* token_loss, OneLaunch one) {
  part_segment<T, ELEMS, false>(v, p, seg, splits, parts, lse, lse_lo, token_loss, one);
}
// 16-bit logits, 8 a thread (the forward's default tile at up to ~1024 rows),
// with plain_stats for plain logits, at most 64 registers: uncapped it took 72
// (three blocks of 256 threads an SM, not four). A kernel of its own because
// __maxnreg__ is a target as well as a cap: on every part_kernel it raised the
// narrow tiles to 64 and the wide ones to ~104.
template <typename T>
__global__ void __maxnreg__(64) part_kernel_64(TileView v, LossParams p, int64_t seg, int splits, float4* parts,
                                               float* lse, float* lse_lo, float* token_loss, OneLaunch one) {
  part_segment<T, 8, true>(v, p, seg, splits, parts, lse, lse_lo, token_loss, one);
}

// One thread per row: the row's partials merged in segment order (deterministic).
__global__ void merge_parts_kernel(const float4* parts, int64_t r0, int64_t rows, int splits, LossParams p, float* lse,
                                   float* lse_lo, float* token_loss) {
  const int64_t r = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  float m = kNegInf, d = 0.0f, zs = 0.0f, zt = 0.0f;
  merge_span(m, d, zs, zt, splits, [&](int k) { return parts[r * splits + k]; });
  const Lse L = lse_of(p, m, d);
  lse[r0 + r] = L.hi;
  if (lse_lo) lse_lo[r0 + r] = L.lo;
  token_loss[r0 + r] = row_loss(p, L, zs, zt, target_of(p, r0 + r));
}

// The split statistics' end past kCeOneLaunchTokens rows: count_targets and
// reduce_loss in one launch (the loss with the same bits). A block of the part
// kernel took ~3 µs a thousand rows for it (256 threads, a load chain each: on
// the H100 +0.10 ms at 32768 rows of V = 32000, 15% of the forward), and from
// ~1000 rows the launch it saves is no longer worth that.
__global__ void count_reduce_kernel(LossParams p, const float* token_loss, int64_t tokens, int64_t* n_valid,
                                    int64_t* bad_index, float* loss) {
  int64_t count, bad;
  const float total = count_and_reduce_block<kSweepBatch>(p, token_loss, tokens, count, bad);
  if (threadIdx.x == 0) *n_valid = count, *bad_index = bad, *loss = total;
}

// ---- dispatch table: (dtype, ELEMS) → kernel pointer, per kernel ----
using FoldFn = void (*)(TileView, LossParams, RowState, bool, bool, bool, float*, float*, int64_t);
using GradFn = void (*)(TileView, LossParams, const float*, const float*, int64_t, int);
using PartFn = void (*)(TileView, LossParams, int64_t, int, float4*, float*, float*, float*, OneLaunch);
using ClusterFn = void (*)(TileView, LossParams, int64_t, int, float*, float*, int64_t, bool, OneLaunch);
using SpreadFn = void (*)(TileView, LossParams, int64_t, int, float4*, float*, float*, OneLaunch);

constexpr int kElems[] = {1, 2, 4, 8, 16, 32};
constexpr int kNumElems = 6;

template <typename T>
struct Table {
  static constexpr FoldFn fold[kNumElems] = {fold_kernel<T, 1>, fold_kernel<T, 2>,  fold_kernel<T, 4>,
                                             fold_kernel<T, 8>, fold_kernel<T, 16>, fold_kernel<T, 32>};
  static constexpr GradFn grad[kNumElems] = {
      grad_kernel<T, 1>, grad_kernel<T, 2>, grad_kernel<T, 4>, grad_kernel<T, 8>,
      sizeof(T) == 2 ? grad_kernel_80<T> : grad_kernel<T, 16>, grad_kernel<T, 32>};
  static constexpr PartFn part[kNumElems] = {part_kernel<T, 1>,
                                             part_kernel<T, 2>,
                                             part_kernel<T, 4>,
                                             sizeof(T) == 2 ? part_kernel_64<T> : part_kernel<T, 8>,
                                             part_kernel<T, 16>,
                                             part_kernel<T, 32>};
  static constexpr ClusterFn cluster[kNumElems] = {cluster_kernel<T, 1>, cluster_kernel<T, 2>,
                                                   cluster_kernel<T, 4>, cluster_kernel<T, 8>,
                                                   cluster_kernel<T, 16>, cluster_kernel<T, 32>};
  static constexpr SpreadFn spread[kNumElems] = {spread_kernel<T, 1, false>, spread_kernel<T, 2, false>,
                                                 spread_kernel<T, 4, false>, spread_kernel<T, 8, false>,
                                                 spread_kernel<T, 16, false>, spread_kernel<T, 32, false>};
  static constexpr SpreadFn spread_grad[kNumElems] = {spread_kernel<T, 1, true>,  spread_kernel<T, 2, true>,
                                                      spread_kernel<T, 4, true>,  spread_kernel<T, 8, true>,
                                                      spread_kernel<T, 16, true>, spread_kernel<T, 32, true>};
};

int elems_index(const CeLaunch& l) {
  if (l.threads <= 0 || l.block_size % l.threads) return -1;
  const int e = l.block_size / l.threads;
  for (int i = 0; i < kNumElems; ++i)
    if (kElems[i] == e) return i;
  return -1;
}

// The kernel `member` of Table<T> for a dtype and elements-per-thread index.
template <typename Fn>
Fn pick(DType t, int i, const Fn (&f32)[kNumElems], const Fn (&b16)[kNumElems], const Fn (&h16)[kNumElems]) {
  switch (t) {
    case DType::fp32: return f32[i];
    case DType::bf16: return b16[i];
    case DType::fp16: return h16[i];
  }
  return nullptr;
}
#define CELTUNE_PICK(member, t, i) \
  pick(t, i, Table<float>::member, Table<__nv_bfloat16>::member, Table<__half>::member)

__global__ void count_targets_kernel(LossParams p, int64_t tokens, int64_t* n_valid, int64_t* bad_index) {
  int64_t count, bad;
  block_count_targets<kSweepBatch>(p, tokens, count, bad);
  if (threadIdx.x == 0) *n_valid = count, *bad_index = bad;
}

__global__ void reduce_loss_kernel(const float* token_loss, int64_t tokens, Reduction red, const int64_t* n_valid,
                                   float* loss) {
  const float total = block_loss<kSweepBatch>(token_loss, tokens, red, red == Reduction::mean ? *n_valid : 0);
  if (threadIdx.x == 0) *loss = total;
}

// db's column sums of one dZ tile (or, scaled_dz, of q with each row's factor
// a_i), one thread a column, accumulated in fp32 across row chunks.
template <typename T>
__global__ void column_sums_kernel(TileView v, float* db_acc, const float* row_scale) {
  const int64_t j = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (j >= v.cols) return;
  const T* tile = static_cast<const T*>(v.tile);
  float acc = 0.0f;
  for (int64_t r = 0; r < v.rows; ++r) {
    const float z = Conv<T>::to(tile[r * v.ld + j]);
    acc += row_scale ? scaled_by(row_scale[r], z) : z;
  }
  db_acc[v.v0 + j] += acc;
}

// Eight contiguous columns h … h + 7 of a row (all inside it or all past it when
// VEC: 16-byte loads and stores, which need H % 8 = 0 and aligned rows).
template <typename E>
struct Cols8 {
  uint4 raw[sizeof(E) / 2];  // the eight elements as stored
  __device__ float at(int k) const { return Conv<E>::to(reinterpret_cast<const E*>(raw)[k]); }
  __device__ void to(float (&v)[8]) const {
#pragma unroll
    for (int k = 0; k < 8; ++k) v[k] = at(k);
  }
};
template <typename E, bool VEC>
__device__ __forceinline__ Cols8<E> load_cols8(const E* row, int64_t h, int64_t hidden) {
  Cols8<E> c{};
  if constexpr (VEC) {
    if (h < hidden)
#pragma unroll
      for (int q = 0; q < int{sizeof(E) / 2}; ++q) c.raw[q] = reinterpret_cast<const uint4*>(row + h)[q];
  } else {
    E* e = reinterpret_cast<E*>(c.raw);
#pragma unroll
    for (int k = 0; k < 8; ++k)
      if (h + k < hidden) e[k] = row[h + k];
  }
  return c;
}
template <typename E, bool VEC>
__device__ __forceinline__ void store_cols8(E* row, int64_t h, int64_t hidden, const float (&v)[8]) {
  Cols8<E> c;
  E* e = reinterpret_cast<E*>(c.raw);
#pragma unroll
  for (int k = 0; k < 8; ++k) e[k] = Conv<E>::from(v[k]);
  if constexpr (VEC) {
    if (h < hidden)
#pragma unroll
      for (int q = 0; q < int{sizeof(E) / 2}; ++q) reinterpret_cast<uint4*>(row + h)[q] = c.raw[q];
  } else {
#pragma unroll
    for (int k = 0; k < 8; ++k)
      if (h + k < hidden) row[h + k] = e[k];
  }
}

// The target's own element of a scaled-dZ row, dZ_iy = c·(zl·p_y − 1)·g(ẑ_y), in
// fp32 from the target's logit (z_target) and the LSE: p_y − 1 before any
// rounding, as flce-math.md asks, so a confident row keeps its 1 − p. With a
// softcap g = 1 − (ẑ_y/s)², without one 1. 0 for a token the loss ignores (c =
// 0). The tile holds 0 there (scaled_dz_rows), and dX, dW and db take this term
// apart, in fp32, before their one rounding (ce.hpp).
__device__ __forceinline__ float target_term(const LossParams& p, const float* lse, const float* z_target, int64_t row,
                                             int64_t y) {
  const float c = token_scale(p, row, y);
  if (c == 0.0f) return 0.0f;
  const float L = lse[row], zl = 1.0f + 2.0f * p.z_loss * L;
  const float zy = z_target[row], t = p.softcap > 0.0f ? zy / p.softcap : 0.0f;
  return c * (zl * expf(zy - L) - 1.0f) * ((1.0f - t) * (1.0f + t));  // 1 − t² without its cancellation
}

// A row of scaled_dz_rows' work, 8 contiguous columns a thread: the first
// kHeldGroups groups a thread loads at once, before the row's factor is known,
// so its load overlaps the row's target, LSE and factor loads (one round trip a
// block rather than three); columns past them (H > 4096 at 256 threads) load
// and store a group at a time. With 16-byte accesses that took the kernel from
// 54 to 31 µs a launch at Mistral-7B N = 8192 and from 48 to 28 at
// Llama-3-8B (ncu, H200), where two-byte accesses a thread at a time, issued
// after the row's factor, left it at about 2 TB/s.
constexpr int kHeldGroups = 2;
template <typename T, bool VEC>
struct HeldRow {
  Cols8<T> g[kHeldGroups];
  static __device__ int64_t col(int64_t u) { return (u * blockDim.x + threadIdx.x) * 8; }
  __device__ void load(const T* row, int64_t cols) {
#pragma unroll
    for (int u = 0; u < kHeldGroups; ++u) g[u] = load_cols8<T, VEC>(row, col(u), cols);
  }
};

// f(v, h, u) maps the 8 values of columns h … h + 7 of `in` in place, group u
// (kHeldGroups for every group past the held ones, which `held` has loaded);
// the results go to `out`'s same columns.
template <typename T, bool VEC, typename F>
__device__ __forceinline__ void map_row(const HeldRow<T, VEC>& held, const T* in, T* out, int64_t cols, F f) {
  float v[8];
#pragma unroll
  for (int u = 0; u < kHeldGroups; ++u) {
    const int64_t h = HeldRow<T, VEC>::col(u);
    held.g[u].to(v);
    f(v, h, u);
    store_cols8<T, VEC>(out, h, cols, v);
  }
  for (int64_t h = HeldRow<T, VEC>::col(kHeldGroups); h < cols; h += int64_t{blockDim.x} * 8) {
    load_cols8<T, VEC>(in, h, cols).to(v);
    f(v, h, kHeldGroups);
    store_cols8<T, VEC>(out, h, cols, v);
  }
}

template <typename T, bool VEC>
__global__ void scaled_dz_rows_kernel(TileView v, LossParams p, const float* lse, const float* z_target, const T* x,
                                      int64_t hidden, T* x_scaled, float* row_scale, RefPartials rp, RowsToScale after) {
  HeldRow<T, VEC> held;
  if (blockIdx.x >= v.rows) {
    // The blocks past the chunk's rows: the previous chunk's dX, whose GEMM has
    // run, becomes a_k·(q·W)_k + t_k·W[y_k], formed in fp32 and rounded once.
    const int64_t k = blockIdx.x - v.rows, row = after.r0 + k;
    T* line = static_cast<T*>(after.m) + k * after.cols;
    held.load(line, after.cols);
    const int64_t y = target_of(p, row);
    const float a = after.row_scale[k], t = target_term(p, lse, z_target, row, y);
    if (t == 0.0f) {
      map_row(held, line, line, after.cols, [a](float (&e)[8], int64_t, int) {
#pragma unroll
        for (int q = 0; q < 8; ++q) e[q] = scaled_by(a, e[q]);
      });
      return;
    }
    const T* w = static_cast<const T*>(after.w) + y * after.cols;
    HeldRow<T, VEC> wy;  // W[y]'s groups, all in flight before the first is used
    wy.load(w, after.cols);
    map_row(held, line, line, after.cols, [&](float (&e)[8], int64_t h, int u) {
      float wv[8];
      if (u < kHeldGroups) wy.g[u].to(wv); else load_cols8<T, VEC>(w, h, after.cols).to(wv);
#pragma unroll
      for (int q = 0; q < 8; ++q) e[q] = fmaf(t, wv[q], scaled_by(a, e[q]));
    });
    return;
  }
  const int64_t i = blockIdx.x, row = v.r0 + i;
  const T* in = x + i * hidden;
  held.load(in, hidden);
  const int64_t y = target_of(p, row);
  const float c = token_scale(p, row, y);  // 0 for an ignored or invalid target
  const float L = lse[row], zl = 1.0f + 2.0f * p.z_loss * L;
  __shared__ float s_ref;  // read before thread 0 overwrites row_scale[i] with a_i
  if (threadIdx.x == 0) s_ref = rp.pairs ? row_scale[i] : p.softcap;
  __syncthreads();
  const bool rescale = isnan(s_ref) && c != 0.0f;  // a row of an ignored token stays as it is: a_i = 0
  const float ref = isnan(s_ref) ? L : s_ref;
  const float a = c == 0.0f ? 0.0f : c * zl * expf(ref - L);
  T* q = static_cast<T*>(v.tile) + i * v.ld;
  if (rescale) {
    // Each tile's terms against its partial's m, brought to m_i = L_i; a tile
    // whose terms are all zero (d = 0) stays zero.
    for (int64_t j = threadIdx.x; j < v.cols; j += blockDim.x) {
      const int64_t at = 2 * ((v.v0 + j) / rp.block_n * rp.rows_pad + i);
      const float f = rp.pairs[at + 1] == 0.0f ? 0.0f : expf(rp.pairs[at] - L);
      q[j] = Conv<T>::from(Conv<T>::to(q[j]) * f);
    }
    __syncthreads();  // before the target's element is cleared
  }
  if (threadIdx.x == 0) {
    row_scale[i] = a;
    // The target's element leaves the bf16 tile: target_term carries all of it.
    if (c != 0.0f && y >= v.v0 && y < v.v0 + v.cols) q[y - v.v0] = Conv<T>::from(0.0f);
  }
  map_row(held, in, x_scaled + i * hidden, hidden, [a](float (&e)[8], int64_t, int) {
#pragma unroll
    for (int k = 0; k < 8; ++k) e[k] = scaled_by(a, e[k]);
  });
}

// target_rows_add's sort keys: each token's target, or V for a token the loss
// ignores (sorted last, never read), with its row as the value.
__global__ void target_keys_kernel(LossParams p, int64_t tokens, unsigned* keys, unsigned* rows) {
  for (int64_t row = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; row < tokens;
       row += int64_t{gridDim.x} * blockDim.x) {
    const int64_t y = target_of(p, row);
    keys[row] = static_cast<unsigned>(token_scale(p, row, y) == 0.0f ? p.vocab : y);
    rows[row] = static_cast<unsigned>(row);
  }
}

// The tokens sorted by target, rows ascending within a target (a stable sort),
// in pieces of kAddPiece: target_pieces_kernel sums t_j·x_j over each run of
// one target in a piece, in token order, in fp32. A target whose tokens all lie
// in the piece is added to dW and db there; a run that continues into the next
// piece or from the previous one leaves its sum in the piece's slot (0: the
// piece's first run, continued from before; 1: its last run, begun here), for
// target_spans_kernel. So the sums and their order depend only on the targets:
// deterministic, with no warp's serial work above a piece, however many tokens
// share a target.
constexpr int kAddThreads = 256;
constexpr int64_t kAddPiece = kSm90TargetPiece;
struct TargetSums {
  const unsigned *keys, *rows;  // sorted
  int64_t tokens, hidden;
  float* part;      // [pieces][2][hidden]
  float* part_t;    // [pieces][2]: the runs' Σ t_j
  void* dw;         // [V, hidden]: fp32, or the bf16 output
  bool dw_fp32;
  float* db_acc;    // null: no bias
};
// Target y's row of dW, columns h … h + 7, in fp32 whichever storage dW has:
// the one read and one write of it that both kernels below make.
template <typename T, bool VEC>
__device__ __forceinline__ void load_dw8(const TargetSums& s, unsigned y, int64_t h, float (&v)[8]) {
  if (s.dw_fp32)
    load_cols8<float, VEC>(static_cast<const float*>(s.dw) + int64_t{y} * s.hidden, h, s.hidden).to(v);
  else
    load_cols8<T, VEC>(static_cast<const T*>(s.dw) + int64_t{y} * s.hidden, h, s.hidden).to(v);
}
template <typename T, bool VEC>
__device__ __forceinline__ void store_dw8(const TargetSums& s, unsigned y, int64_t h, const float (&v)[8]) {
  if (s.dw_fp32)
    store_cols8<float, VEC>(static_cast<float*>(s.dw) + int64_t{y} * s.hidden, h, s.hidden, v);
  else
    store_cols8<T, VEC>(static_cast<T*>(s.dw) + int64_t{y} * s.hidden, h, s.hidden, v);
}

// A warp a sorted token and a slice of kPieceCols columns (8 contiguous a
// lane): the warp whose token begins a run of one target in its piece sums the
// run; the others return at once. One load gives the warp the keys and rows of
// the 32 sorted tokens from its own one back, which for the common run (one
// token, uniform over V) holds all it needs: its dW row and X row then load
// together. Longer runs (real text repeats targets: Zipf, counted padding) load
// the X rows of kRunBatch tokens at once and add them in token order.
// Thousands of warps each wait a round trip or two, where a warp that walked
// sixteen runs in turn waited sixteen: 112 µs at Mistral-7B N = 1024 (ncu), and
// the block that walked a piece's tokens in turn 216 µs. Each warp has little in
// flight (a KiB a trip), so the kernel runs on how many warps an SM holds: four
// blocks (64 registers, a few spilled in the long-run loop) rather than the
// three that 80 registers left took 7–9% off it at Mistral-7B and Llama-3-8B
// N = 8192 (ncu, H200), and issuing the X rows' loads ahead of the target term
// a round trip less.
constexpr int kPieceCols = 256, kRunBatch = 8;
template <typename T, bool VEC>
__global__ void __launch_bounds__(kAddThreads, 4)
    target_pieces_kernel(LossParams p, const float* lse, const float* z_target, const T* x, TargetSums s) {
  constexpr unsigned kAll = 0xffffffffu;
  const int lane = threadIdx.x % 32;
  const int64_t k = int64_t{blockIdx.x} * (kAddThreads / 32) + threadIdx.x / 32;
  if (k >= s.tokens) return;  // the warp's token: the exits are all the warp's
  const auto V = static_cast<unsigned>(p.vocab);
  const int64_t piece_end = std::min((k / kAddPiece + 1) * kAddPiece, s.tokens);
  // Lane l: sorted position k − 1 + l (key V outside the tokens: no target's).
  const int64_t at = k - 1 + lane;
  const bool in = at >= 0 && at < s.tokens;
  const unsigned key = in ? s.keys[at] : V, win_row = in ? s.rows[at] : 0u;
  const unsigned y = __shfl_sync(kAll, key, 1);
  const bool began = __shfl_sync(kAll, key, 0) != y;  // the target's first token is this one
  if (y >= V) return;                                  // the ignored tokens, sorted last
  if (!began && k % kAddPiece != 0) return;            // inside a run: its first token's warp sums it
  int64_t end;                                         // past the run's last token in the piece
  {
    unsigned m = __ballot_sync(kAll, lane >= 2 && (at >= piece_end || key != y));
    int64_t w = k - 1;
    while (m == 0) {  // a run past the window: the next 32 positions
      w += 32;
      const int64_t a = w + lane;
      m = __ballot_sync(kAll, a >= piece_end || s.keys[a] != y);
    }
    end = w + __ffs(static_cast<int>(m)) - 1;
  }
  const bool goes_on = end == piece_end && end < s.tokens && s.keys[end] == y;  // into the next piece
  const bool whole = began && !goes_on;
  const bool db_lane = s.db_acc && blockIdx.y == 0 && lane == 0;
  const int64_t h = int64_t{blockIdx.y} * kPieceCols + lane * 8;
  float row[8] = {}, row_b = 0.0f;
  if (whole) {
    load_dw8<T, VEC>(s, y, h, row);
    if (db_lane) row_b = s.db_acc[y];
  }
  float acc[8] = {}, tsum = 0.0f;
  for (int64_t j0 = k; j0 < end; j0 += kRunBatch) {
    // Lane l holds token j0 + l % kRunBatch's row and t (lanes past the batch
    // repeat them): from the window while it reaches, else loaded.
    const int64_t j = j0 + lane % kRunBatch;
    const bool on = j < end;
    unsigned r = __shfl_sync(kAll, win_row, static_cast<int>(std::min<int64_t>(j - k + 1, 31)));
    if (on && j - k + 1 > 31) r = s.rows[j];
    // The X rows' loads go out first: target_term's loads, and its test of the
    // token's scale, would otherwise hold them back a round trip.
    Cols8<T> xv[kRunBatch];
#pragma unroll
    for (int u = 0; u < kRunBatch; ++u) {
      const unsigned ru = __shfl_sync(kAll, r, u);
      xv[u] = j0 + u < end ? load_cols8<T, VEC>(x + int64_t{ru} * s.hidden, h, s.hidden) : Cols8<T>{};
    }
    const float t = on ? target_term(p, lse, z_target, r, y) : 0.0f;
#pragma unroll
    for (int u = 0; u < kRunBatch; ++u) {
      const float tu = __shfl_sync(kAll, t, u);
      if (j0 + u >= end) break;  // the warp's: j0 and end are
#pragma unroll
      for (int i = 0; i < 8; ++i) acc[i] = fmaf(tu, xv[u].at(i), acc[i]);
      tsum += tu;
    }
  }
  if (whole) {
#pragma unroll
    for (int i = 0; i < 8; ++i) row[i] += acc[i];
    store_dw8<T, VEC>(s, y, h, row);
    if (db_lane) s.db_acc[y] = row_b + tsum;
  } else {
    const int64_t slot = 2 * (k / kAddPiece) + (began ? 1 : 0);
    store_cols8<float, VEC>(s.part + slot * s.hidden, h, s.hidden, acc);
    if (blockIdx.y == 0 && lane == 0) s.part_t[slot] = tsum;
  }
}

// The targets whose tokens span pieces: the piece where such a target begins
// finds the target's last token by a binary search of the sorted keys, then adds
// its slot 1 and each following piece's slot 0 in piece order, kRunBatch
// pieces' slots loaded at once, and adds the total to dW and db. (End-of-text
// padding that the loss counts makes one target of a whole batch: N / 128
// pieces, which one slot at a time waited one trip each.) A block a piece and
// kSpanCols columns, 8 contiguous a thread, as target_pieces_kernel's lanes.
constexpr int kSpanCols = kAddThreads * 8;
template <typename T, bool VEC>
__global__ void __launch_bounds__(kAddThreads) target_spans_kernel(LossParams p, TargetSums s) {
  const int64_t piece = blockIdx.x, k0 = piece * kAddPiece, k1 = std::min(k0 + kAddPiece, s.tokens);
  if (k1 >= s.tokens) return;
  const unsigned y = s.keys[k1 - 1];
  if (y >= p.vocab || s.keys[k1] != y) return;                      // the last run ends here
  if (k0 > 0 && s.keys[k0] == y && s.keys[k0 - 1] == y) return;   // ... or began before this piece
  int64_t lo = k1, hi = s.tokens;  // the first token past the target: keys[lo − 1] = y
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (s.keys[mid] == y) lo = mid + 1; else hi = mid;
  }
  const int64_t last = (lo - 1) / kAddPiece;  // the piece of the target's last token
  const int64_t h = int64_t{blockIdx.y} * kSpanCols + threadIdx.x * 8;
  const bool db_here = s.db_acc && blockIdx.y == 0 && threadIdx.x == 0;
  float row[8], acc[8], tsum = s.part_t[2 * piece + 1];
  load_dw8<T, VEC>(s, y, h, row);  // read ahead of the sums that complete it
  const float row_b = db_here ? s.db_acc[y] : 0.0f;
  load_cols8<float, VEC>(s.part + (2 * piece + 1) * s.hidden, h, s.hidden).to(acc);
  for (int64_t q0 = piece + 1; q0 <= last; q0 += kRunBatch) {
    Cols8<float> v[kRunBatch];
    float vt[kRunBatch];
#pragma unroll
    for (int u = 0; u < kRunBatch; ++u) {
      const bool on = q0 + u <= last;
      vt[u] = on ? s.part_t[2 * (q0 + u)] : 0.0f;
      v[u] = on ? load_cols8<float, VEC>(s.part + 2 * (q0 + u) * s.hidden, h, s.hidden) : Cols8<float>{};
    }
#pragma unroll
    for (int u = 0; u < kRunBatch; ++u) {
      if (q0 + u > last) break;
#pragma unroll
      for (int i = 0; i < 8; ++i) acc[i] += v[u].at(i);
      tsum += vt[u];
    }
  }
#pragma unroll
  for (int i = 0; i < 8; ++i) row[i] += acc[i];
  store_dw8<T, VEC>(s, y, h, row);
  if (db_here) s.db_acc[y] = row_b + tsum;
}

template <typename T>
__global__ void convert_kernel(const float* in, T* out, int64_t n) {
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    out[i] = Conv<T>::from(in[i]);
}

// The most threads a block of each kernel can launch with. ptxas picks the
// registers per thread, and an SM's 64 K registers cap the block: the fp32 fold at
// 16 elements a thread takes 69 and the 16-element grads 67 to 80, so 1024 threads
// do not launch (cudaErrorLaunchOutOfResources). Ask the runtime, not a table we
// would have to keep in step with the compiler. Cached: one binary, one answer.
struct BlockLimit {
  int threads = 0, regs = 0;
};

enum Kernel { kFold, kGrad, kPart, kCluster, kSpread, kKernels };
constexpr const char* kKernelNames[kKernels] = {"fold", "gradient", "split-row", "cluster", "spread"};

BlockLimit block_limit(DType t, int i, Kernel k) {
  static const auto table = [] {
    std::array<std::array<std::array<BlockLimit, kKernels>, kNumElems>, 3> out{};
    const DType types[] = {DType::fp32, DType::bf16, DType::fp16};
    for (int d = 0; d < 3; ++d)
      for (int e = 0; e < kNumElems; ++e) {
        const void* fns[kKernels] = {reinterpret_cast<const void*>(CELTUNE_PICK(fold, types[d], e)),
                                     reinterpret_cast<const void*>(CELTUNE_PICK(grad, types[d], e)),
                                     reinterpret_cast<const void*>(CELTUNE_PICK(part, types[d], e)),
                                     reinterpret_cast<const void*>(CELTUNE_PICK(cluster, types[d], e)),
                                     reinterpret_cast<const void*>(CELTUNE_PICK(spread, types[d], e))};
        for (int k = 0; k < kKernels; ++k) {
          cudaFuncAttributes a{};
          CELTUNE_CUDA(cudaFuncGetAttributes(&a, fns[k]));
          out[d][e][k] = {a.maxThreadsPerBlock, a.numRegs};
        }
        // The spread's two modes are two kernels; a config holds for both
        // (check() does not know the mode), so the tighter limit stands.
        cudaFuncAttributes a{};
        CELTUNE_CUDA(cudaFuncGetAttributes(&a, reinterpret_cast<const void*>(CELTUNE_PICK(spread_grad, types[d], e))));
        BlockLimit& s = out[d][e][kSpread];
        s = {std::min(s.threads, a.maxThreadsPerBlock), std::max(s.regs, a.numRegs)};
      }
    return out;
  }();
  const int d = t == DType::fp32 ? 0 : t == DType::bf16 ? 1 : 2;
  return table[d][i][k];
}

// Dynamic shared memory above the 48 KiB default must be asked for per kernel
// (and per device): the kernel's limit, which every launch must stay under. Only
// ever raised, and asked once for each (device, kernel) and size beyond what was
// set: at a few rows a ce call takes ~10 µs, and the host's work before the
// launch is part of it.
template <typename Fn>
void allow_smem(Fn fn, size_t bytes) {
  if (bytes <= 48 * 1024) return;
  int dev = 0;
  CELTUNE_CUDA(cudaGetDevice(&dev));
  static std::mutex mu;
  static std::map<std::pair<int, const void*>, size_t> limit;
  std::lock_guard<std::mutex> lock(mu);
  size_t& set = limit[{dev, reinterpret_cast<const void*>(fn)}];
  if (bytes <= set) return;
  CELTUNE_CUDA(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  set = bytes;
}

// A device query's answer for `key`, asked once (ask()) and remembered: at a few
// rows the occupancy queries of check() cost more than the call's kernel.
template <typename Key, typename Ask>
int remembered(const Key& key, Ask ask) {
  static std::mutex mu;
  static std::map<Key, int> known;
  {
    std::lock_guard<std::mutex> lock(mu);
    const auto it = known.find(key);
    if (it != known.end()) return it->second;
  }
  const int value = ask();
  std::lock_guard<std::mutex> lock(mu);
  known[key] = value;
  return value;
}

unsigned grid_of(int64_t rows, int splits) {
  const int64_t blocks = rows * splits;
  if (blocks > INT32_MAX) fail_usage("the ce launch needs " + std::to_string(blocks) + " blocks; at most 2^31 - 1");
  return static_cast<unsigned>(blocks);
}
}  // namespace

std::string ce_launch_unsupported(const CeLaunch& l, DType t, CeKernels used) {
  if (l.threads < 32 || l.threads > 1024 || l.threads % 32) return "threads must be a multiple of 32 in [32, 1024]";
  const int i = elems_index(l);
  if (i < 0) return "block_size / threads must be 1, 2, 4, 8, 16 or 32 (the compiled table)";
  const bool runs[kKernels] = {used.fold, used.grad, used.part, used.cluster, used.spread};
  for (int k = 0; k < kKernels; ++k) {
    if (!runs[k]) continue;
    const BlockLimit lim = block_limit(t, i, static_cast<Kernel>(k));
    if (l.threads > lim.threads)
      return "the " + std::string(to_string(t)) + " " + kKernelNames[k] + " kernel at " + std::to_string(kElems[i]) +
             " elements a thread uses " + std::to_string(lim.regs) +
             " registers a thread, so a block launches at most " + std::to_string(lim.threads) +
             " threads; use fewer threads or a smaller block_size";
  }
  return {};
}

// Shared memory a block may use beyond the kernel's static arrays (opt-in limit).
int64_t max_cache_elems(DType t) {
  static const int bytes = [] {
    int dev = 0, optin = 0;
    CELTUNE_CUDA(cudaGetDevice(&dev));
    CELTUNE_CUDA(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    return optin - 2048;  // the reduction arrays and a margin
  }();
  return bytes / dtype_bytes(t) / 64 * 64;
}

namespace {
cudaLaunchAttribute cluster_attr(int splits) {
  cudaLaunchAttribute a{};
  a.id = cudaLaunchAttributeClusterDimension;
  a.val.clusterDim.x = static_cast<unsigned>(splits);
  a.val.clusterDim.y = a.val.clusterDim.z = 1;
  return a;
}
int64_t cluster_cache(DType t, int64_t seg) { return std::min(seg, max_cache_elems(t)); }
}  // namespace

std::string ce_cluster_unsupported(const CeLaunch& l, DType t, int64_t seg, int splits) {
  if (splits < 1 || splits > kCeMaxClusterBlocks)
    return "a cluster shares a row among at most " + std::to_string(kCeMaxClusterBlocks) + " blocks, not " +
           std::to_string(splits) + " (v_chunk too small for the fused ce path)";
  int dev = 0, major = 0;
  CELTUNE_CUDA(cudaGetDevice(&dev));
  CELTUNE_CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  if (major < 9) return "fused ce (bulk copies into shared memory, thread-block clusters) needs sm_90 or newer";
  const int i = elems_index(l);
  const ClusterFn fn = CELTUNE_PICK(cluster, t, i);
  const size_t smem = static_cast<size_t>(cluster_cache(t, seg) * dtype_bytes(t));
  const int clusters =
      remembered(std::make_tuple(dev, reinterpret_cast<const void*>(fn), l.threads, smem, splits), [&] {
        allow_smem(fn, smem);
        cudaLaunchConfig_t cfg{};
        cfg.gridDim = dim3(static_cast<unsigned>(splits));
        cfg.blockDim = dim3(static_cast<unsigned>(l.threads));
        cfg.dynamicSmemBytes = smem;
        cudaLaunchAttribute attr = cluster_attr(splits);
        cfg.attrs = &attr, cfg.numAttrs = 1;
        int n = 0;
        CELTUNE_CUDA(cudaOccupancyMaxActiveClusters(&n, fn, &cfg));
        return n;
      });
  if (clusters < 1)
    return "a cluster of " + std::to_string(splits) + " blocks of " + std::to_string(l.threads) + " threads and " +
           std::to_string(smem / 1024) + " KiB of shared memory each cannot be scheduled on this GPU";
  return {};
}

std::string ce_spread_unsupported(const CeLaunch& l, DType t, int64_t rows, int splits, bool grad) {
  if (!grad) return {};
  // Backward waits for every block of its row: the grid must be resident at once.
  int dev = 0, sms = 0, coop = 0;
  CELTUNE_CUDA(cudaGetDevice(&dev));
  CELTUNE_CUDA(cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, dev));
  if (!coop) return "this GPU has no cooperative launch, which the spread ce backward needs";
  CELTUNE_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  const SpreadFn fn = CELTUNE_PICK(spread_grad, t, elems_index(l));
  const int per_sm = remembered(std::make_tuple(dev, reinterpret_cast<const void*>(fn), l.threads), [&] {
    int n = 0;
    CELTUNE_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, fn, l.threads, 0));
    return n;
  });
  const int64_t resident = int64_t{per_sm} * sms, blocks = rows * splits;
  if (blocks > resident)
    return std::to_string(rows) + " rows of " + std::to_string(splits) + " blocks (" + std::to_string(blocks) +
           ") are more than this GPU holds at once (" + std::to_string(resident) +
           "), which the spread ce backward needs: use a larger v_chunk and block_size";
  return {};
}

void ce_spread(const TileView& v, const LossParams& p, int64_t seg, float* parts, float* lse, float* token_loss,
               const CeLaunch& l, cudaStream_t st, bool grad, const OneLaunch& one) {
  if (v.rows == 0) return;
  const int splits = static_cast<int>((v.cols + seg - 1) / seg);
  const SpreadFn fn = grad ? CELTUNE_PICK(spread_grad, p.dtype, elems_index(l))
                          : CELTUNE_PICK(spread, p.dtype, elems_index(l));
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(grid_of(v.rows, splits));
  cfg.blockDim = dim3(static_cast<unsigned>(l.threads));
  cfg.stream = st;
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeCooperative;
  attr.val.cooperative = 1;
  cfg.attrs = &attr, cfg.numAttrs = grad ? 1 : 0;
  (void)cudaLaunchKernelEx(&cfg, fn, v, p, seg, splits, reinterpret_cast<float4*>(parts), lse, token_loss, one);
  CELTUNE_LAUNCHED();
}

void ce_fold(const TileView& v, const LossParams& p, const RowState& s, bool first, bool last, bool grad, float* lse,
             float* token_loss, const CeLaunch& l, cudaStream_t st) {
  if (v.rows == 0) return;
  const FoldFn fn = CELTUNE_PICK(fold, p.dtype, elems_index(l));
  // The cache only helps when this launch also writes the gradient.
  const int64_t cache = grad ? std::min(l.cache_elems, std::min(v.cols, max_cache_elems(p.dtype))) : 0;
  const size_t smem = static_cast<size_t>(cache * dtype_bytes(p.dtype));
  allow_smem(fn, smem);
  fn<<<grid_of(v.rows, 1), l.threads, smem, st>>>(v, p, s, first, last, grad, lse, token_loss, cache);
  CELTUNE_LAUNCHED();
}

void ce_grad(const TileView& v, const LossParams& p, const float* lse, const float* lse_lo, const CeLaunch& l,
             cudaStream_t st, int64_t seg) {
  if (v.rows == 0) return;
  if (seg <= 0 || seg > v.cols) seg = v.cols;
  const int splits = static_cast<int>((v.cols + seg - 1) / seg);
  const GradFn fn = CELTUNE_PICK(grad, p.dtype, elems_index(l));
  fn<<<grid_of(v.rows, splits), l.threads, 0, st>>>(v, p, lse, lse_lo, seg, splits);
  CELTUNE_LAUNCHED();
}

void ce_split_stats(const TileView& v, const LossParams& p, int64_t seg, float* parts, float* lse, float* lse_lo,
                    float* token_loss, const CeLaunch& l, cudaStream_t st, const OneLaunch& one) {
  if (v.rows == 0) return;  // unreachable: a problem has tokens (Problem::validate)
  if (seg <= 0 || seg > v.cols) seg = v.cols;
  const int splits = static_cast<int>((v.cols + seg - 1) / seg);
  // One launch up to the rows the counters reach (Context::ce_counters).
  OneLaunch k = one;
  k.on = v.rows <= kCeOneLaunchTokens;
  const PartFn fn = CELTUNE_PICK(part, p.dtype, elems_index(l));
  fn<<<grid_of(v.rows, splits), l.threads, 0, st>>>(v, p, seg, splits, reinterpret_cast<float4*>(parts), lse,
                                                     lse_lo, token_loss, k);
  CELTUNE_LAUNCHED();
  if (k.on) return;
  if (splits > 1) {
    merge_parts_kernel<<<static_cast<unsigned>((v.rows + 255) / 256), 256, 0, st>>>(
        reinterpret_cast<const float4*>(parts), v.r0, v.rows, splits, p, lse, lse_lo, token_loss);
    CELTUNE_LAUNCHED();
  }
  count_reduce_kernel<<<1, 1024, 0, st>>>(p, token_loss, one.tokens, one.n_valid, one.bad, one.loss);
  CELTUNE_LAUNCHED();
}

void ce_cluster(const TileView& v, const LossParams& p, int64_t seg, float* lse, float* token_loss, const CeLaunch& l,
                cudaStream_t st, bool grad, const OneLaunch& one) {
  if (v.rows == 0) return;
  const int splits = static_cast<int>((v.cols + seg - 1) / seg);
  const ClusterFn fn = CELTUNE_PICK(cluster, p.dtype, elems_index(l));
  const int64_t cache = cluster_cache(p.dtype, seg);
  const size_t smem = static_cast<size_t>(cache * dtype_bytes(p.dtype));
  allow_smem(fn, smem);
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(grid_of(v.rows, splits));
  cfg.blockDim = dim3(static_cast<unsigned>(l.threads));
  cfg.dynamicSmemBytes = smem;
  cfg.stream = st;
  cudaLaunchAttribute attr = cluster_attr(splits);
  cfg.attrs = &attr, cfg.numAttrs = 1;
  // A refused launch also leaves its error as the thread's last error: taken
  // (and so cleared) by the launch check, or the next call would report it again.
  (void)cudaLaunchKernelEx(&cfg, fn, v, p, seg, splits, lse, token_loss, cache, grad, one);
  CELTUNE_LAUNCHED();
}

void count_targets(const LossParams& p, int64_t tokens, int64_t* n_valid, int64_t* bad_index, cudaStream_t st) {
  count_targets_kernel<<<1, 1024, 0, st>>>(p, tokens, n_valid, bad_index);
  CELTUNE_LAUNCHED();
}

void reduce_loss(const float* token_loss, int64_t tokens, const LossParams& p, float* loss, cudaStream_t st) {
  reduce_loss_kernel<<<1, 1024, 0, st>>>(token_loss, tokens, p.reduction, p.n_valid, loss);
  CELTUNE_LAUNCHED();
}

void column_sums(const TileView& v, DType t, float* db_acc, cudaStream_t st, const float* row_scale) {
  if (v.rows == 0 || v.cols == 0) return;
  const unsigned blocks = static_cast<unsigned>((v.cols + 255) / 256);
  switch (t) {
    case DType::fp32: column_sums_kernel<float><<<blocks, 256, 0, st>>>(v, db_acc, row_scale); break;
    case DType::bf16: column_sums_kernel<__nv_bfloat16><<<blocks, 256, 0, st>>>(v, db_acc, row_scale); break;
    case DType::fp16: column_sums_kernel<__half><<<blocks, 256, 0, st>>>(v, db_acc, row_scale); break;
  }
  CELTUNE_LAUNCHED();
}

// One block a row: the rows of a chunk are a few thousand, each a few thousand
// elements (hidden), a few MB in all next to the GEMMs' hundreds. A thread 8
// columns (16-byte loads where the rows allow), a block of up to 256 threads.
void scaled_dz_rows(const TileView& v, const LossParams& p, const float* lse, const float* z_target, const void* x,
                    int64_t hidden, void* x_scaled, float* row_scale, const RefPartials& ref, const RowsToScale& after,
                    cudaStream_t st) {
  // bf16 only (sm90_scaled_dz, variants.hpp: fp16 cannot hold q).
  if (p.dtype != DType::bf16) fail_usage("the scaled dZ path takes bf16 inputs");
  if (v.rows > 0 && ((ref.pairs == nullptr) != (p.softcap > 0.0f) || (ref.pairs && ref.block_n <= 0)))
    fail_usage("the scaled dZ path takes a softcap or the partials of sampled references");
  if (after.rows > 0 && after.cols > 0 && after.cols != hidden) fail_usage("scaled_dz_rows: dX's rows and X's differ in width");
  const int64_t blocks = v.rows + (after.cols > 0 ? after.rows : 0);
  if (blocks == 0) return;
  if (blocks > INT32_MAX) fail_usage("scaled_dz_rows: more rows than a grid holds");
  const auto threads = static_cast<unsigned>(std::clamp<int64_t>(((hidden + 7) / 8 + 31) / 32 * 32, 32, 256));
  const bool vec = hidden % 8 == 0 && (reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(x_scaled) |
                                       reinterpret_cast<uintptr_t>(after.m) | reinterpret_cast<uintptr_t>(after.w)) %
                                              16 ==
                                          0;
  const auto* xb = static_cast<const __nv_bfloat16*>(x);
  auto* out = static_cast<__nv_bfloat16*>(x_scaled);
  if (vec)
    scaled_dz_rows_kernel<__nv_bfloat16, true>
        <<<static_cast<unsigned>(blocks), threads, 0, st>>>(v, p, lse, z_target, xb, hidden, out, row_scale, ref, after);
  else
    scaled_dz_rows_kernel<__nv_bfloat16, false>
        <<<static_cast<unsigned>(blocks), threads, 0, st>>>(v, p, lse, z_target, xb, hidden, out, row_scale, ref, after);
  CELTUNE_LAUNCHED();
}


namespace {
// The sort's key bits: targets 0 … V − 1 and V itself, the ignored tokens' key.
int target_key_bits(int64_t vocab) { return std::bit_width(static_cast<uint64_t>(vocab)); }
}  // namespace

void target_rows_add_check(int64_t tokens, int64_t vocab) {
  if (tokens == 0) return;
  cub::DoubleBuffer<unsigned> k(nullptr, nullptr), r(nullptr, nullptr);
  size_t need = 0;
  CELTUNE_CUDA(cub::DeviceRadixSort::SortPairs(nullptr, need, k, r, static_cast<int>(tokens), 0,
                                               target_key_bits(vocab)));
  const size_t room = Sm90TargetScratch(tokens, 0).temp_bytes;
  if (need > room)
    fail_env("target_rows_add: CUB's radix sort asks " + std::to_string(need) + " bytes of temporary storage for " +
             std::to_string(tokens) + " tokens, " + std::to_string(room) + " are laid out (Sm90TargetScratch)");
}

void target_rows_add(const LossParams& p, const float* lse, const float* z_target, const void* x, int64_t hidden,
                     int64_t tokens, void* scratch, void* dw, bool dw_fp32, float* db_acc, cudaStream_t st) {
  if (p.dtype != DType::bf16) fail_usage("the scaled dZ path takes bf16 inputs");
  if (tokens == 0 || hidden == 0) return;
  if (tokens > INT32_MAX || p.vocab >= INT32_MAX) fail_usage("target_rows_add: more tokens or targets than 32 bits hold");
  const Sm90TargetScratch L(tokens, hidden);
  char* base = static_cast<char*>(scratch);
  auto* keys = reinterpret_cast<unsigned*>(base + L.keys);
  auto* rows = reinterpret_cast<unsigned*>(base + L.rows);
  const auto blocks = static_cast<unsigned>(std::min<int64_t>((tokens + 255) / 256, 4096));
  target_keys_kernel<<<blocks, 256, 0, st>>>(p, tokens, keys, rows);
  CELTUNE_LAUNCHED();
  cub::DoubleBuffer<unsigned> k(keys, keys + tokens), r(rows, rows + tokens);
  size_t room = L.temp_bytes;  // checked against CUB's query before the call's first launch
  CELTUNE_CUDA(cub::DeviceRadixSort::SortPairs(base + L.temp, room, k, r, static_cast<int>(tokens), 0,
                                               target_key_bits(p.vocab), st));
  TargetSums s{k.Current(), r.Current(), tokens, hidden, reinterpret_cast<float*>(base + L.part),
               reinterpret_cast<float*>(base + L.part_t), dw, dw_fp32, db_acc};
  const auto pieces = static_cast<unsigned>((tokens + kAddPiece - 1) / kAddPiece);
  const auto* xb = static_cast<const __nv_bfloat16*>(x);
  const dim3 grid(static_cast<unsigned>((tokens + kAddThreads / 32 - 1) / (kAddThreads / 32)),
                  static_cast<unsigned>((hidden + kPieceCols - 1) / kPieceCols));
  const dim3 spans(pieces, static_cast<unsigned>((hidden + kSpanCols - 1) / kSpanCols));
  // 16-byte loads and stores: rows of a multiple of 8 columns at aligned bases
  // (the scratch's part is; the caller's x and dW need not be).
  if (hidden % 8 == 0 && (reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(dw)) % 16 == 0) {
    target_pieces_kernel<__nv_bfloat16, true><<<grid, kAddThreads, 0, st>>>(p, lse, z_target, xb, s);
    CELTUNE_LAUNCHED();
    target_spans_kernel<__nv_bfloat16, true><<<spans, kAddThreads, 0, st>>>(p, s);
  } else {
    target_pieces_kernel<__nv_bfloat16, false><<<grid, kAddThreads, 0, st>>>(p, lse, z_target, xb, s);
    CELTUNE_LAUNCHED();
    target_spans_kernel<__nv_bfloat16, false><<<spans, kAddThreads, 0, st>>>(p, s);
  }
  CELTUNE_LAUNCHED();
}

void convert_from_f32(const float* in, void* out, DType t, int64_t n, cudaStream_t st) {
  if (n == 0) return;
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((n + 255) / 256, 65535));
  switch (t) {
    case DType::fp32: CELTUNE_CUDA(cudaMemcpyAsync(out, in, n * 4, cudaMemcpyDeviceToDevice, st)); return;
    case DType::bf16: convert_kernel<<<blocks, 256, 0, st>>>(in, static_cast<__nv_bfloat16*>(out), n); break;
    case DType::fp16: convert_kernel<<<blocks, 256, 0, st>>>(in, static_cast<__half*>(out), n); break;
  }
  CELTUNE_LAUNCHED();
}

void fill_nan(void* p, int64_t bytes, cudaStream_t st) {
  // All-ones bytes are a NaN in fp32, bf16 and fp16 alike.
  if (bytes > 0) CELTUNE_CUDA(cudaMemsetAsync(p, 0xff, static_cast<size_t>(bytes), st));
}

}  // namespace celtune::cuda
