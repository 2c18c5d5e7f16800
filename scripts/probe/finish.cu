// Where a few rows' spread forward spends the time the probe's one-exchange
// kernel does not (docs/results.md, forty-eighth session): celtune's own
// spread_kernel against copies of its forward path with one part at a time made
// as cheap as scripts/probe/fewrows.cu's, each event timed after an L2 flush
// (as bench times the ce rows), medians. ce.cu is compiled into this file so
// the variants use its helpers as they are; the library supplies the rest.
//   nvcc -O3 -std=c++20 -arch=sm_90a --expt-relaxed-constexpr -DNDEBUG -I. -Isrc -Ibuild -Ibuild/src \
//     -o finish scripts/probe/finish.cu -Lbuild/src/runtime -lceltune && ./finish
#include "kernels/ce/ce.cu"

#include <cstdio>
#include <vector>

#define CK(x)                                                                        \
  do {                                                                               \
    cudaError_t e_ = (x);                                                            \
    if (e_ != cudaSuccess) {                                                         \
      printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_));              \
      exit(1);                                                                       \
    }                                                                                \
  } while (0)

namespace celtune::cuda {
namespace {

// Knobs of the forward path (bits):
constexpr int kFenceAtomic = 1;  // __threadfence + atomicAdd in place of the acquire-release arrival
constexpr int kSimpleEnd = 2;    // the last block sums the partials' d (warp 0), writes one value
constexpr int kSumPartial = 4;   // block partial = a plain sum (no merges, no exponentials)
constexpr int kNoTarget = 8;     // no target load, no s_zt
constexpr int kDryFinish = 16;   // every block runs finish_rows' code once on no rows first (code warm)

__device__ float g_sink;

__device__ __noinline__ void finish_rows_call(const LossParams& p, const float4* parts, int splits, int64_t r0,
                                              int64_t rows, float* lse, float* token_loss, const OneLaunch& one,
                                              bool dry) {
  if (dry) {
    // The same code with no rows and no stores: rows = 0 skips the merge loop, so
    // this warms only the tail; a real dry merge of one invalid row follows.
    const int G = merge_group(splits, rows, blockDim.x), gl = threadIdx.x % G;
    float m, d, zs, zt;
    merge_row_parts(parts, splits, G, gl, false, m, d, zs, zt);
    if (m > 1e30f && d > 1e30f) g_sink = zs + zt;  // never: keeps the merge
    return;
  }
  finish_rows(p, parts, splits, r0, rows, lse, token_loss, one);
}

template <typename T, int ELEMS, int K>
__global__ void __launch_bounds__(1024) fwd_kernel(TileView v, LossParams p, int64_t seg, int splits, float4* parts,
                                                   float* lse, float* token_loss, OneLaunch one) {
  const Segment g(v, seg, splits);
  const int64_t gr = v.r0 + g.r, y = (K & kNoTarget) ? -1 : target_of(p, gr), v0 = v.v0 + g.c0;
  const T* row = static_cast<const T*>(v.tile) + g.r * v.ld + g.c0;
  const int64_t mine = int64_t{threadIdx.x} * ELEMS;
  constexpr uintptr_t kB = Access<T, ELEMS>::kBytes;
  float x[ELEMS];
  if (mine + ELEMS <= g.cols && reinterpret_cast<uintptr_t>(row + mine) % kB == 0) {
    Raw<T, ELEMS> r;
    r.load(row + mine);
    r.to_float(x);
  } else {
    load_masked<T, ELEMS>(row, mine, g.cols, x);
  }
  if constexpr ((K & kDryFinish) != 0) finish_rows_call(p, parts, splits, v.r0, 0, lse, token_loss, one, true);
  __shared__ float s_zt;
  const bool holds_target = valid_target(p, y) && y >= v0 + mine && y < v0 + min(mine + ELEMS, g.cols);
  if (holds_target) {
    float z = 0.0f;
#pragma unroll
    for (int k = 0; k < ELEMS; ++k)
      if (v0 + mine + k == y) z = x[k];
    s_zt = z;
  }
  const bool block_holds_target = valid_target(p, y) && y >= v0 && y < v0 + g.cols;
  Partial s;
  if constexpr ((K & kSumPartial) != 0) {
    float a = 0.0f;
#pragma unroll
    for (int k = 0; k < ELEMS; ++k) a += x[k];
    for (int off = 16; off > 0; off >>= 1) a += __shfl_xor_sync(0xffffffffu, a, off);
    __shared__ float w[32];
    if (threadIdx.x % 32 == 0) w[threadIdx.x / 32] = a;
    __syncthreads();
    float t = 0.0f;
    if (threadIdx.x == 0)
      for (int k = 0; k < static_cast<int>(blockDim.x / 32); ++k) t += w[k];
    s = {0.0f, t, 0.0f};
  } else {
    ThreadStats t;
    fold_tile<T, ELEMS>(p, v0 + mine, g.cols - mine, x, t.m, t.d, t.zs);
    s = block_partial(t);
  }
  const float zt = block_holds_target ? s_zt : 0.0f;
  if (threadIdx.x == 0) parts[blockIdx.x] = make_float4(s.m, s.d, s.zs, zt);
  __shared__ bool s_last;
  if constexpr ((K & kFenceAtomic) != 0) {
    if (threadIdx.x == 0) {
      __threadfence();
      s_last = atomicAdd(one.done, 1u) == gridDim.x - 1;
    }
    __syncthreads();
    if (!s_last) return;
  } else {
    if (!last_to_arrive(one.done, gridDim.x)) return;
  }
  if constexpr ((K & kSimpleEnd) != 0) {
    if (threadIdx.x < 32) {
      float a = 0.0f;
      for (int k = threadIdx.x; k < static_cast<int>(gridDim.x); k += 32) a += __ldcg(&parts[k].y);
      for (int off = 16; off > 0; off >>= 1) a += __shfl_xor_sync(0xffffffffu, a, off);
      if (threadIdx.x == 0) *one.loss = a, *one.done = 0;
    }
  } else if constexpr ((K & kDryFinish) != 0) {
    finish_rows_call(p, parts, splits, v.r0, v.rows, lse, token_loss, one, false);
  } else {
    finish_rows(p, parts, splits, v.r0, v.rows, lse, token_loss, one);
  }
}

}  // namespace
}  // namespace celtune::cuda

