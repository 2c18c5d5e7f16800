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
// Variants: fold (forward; with `grad`, also dZ in the same kernel when the tile
// holds whole rows: the one-pass path), grad (dZ from the final LSE: pass 2).
// Chosen by the flce schedule and the ce family from the config.
//
// Mapping: one thread block per row; each thread owns ELEMS consecutive elements
// of every BLOCK_SIZE = ELEMS × threads tile, loaded with the widest aligned
// vector loads (16 bytes when possible), so a warp reads contiguous memory.
// ELEMS is the compile-time part (registers must be indexed by constants); the
// table below instantiates ELEMS ∈ {1, …, 32} per dtype and maps the runtime
// config to a kernel pointer. threads stays a runtime launch parameter.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <string>

#include "ce.hpp"
#include "kernels/cuda_check.hpp"

namespace celtune::cuda {
namespace {

template <typename T>
struct Conv;
template <>
struct Conv<float> {
  __device__ static float to(float v) { return v; }
  __device__ static float from(float v) { return v; }
};
template <>
struct Conv<__nv_bfloat16> {
  __device__ static float to(__nv_bfloat16 v) { return __bfloat162float(v); }
  __device__ static __nv_bfloat16 from(float v) { return __float2bfloat16_rn(v); }
};
template <>
struct Conv<__half> {
  __device__ static float to(__half v) { return __half2float(v); }
  __device__ static __half from(float v) { return __float2half_rn(v); }
};

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

__device__ __forceinline__ float softcap(float z, float s) { return s > 0.0f ? s * tanhf(z / s) : z; }

__device__ __forceinline__ int64_t target_of(const LossParams& p, int64_t row) {
  return p.targets_i64 ? static_cast<const int64_t*>(p.targets)[row]
                       : static_cast<int64_t>(static_cast<const int32_t*>(p.targets)[row]);
}

// Valid: not ignored and inside [0, V). Out-of-range targets are reported by
// count_targets; here they are treated as ignored so no kernel reads out of bounds.
__device__ __forceinline__ bool valid_target(const LossParams& p, int64_t y) {
  return y != p.ignore_index && y >= 0 && y < p.vocab;
}

// The per-token scale c_i of flce-math.md.
__device__ __forceinline__ float token_scale(const LossParams& p, int64_t row, int64_t y) {
  if (!valid_target(p, y)) return 0.0f;
  switch (p.reduction) {
    case Reduction::mean: {
      const int64_t n = *p.n_valid;
      return n ? *p.grad_scale / static_cast<float>(n) : 0.0f;
    }
    case Reduction::sum: return *p.grad_scale;
    case Reduction::none: return p.grad_tokens[row];
  }
  return 0.0f;
}

// The bias for columns start … start+ELEMS of the problem, in fp32 (0 without bias).
template <typename T, int ELEMS>
__device__ __forceinline__ void add_bias(const LossParams& p, int64_t col, int64_t cols_left, float (&x)[ELEMS]) {
  if (!p.bias) return;
  const T* b = static_cast<const T*>(p.bias);
#pragma unroll
  for (int k = 0; k < ELEMS; ++k)
    if (k < cols_left) x[k] += Conv<T>::to(b[col + k]);
}

// The ragged tail of a row, element by element: elements at or past `cols` read
// as −inf (they vanish in the max and in exp) and are not written. Full tiles take
// the wide, pipelined path (Raw) instead.
template <typename T, int ELEMS>
__device__ __forceinline__ void load_tail(const T* row, int64_t start, int64_t cols, float (&x)[ELEMS]) {
#pragma unroll
  for (int k = 0; k < ELEMS; ++k) x[k] = (start + k < cols) ? Conv<T>::to(row[start + k]) : kNegInf;
}

template <typename T, int ELEMS>
__device__ __forceinline__ void store_tail(T* row, int64_t start, int64_t cols, const float (&x)[ELEMS]) {
#pragma unroll
  for (int k = 0; k < ELEMS; ++k)
    if (start + k < cols) row[start + k] = Conv<T>::from(x[k]);
}

template <typename T, int ELEMS>
__device__ __forceinline__ bool row_aligned(const T* row) {
  return reinterpret_cast<uintptr_t>(row) % Access<T, ELEMS>::kBytes == 0;
}

// One thread's ELEMS elements of a tile as raw vectors: what is in flight while
// the previous tile is being computed (software pipelining: the loads of tile
// t+1 are issued before tile t's arithmetic, so memory latency overlaps it).
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
#pragma unroll
    for (int i = 0; i < kVecs; ++i) {
      const T* e = reinterpret_cast<const T*>(&v[i]);
#pragma unroll
      for (int q = 0; q < A::kPer; ++q) x[i * A::kPer + q] = Conv<T>::to(e[q]);
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

// Overwrites one row of the tile with dZ. Every element is written, zeros for
// ignored tokens, since the gradient GEMMs read the whole tile. Full tiles are
// pipelined (see Raw); `cache` holds the row's first cache_elems elements when the
// fused path kept them on chip, read instead of device memory.
template <typename T, int ELEMS>
__device__ __forceinline__ void write_grad_row(const T* row, T* orow, const TileView& v, const LossParams& p, float L,
                                               float c, int64_t y, const T* cache, int64_t cache_elems) {
  const bool aligned = row_aligned<T, ELEMS>(row) && row_aligned<T, ELEMS>(orow);
  const int64_t block = int64_t{ELEMS} * blockDim.x, mine = int64_t{threadIdx.x} * ELEMS;
  const int64_t n_full = aligned ? v.cols / block : 0;
  const float s = p.softcap, eps = p.label_smoothing;
  const float coef = 1.0f + 2.0f * p.z_loss * L;
  const float smooth = eps / static_cast<float>(p.vocab);
  const int64_t y_local = y - v.v0;  // the target's column in this tile, if it is here
  auto grad = [&](int64_t start, float (&x)[ELEMS], int64_t valid) {
    add_bias<T, ELEMS>(p, v.v0 + start, valid, x);
#pragma unroll
    for (int k = 0; k < ELEMS; ++k) {
      const float z = softcap(x[k], s);
      float g = coef * __expf(z - L) - smooth;
      if (start + k == y_local) g -= 1.0f - eps;  // in fp32, before rounding dZ
      const float cap = s > 0.0f ? 1.0f - (z / s) * (z / s) : 1.0f;
      x[k] = c * g * cap;
    }
  };
  auto src = [&](int64_t start) { return start + ELEMS <= cache_elems ? cache + start : row + start; };
  Raw<T, ELEMS> cur, nxt;
  if (c != 0.0f && n_full > 0) cur.load(src(mine));
  for (int64_t t = 0; t < n_full; ++t) {
    const int64_t start = t * block + mine;
    float x[ELEMS];
    if (c == 0.0f) {
#pragma unroll
      for (int k = 0; k < ELEMS; ++k) x[k] = 0.0f;
    } else {
      if (t + 1 < n_full) nxt.load(src(start + block));
      cur.to_float(x);
      grad(start, x, ELEMS);
      cur = nxt;
    }
    Raw<T, ELEMS> out;
    out.from_float(x);
    out.store(orow + start);
  }
  for (int64_t base = n_full * block; base < v.cols; base += block) {  // the ragged tail, masked
    const int64_t start = base + mine;
    float x[ELEMS];
    if (c == 0.0f) {
#pragma unroll
      for (int k = 0; k < ELEMS; ++k) x[k] = 0.0f;
    } else {
      load_tail<T, ELEMS>(row, start, v.cols, x);
      grad(start, x, v.cols - start);
    }
    store_tail<T, ELEMS>(orow, start, v.cols, x);
  }
}

template <typename T, int ELEMS>
__global__ void fold_kernel(TileView v, LossParams p, RowState st, bool first, bool last, bool grad, float* lse,
                            float* token_loss, int64_t cache_elems) {
  extern __shared__ uint4 cache_raw[];  // fused path only: the row's leading elements
  T* cache = reinterpret_cast<T*>(cache_raw);
  const int64_t r = blockIdx.x, gr = v.r0 + r;
  T* row = static_cast<T*>(v.tile) + r * v.ld;
  const bool aligned = row_aligned<T, ELEMS>(row);
  const int64_t block = int64_t{ELEMS} * blockDim.x;
  const float s = p.softcap;
  float tm = kNegInf, td = 0.0f, tzs = 0.0f;
  bool nan = false;
  const int64_t mine = int64_t{threadIdx.x} * ELEMS;
  // The online update of this thread's (max, sum-exp) by one tile's values.
  auto fold = [&](float (&x)[ELEMS], float lm) {
    const float nm = fmaxf(tm, lm);
    if (nm == kNegInf) return;
    float acc = 0.0f;
#pragma unroll
    for (int k = 0; k < ELEMS; ++k) acc += __expf(x[k] - nm);  // masked elements: exp(−inf) = 0
    td = td * __expf(tm - nm) + acc;
    tm = nm;
  };
  // Full tiles (every thread's elements in range): wide loads, no masks, and the
  // next tile's loads in flight while this one is computed.
  const int64_t n_full = aligned ? v.cols / block : 0;
  Raw<T, ELEMS> cur, nxt;
  if (n_full > 0) cur.load(row + mine);
  for (int64_t t = 0; t < n_full; ++t) {
    const int64_t start = t * block + mine;
    if (t + 1 < n_full) nxt.load(row + start + block);
    if (start + ELEMS <= cache_elems) cur.store(cache + start);  // fused: keep it on chip
    float x[ELEMS];
    cur.to_float(x);
    add_bias<T, ELEMS>(p, v.v0 + start, ELEMS, x);
    float lm = kNegInf;
#pragma unroll
    for (int k = 0; k < ELEMS; ++k) {
      x[k] = softcap(x[k], s);
      nan |= isnan(x[k]);
      lm = fmaxf(lm, x[k]);  // fmaxf drops NaN; `nan` carries it instead
      tzs += x[k];
    }
    fold(x, lm);
    cur = nxt;
  }
  for (int64_t base = n_full * block; base < v.cols; base += block) {  // the ragged tail, masked
    const int64_t start = base + mine;
    float x[ELEMS];
    load_tail<T, ELEMS>(row, start, v.cols, x);
    add_bias<T, ELEMS>(p, v.v0 + start, v.cols - start, x);
    float lm = kNegInf;
#pragma unroll
    for (int k = 0; k < ELEMS; ++k) {
      if (start + k < v.cols) {
        x[k] = softcap(x[k], s);
        nan |= isnan(x[k]);
        lm = fmaxf(lm, x[k]);
        tzs += x[k];
      } else {
        x[k] = kNegInf;
      }
    }
    fold(x, lm);
  }
  // NaN inputs must give a NaN loss (as PyTorch): poison d, and give m a finite
  // value so the merges below do not skip this thread as empty.
  if (nan) {
    td = NAN;
    if (tm == kNegInf) tm = 0.0f;
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    const float om = __shfl_xor_sync(0xffffffffu, tm, off), od = __shfl_xor_sync(0xffffffffu, td, off);
    merge(tm, td, om, od);
    tzs += __shfl_xor_sync(0xffffffffu, tzs, off);
  }
  __shared__ float sm[32], sd[32], sz[32];
  __shared__ float s_L, s_c;
  __shared__ int64_t s_y;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, nwarps = blockDim.x / 32;
  if (lane == 0) sm[warp] = tm, sd[warp] = td, sz[warp] = tzs;
  __syncthreads();
  if (warp == 0) {
    tm = lane < nwarps ? sm[lane] : kNegInf;
    td = lane < nwarps ? sd[lane] : 0.0f;
    tzs = lane < nwarps ? sz[lane] : 0.0f;
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
      const float om = __shfl_xor_sync(0xffffffffu, tm, off), od = __shfl_xor_sync(0xffffffffu, td, off);
      merge(tm, td, om, od);
      tzs += __shfl_xor_sync(0xffffffffu, tzs, off);
    }
    if (lane == 0) {
      float m = tm, d = td, zs = tzs, zt = 0.0f;
      if (!first) {  // fold in the chunks already seen
        merge(m, d, st.m[gr], st.d[gr]);
        zs += st.z_sum[gr];
        zt = st.z_target[gr];
      }
      const int64_t y = target_of(p, gr);
      if (valid_target(p, y) && y >= v.v0 && y < v.v0 + v.cols) {
        float z = Conv<T>::to(row[y - v.v0]);
        if (p.bias) z += Conv<T>::to(static_cast<const T*>(p.bias)[y]);
        zt = softcap(z, s);
      }
      if (!last) {
        st.m[gr] = m, st.d[gr] = d, st.z_sum[gr] = zs, st.z_target[gr] = zt;
      } else {
        const float L = m + logf(d);
        float loss = 0.0f;
        if (valid_target(p, y)) {
          const float eps = p.label_smoothing;
          loss = (1.0f - eps) * (L - zt) + eps * (L - zs / static_cast<float>(p.vocab)) + p.z_loss * L * L;
        }
        lse[gr] = L;
        token_loss[gr] = loss;
        s_L = L;
        // Forward-only calls pass no upstream gradient (grad_scale and
        // grad_tokens may be null): read it only when this launch writes dZ.
        s_c = grad ? token_scale(p, gr, y) : 0.0f;
        s_y = y;
      }
    }
  }
  if (!grad) return;
  // Every thread needs the final L; the barrier also orders this block's reads of
  // the row above before the in-place writes below.
  __syncthreads();
  write_grad_row<T, ELEMS>(row, static_cast<T*>(v.out) + r * v.ld_out, v, p, s_L, s_c, s_y, cache, cache_elems);
}

template <typename T, int ELEMS>
__global__ void grad_kernel(TileView v, LossParams p, const float* lse) {
  const int64_t r = blockIdx.x, gr = v.r0 + r;
  T* row = static_cast<T*>(v.tile) + r * v.ld;
  const int64_t y = target_of(p, gr);
  write_grad_row<T, ELEMS>(row, static_cast<T*>(v.out) + r * v.ld_out, v, p, lse[gr], token_scale(p, gr, y), y,
                           nullptr, 0);
}

// ---- dispatch table: (dtype, ELEMS) → kernel pointer ----
using FoldFn = void (*)(TileView, LossParams, RowState, bool, bool, bool, float*, float*, int64_t);
using GradFn = void (*)(TileView, LossParams, const float*);

constexpr int kElems[] = {1, 2, 4, 8, 16, 32};
constexpr int kNumElems = 6;

template <typename T>
struct Table {
  static constexpr FoldFn fold[kNumElems] = {fold_kernel<T, 1>, fold_kernel<T, 2>,  fold_kernel<T, 4>,
                                             fold_kernel<T, 8>, fold_kernel<T, 16>, fold_kernel<T, 32>};
  static constexpr GradFn grad[kNumElems] = {grad_kernel<T, 1>, grad_kernel<T, 2>,  grad_kernel<T, 4>,
                                             grad_kernel<T, 8>, grad_kernel<T, 16>, grad_kernel<T, 32>};
};

int elems_index(const CeLaunch& l) {
  if (l.threads <= 0 || l.block_size % l.threads) return -1;
  const int e = l.block_size / l.threads;
  for (int i = 0; i < kNumElems; ++i)
    if (kElems[i] == e) return i;
  return -1;
}

template <typename Fn>
Fn pick(DType t, int i, const Fn (&f32)[kNumElems], const Fn (&b16)[kNumElems], const Fn (&h16)[kNumElems]) {
  switch (t) {
    case DType::fp32: return f32[i];
    case DType::bf16: return b16[i];
    case DType::fp16: return h16[i];
  }
  return nullptr;
}

__global__ void count_targets_kernel(LossParams p, int64_t tokens, int64_t* n_valid, int64_t* bad_index) {
  int64_t count = 0, bad = INT64_MAX;
  for (int64_t i = threadIdx.x; i < tokens; i += blockDim.x) {
    const int64_t y = target_of(p, i);
    if (y == p.ignore_index) continue;
    if (y < 0 || y >= p.vocab) {
      bad = min(bad, i);
      continue;
    }
    ++count;
  }
  __shared__ long long s_count[1024], s_bad[1024];
  s_count[threadIdx.x] = count, s_bad[threadIdx.x] = bad;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w >>= 1) {
    if (threadIdx.x < w) {
      s_count[threadIdx.x] += s_count[threadIdx.x + w];
      s_bad[threadIdx.x] = min(s_bad[threadIdx.x], s_bad[threadIdx.x + w]);
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    *n_valid = s_count[0];
    *bad_index = s_bad[0] == INT64_MAX ? -1 : s_bad[0];
  }
}

__global__ void reduce_loss_kernel(const float* token_loss, int64_t tokens, Reduction red, const int64_t* n_valid,
                                   float* loss) {
  float acc = 0.0f;
  for (int64_t i = threadIdx.x; i < tokens; i += blockDim.x) acc += token_loss[i];
  __shared__ float s[1024];
  s[threadIdx.x] = acc;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w >>= 1) {
    if (threadIdx.x < w) s[threadIdx.x] += s[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    float total = s[0];
    if (red == Reduction::mean) total = *n_valid ? total / static_cast<float>(*n_valid) : 0.0f;
    *loss = total;
  }
}

template <typename T>
__global__ void column_sums_kernel(TileView v, float* db_acc) {
  const int64_t j = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (j >= v.cols) return;
  const T* tile = static_cast<const T*>(v.tile);
  float acc = 0.0f;
  for (int64_t r = 0; r < v.rows; ++r) acc += Conv<T>::to(tile[r * v.ld + j]);
  db_acc[v.v0 + j] += acc;
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

BlockLimit block_limit(DType t, int i, bool grad_kernel) {
  static const auto table = [] {
    std::array<std::array<std::array<BlockLimit, 2>, kNumElems>, 3> out{};
    const DType types[] = {DType::fp32, DType::bf16, DType::fp16};
    for (int d = 0; d < 3; ++d)
      for (int e = 0; e < kNumElems; ++e) {
        const FoldFn f = pick(types[d], e, Table<float>::fold, Table<__nv_bfloat16>::fold, Table<__half>::fold);
        const GradFn g = pick(types[d], e, Table<float>::grad, Table<__nv_bfloat16>::grad, Table<__half>::grad);
        cudaFuncAttributes a{};
        CELTUNE_CUDA(cudaFuncGetAttributes(&a, reinterpret_cast<const void*>(f)));
        out[d][e][0] = {a.maxThreadsPerBlock, a.numRegs};
        CELTUNE_CUDA(cudaFuncGetAttributes(&a, reinterpret_cast<const void*>(g)));
        out[d][e][1] = {a.maxThreadsPerBlock, a.numRegs};
      }
    return out;
  }();
  const int d = t == DType::fp32 ? 0 : t == DType::bf16 ? 1 : 2;
  return table[d][i][grad_kernel ? 1 : 0];
}
}  // namespace

std::string ce_launch_unsupported(const CeLaunch& l, DType t, bool backward) {
  if (l.threads < 32 || l.threads > 1024 || l.threads % 32) return "threads must be a multiple of 32 in [32, 1024]";
  const int i = elems_index(l);
  if (i < 0) return "block_size / threads must be 1, 2, 4, 8, 16 or 32 (the compiled table)";
  // The fold runs in every mode; the separate gradient kernel only backward.
  for (bool grad_kernel : {false, true}) {
    if (grad_kernel && !backward) break;
    const BlockLimit lim = block_limit(t, i, grad_kernel);
    if (l.threads > lim.threads)
      return "the " + std::string(to_string(t)) + (grad_kernel ? " gradient" : " fold") + " kernel at " +
             std::to_string(kElems[i]) + " elements a thread uses " + std::to_string(lim.regs) +
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

void ce_fold(const TileView& v, const LossParams& p, const RowState& s, bool first, bool last, bool grad, float* lse,
             float* token_loss, const CeLaunch& l, cudaStream_t st) {
  if (v.rows == 0) return;
  const int i = elems_index(l);
  const FoldFn fn = pick(p.dtype, i, Table<float>::fold, Table<__nv_bfloat16>::fold, Table<__half>::fold);
  // The cache only helps when this launch also writes the gradient.
  const int64_t cache = grad ? std::min(l.cache_elems, std::min(v.cols, max_cache_elems(p.dtype))) : 0;
  const size_t smem = static_cast<size_t>(cache * dtype_bytes(p.dtype));
  if (smem > 48 * 1024) CELTUNE_CUDA(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  fn<<<static_cast<unsigned>(v.rows), l.threads, smem, st>>>(v, p, s, first, last, grad, lse, token_loss, cache);
  CELTUNE_LAUNCHED();
}

void ce_grad(const TileView& v, const LossParams& p, const float* lse, const CeLaunch& l, cudaStream_t st) {
  if (v.rows == 0) return;
  const int i = elems_index(l);
  const GradFn fn = pick(p.dtype, i, Table<float>::grad, Table<__nv_bfloat16>::grad, Table<__half>::grad);
  fn<<<static_cast<unsigned>(v.rows), l.threads, 0, st>>>(v, p, lse);
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

void column_sums(const TileView& v, DType t, float* db_acc, cudaStream_t st) {
  if (v.rows == 0 || v.cols == 0) return;
  const unsigned blocks = static_cast<unsigned>((v.cols + 255) / 256);
  switch (t) {
    case DType::fp32: column_sums_kernel<float><<<blocks, 256, 0, st>>>(v, db_acc); break;
    case DType::bf16: column_sums_kernel<__nv_bfloat16><<<blocks, 256, 0, st>>>(v, db_acc); break;
    case DType::fp16: column_sums_kernel<__half><<<blocks, 256, 0, st>>>(v, db_acc); break;
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