using namespace celtune;
using namespace celtune::cuda;

static char* g_flush;
static size_t g_flush_bytes;
static int g_flips;
template <class F>
double med_us(F f, bool flush, int runs = 200) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  std::vector<float> t;
  for (int i = 0; i < runs + 5; ++i) {
    if (flush) CK(cudaMemsetAsync(g_flush, (++g_flips) & 0xff, g_flush_bytes));
    CK(cudaEventRecord(a));
    f();
    CK(cudaEventRecord(b));
    CK(cudaEventSynchronize(b));
    float ms;
    CK(cudaEventElapsedTime(&ms, a, b));
    if (i >= 5) t.push_back(ms * 1000);
  }
  std::sort(t.begin(), t.end());
  CK(cudaEventDestroy(a));
  CK(cudaEventDestroy(b));
  return t[t.size() / 2];
}

__global__ void empty_kernel() {}

using bf = __nv_bfloat16;
using Fn = void (*)(TileView, LossParams, int64_t, int, float4*, float*, float*, OneLaunch);

int main() {
  int l2 = 0;
  CK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0));
  cudaDeviceProp pr;
  CK(cudaGetDeviceProperties(&pr, 0));
  printf("device %s\n", pr.name);
  g_flush_bytes = 2 * (size_t)l2;
  CK(cudaMalloc(&g_flush, g_flush_bytes));
  struct S {
    int n, v, seg;
  };
  const std::vector<S> shapes = {{1, 32000, 2048},   {1, 128256, 2048}, {1, 256000, 4096},
                                 {4, 128256, 2048},  {16, 128256, 4096}};
  size_t maxe = 0;
  for (const S& s : shapes) maxe = std::max(maxe, (size_t)s.n * s.v);
  bf* logits;
  CK(cudaMalloc(&logits, maxe * 2));
  {
    std::vector<bf> h(maxe);
    uint32_t st = 12345;
    for (auto& e : h) st = st * 1664525u + 1013904223u, e = __float2bfloat16(((st >> 8) * (1.0f / 16777216.0f)) * 8.0f - 4.0f);
    CK(cudaMemcpy(logits, h.data(), maxe * 2, cudaMemcpyHostToDevice));
  }
  int64_t* targets;
  CK(cudaMalloc(&targets, 64 * 8));
  float4* parts;
  CK(cudaMalloc(&parts, 1 << 20));
  float *lse, *tl, *loss;
  CK(cudaMalloc(&lse, 4096));
  CK(cudaMalloc(&tl, 4096));
  CK(cudaMalloc(&loss, 64));
  int64_t *nv, *bad;
  CK(cudaMalloc(&nv, 8));
  CK(cudaMalloc(&bad, 8));
  unsigned *done, *rowc;
  CK(cudaMalloc(&done, 64));
  CK(cudaMalloc(&rowc, 1 << 16));
  CK(cudaMemset(done, 0, 64));
  CK(cudaMemset(rowc, 0, 1 << 16));
  char* cdst;
  CK(cudaMalloc(&cdst, maxe));
  printf("empty cold %.2f us\n", med_us([] { empty_kernel<<<1, 32>>>(); }, true));
  for (const S& s : shapes) {
    std::vector<int64_t> ht(s.n);
    for (int i = 0; i < s.n; ++i) ht[i] = (i * 7919 + 13) % s.v;
    CK(cudaMemcpy(targets, ht.data(), s.n * 8, cudaMemcpyHostToDevice));
    const TileView v{logits, s.v, 0, s.n, 0, s.v, nullptr, s.v};
    LossParams p{};
    p.dtype = DType::bf16, p.vocab = s.v, p.targets = targets, p.targets_i64 = true, p.ignore_index = -100;
    p.reduction = Reduction::mean;
    OneLaunch one{true, s.n, nv, bad, loss, done, rowc};
    const int splits = (s.v + s.seg - 1) / s.seg, blocks = s.n * splits;
    const bool e8 = s.seg == 2048;
    auto pick = [&](Fn f8, Fn f16) { return e8 ? f8 : f16; };
    struct Var {
      const char* name;
      Fn fn;
    };
    const Var vars[] = {
        {"spread_kernel", pick(spread_kernel<bf, 8, false>, spread_kernel<bf, 16, false>)},
        {"fwd copy", pick(fwd_kernel<bf, 8, 0>, fwd_kernel<bf, 16, 0>)},
        {"fence+atomic", pick(fwd_kernel<bf, 8, kFenceAtomic>, fwd_kernel<bf, 16, kFenceAtomic>)},
        {"simple end", pick(fwd_kernel<bf, 8, kSimpleEnd>, fwd_kernel<bf, 16, kSimpleEnd>)},
        {"sum partial", pick(fwd_kernel<bf, 8, kSumPartial>, fwd_kernel<bf, 16, kSumPartial>)},
        {"no target", pick(fwd_kernel<bf, 8, kNoTarget>, fwd_kernel<bf, 16, kNoTarget>)},
        {"sum+simple", pick(fwd_kernel<bf, 8, kSumPartial | kSimpleEnd>, fwd_kernel<bf, 16, kSumPartial | kSimpleEnd>)},
        {"sum+simple+noT+fence", pick(fwd_kernel<bf, 8, kSumPartial | kSimpleEnd | kNoTarget | kFenceAtomic>,
                                      fwd_kernel<bf, 16, kSumPartial | kSimpleEnd | kNoTarget | kFenceAtomic>)},
        {"dry finish", pick(fwd_kernel<bf, 8, kDryFinish>, fwd_kernel<bf, 16, kDryFinish>)},
    };
    const double copy = med_us([&] { CK(cudaMemcpyAsync(cdst, logits, (size_t)s.n * s.v, cudaMemcpyDeviceToDevice)); }, true);
    printf("\n%d x %d, seg %d, %d blocks: cold copy %.2f us\n", s.n, s.v, s.seg, blocks, copy);
    float ref_loss = 0.0f;
    for (const Var& var : vars) {
      auto launch = [&] { var.fn<<<blocks, 256>>>(v, p, s.seg, splits, parts, lse, tl, one); };
      CK(cudaMemset(loss, 0, 4));
      const double cold = med_us(launch, true), hot = med_us(launch, false);
      CK(cudaGetLastError());
      CK(cudaDeviceSynchronize());
      float l = 0.0f;
      CK(cudaMemcpy(&l, loss, 4, cudaMemcpyDeviceToHost));
      if (&var == vars) ref_loss = l;
      printf("  %-22s cold %6.2f us (%.2fx copy)  hot %6.2f  loss %.6f%s\n", var.name, cold, cold / copy, hot, l,
             &var != vars && l != ref_loss ? " (differs)" : "");
    }
  }
  return 0;
}
