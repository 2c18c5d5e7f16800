// Registers against shared memory for the bytes a ce forward sweep keeps in
// flight (docs/results.md, forty-seventh session): one block a row, 256
// threads, 8 bf16 a thread a tile, the online softmax of the split statistics'
// plain sweep. regs_kernel keeps D tiles ahead in registers (kDepth's 64 bytes a
// thread); async_kernel copies each thread's tiles S ahead into its own slots
// of shared memory (cp.async) and reads back only its own, so no barrier. "@4"
// forces four blocks an SM (part_kernel_64's occupancy at 64 registers) by
// asking 56 KiB of shared memory; kTail adds the real kernel's end (the target's
// logit loaded after the sweep, one arrival). Event timed after a 2×L2 memset,
// medians of 60; the copy is the floor's (half the forward's bytes each way).
// What it did not foresee: the same ring inside celtune's sweep
// (docs/branches/ce-ring-sweep.patch) was 4-14% slower than the register sweep
// at 256-1024 rows and at V = 128256-256000, and 5-11% faster only at 2048 rows
// and more of V = 32000, where other tiles were already faster still. This
// probe's "@4" register kernels may have lost L1 to the shared memory they ask
// for (not measured).
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -o ring scripts/probe/ring.cu && ./ring
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <cmath>
#include <vector>
#include <algorithm>
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); exit(1);} } while (0)

constexpr float kLog2e = 1.4426950408889634f;
__device__ __forceinline__ float ex2(float x) { float y; asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x)); return y; }
__device__ __forceinline__ void merge(float& m, float& d, float m2, float d2) {
  const float M = fmaxf(m, m2);
  if (M == -INFINITY) return;
  d = d * ex2((m - M) * kLog2e) + d2 * ex2((m2 - M) * kLog2e);
  m = M;
}
// One tile of 8: tree max, then exp2(x·log2e − m·log2e) summed as a tree.
__device__ __forceinline__ void fold8(const uint4& v, float& tm, float& td) {
  float x[8];
  const uint32_t* w = reinterpret_cast<const uint32_t*>(&v);
#pragma unroll
  for (int j = 0; j < 4; ++j) x[2 * j] = __uint_as_float(w[j] << 16), x[2 * j + 1] = __uint_as_float(w[j] & 0xffff0000u);
  float a = fmaxf(x[0], x[4]), b = fmaxf(x[1], x[5]), c = fmaxf(x[2], x[6]), d = fmaxf(x[3], x[7]);
  const float lm = fmaxf(fmaxf(a, c), fmaxf(b, d));
  const float nm = fmaxf(tm, lm);
  const float sh = nm * kLog2e;
  float e[8];
#pragma unroll
  for (int k = 0; k < 8; ++k) e[k] = ex2(fmaf(x[k], kLog2e, -sh));
  const float acc = ((e[0] + e[4]) + (e[2] + e[6])) + ((e[1] + e[5]) + (e[3] + e[7]));
  td = td * ex2(fmaf(tm, kLog2e, -sh)) + acc;
  tm = nm;
}
__device__ __forceinline__ void block_reduce(float& m, float& d) {
  for (int o = 16; o; o >>= 1) merge(m, d, __shfl_xor_sync(~0u, m, o), __shfl_xor_sync(~0u, d, o));
  __shared__ float sm[32], sd[32];
  const int w = threadIdx.x / 32, l = threadIdx.x % 32;
  if (l == 0) sm[w] = m, sd[w] = d;
  __syncthreads();
  if (w == 0) {
    m = l < blockDim.x / 32 ? sm[l] : -INFINITY;
    d = l < blockDim.x / 32 ? sd[l] : 0.f;
    for (int o = 16; o; o >>= 1) merge(m, d, __shfl_xor_sync(~0u, m, o), __shfl_xor_sync(~0u, d, o));
  }
}
__device__ unsigned g_done;
// The real kernel's end: the target's logit loaded after the sweep (the target
// prefetched to L2 at the start), the row's values written, one arrival.
template <bool kTail>
__device__ __forceinline__ void finish(const __nv_bfloat16* row, const long long* tgt, int r, float m, float d, float* lse,
                                       float* loss) {
  if (threadIdx.x != 0) return;
  const float L = m + logf(d);
  if (kTail) {
    const long long y = tgt[r];
    const float zt = __bfloat162float(row[y]);
    lse[r] = L, loss[r] = L - zt;
    __threadfence();
    if (atomicAdd(&g_done, 1u) == gridDim.x - 1) g_done = 0;
  } else {
    lse[r] = L;
  }
}

// Registers: D tiles of 16 bytes a thread in flight (V a multiple of 2048 here
// only for the whole tiles; the tail is masked).
template <int D, bool kTail>
__global__ void __maxnreg__(64) regs_kernel(const __nv_bfloat16* x, int V, const long long* tgt, float* lse, float* loss) {
  const int r = blockIdx.x;
  if (kTail && threadIdx.x == 0) asm volatile("prefetch.global.L2 [%0];" ::"l"(tgt + r));
  const __nv_bfloat16* row = x + (size_t)r * V;
  const int step = 2048, first = threadIdx.x * 8, n_full = V / step;
  const uint4* p = reinterpret_cast<const uint4*>(row + first);
  constexpr int kStep = 2048 / 8;  // uint4s a tile
  uint4 buf[D];
  float tm = -INFINITY, td = 0.f;
#pragma unroll
  for (int j = 0; j < D; ++j) if (j < n_full) buf[j] = p[j * kStep];
  for (int q = 0; q < n_full; q += D) {
#pragma unroll
    for (int j = 0; j < D; ++j) {
      if (q + j >= n_full) break;
      const uint4 v = buf[j];
      if (q + j + D < n_full) buf[j] = p[(q + j + D) * kStep];
      fold8(v, tm, td);
    }
  }
  for (int c = n_full * step + first; c < V; c += step) {  // ragged tail, masked
    uint4 v;
    uint16_t* h = reinterpret_cast<uint16_t*>(&v);
    for (int k = 0; k < 8; ++k) h[k] = c + k < V ? reinterpret_cast<const uint16_t*>(row)[c + k] : 0xff80;  // -inf
    fold8(v, tm, td);
  }
  block_reduce(tm, td);
  finish<kTail>(row, tgt, r, tm, td, lse, loss);
}

// cp.async: S tiles of 16 bytes a thread in flight in shared memory, each
// thread reading back only what it copied (no barrier: wait_group suffices).
template <int S, bool kTail>
__global__ void __launch_bounds__(256) async_kernel(const __nv_bfloat16* x, int V, const long long* tgt, float* lse, float* loss) {
  extern __shared__ uint4 ring[];  // [S][256]
  const int r = blockIdx.x;
  if (kTail && threadIdx.x == 0) asm volatile("prefetch.global.L2 [%0];" ::"l"(tgt + r));
  const __nv_bfloat16* row = x + (size_t)r * V;
  const int step = 2048, first = threadIdx.x * 8, n_full = V / step;
  const uint4* p = reinterpret_cast<const uint4*>(row + first);
  constexpr int kStep = 2048 / 8;
  uint4* mine = ring + threadIdx.x;
  const uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(mine));
  auto issue = [&](int t) {
    if (t < n_full)
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(base + (t % S) * 256 * 16), "l"(p + t * kStep) : "memory");
    asm volatile("cp.async.commit_group;" ::: "memory");
  };
#pragma unroll
  for (int t = 0; t < S; ++t) issue(t);
  float tm = -INFINITY, td = 0.f;
  for (int t = 0; t < n_full; ++t) {
    asm volatile("cp.async.wait_group %0;" ::"n"(S - 1) : "memory");
    const uint4 v = mine[(t % S) * 256];
    fold8(v, tm, td);  // uses v: the read is done before the slot is refilled
    issue(t + S);
  }
  for (int c = n_full * step + first; c < V; c += step) {
    uint4 v;
    uint16_t* h = reinterpret_cast<uint16_t*>(&v);
    for (int k = 0; k < 8; ++k) h[k] = c + k < V ? reinterpret_cast<const uint16_t*>(row)[c + k] : 0xff80;
    fold8(v, tm, td);
  }
  block_reduce(tm, td);
  finish<kTail>(row, tgt, r, tm, td, lse, loss);
}

__global__ void fill(__nv_bfloat16* x, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    uint32_t h = (uint32_t)i * 2654435761u ^ seed;
    h ^= h >> 15; h *= 2246822519u; h ^= h >> 13;
    x[i] = __float2bfloat16(((h & 0xffff) / 65536.f - 0.5f) * 16.f);
  }
}

static char* g_flush; static size_t g_flush_bytes; static int g_flips;
template <class F> double med_us(F f, int runs = 60) {
  cudaEvent_t a, b; CK(cudaEventCreate(&a)); CK(cudaEventCreate(&b));
  std::vector<float> t;
  for (int i = 0; i < runs + 3; ++i) {
    CK(cudaMemsetAsync(g_flush, (++g_flips) & 0xff, g_flush_bytes));
    CK(cudaEventRecord(a)); f(); CK(cudaEventRecord(b)); CK(cudaEventSynchronize(b));
    float ms; CK(cudaEventElapsedTime(&ms, a, b)); if (i >= 3) t.push_back(ms * 1000);
  }
  CK(cudaGetLastError());
  std::sort(t.begin(), t.end());
  CK(cudaEventDestroy(a)); CK(cudaEventDestroy(b));
  return t[t.size() / 2];
}

template <int S, bool kTail> void set_smem() {
  CK(cudaFuncSetAttribute(async_kernel<S, kTail>, cudaFuncAttributeMaxDynamicSharedMemorySize, S * 256 * 16));
}

int main() {
  int l2 = 0; CK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0));
  cudaDeviceProp pr; CK(cudaGetDeviceProperties(&pr, 0));
  printf("device %s, %d SMs\n", pr.name, pr.multiProcessorCount);
  g_flush_bytes = 2 * (size_t)l2; CK(cudaMalloc(&g_flush, g_flush_bytes));
  const size_t maxe = (size_t)8192 * 32000 + (size_t)4096 * 128256;
  __nv_bfloat16* x; CK(cudaMalloc(&x, 2 * std::max(maxe, (size_t)1024 * 256000)));
  char* dst; CK(cudaMalloc(&dst, maxe * 2));
  long long* tgt; CK(cudaMalloc(&tgt, 8 * 16384));
  float *lse, *loss, *ref; CK(cudaMalloc(&lse, 4 * 16384)); CK(cudaMalloc(&loss, 4 * 16384)); CK(cudaMalloc(&ref, 4 * 16384));
  fill<<<1024, 256>>>(x, std::max(maxe, (size_t)1024 * 256000), 12345u);
  std::vector<long long> ht(16384); for (int i = 0; i < 16384; ++i) ht[i] = (i * 7919) % 32000;
  CK(cudaMemcpy(tgt, ht.data(), 8 * 16384, cudaMemcpyHostToDevice));
  set_smem<4, false>(); CK(cudaFuncSetAttribute(regs_kernel<4, false>, cudaFuncAttributeMaxDynamicSharedMemorySize, 56 << 10)); CK(cudaFuncSetAttribute(regs_kernel<4, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, 56 << 10)); set_smem<8, false>(); set_smem<16, false>(); set_smem<8, true>(); set_smem<16, true>();
  struct Sh { int n, v; };
  const Sh shapes[] = {{256, 32000}, {512, 32000}, {1024, 32000}, {2048, 32000}, {4096, 32000}, {8192, 32000},
                       {256, 128256}, {512, 128256}, {1024, 128256}, {4096, 128256}, {256, 256000}, {1024, 256000}};
  printf("%-11s %7s | %7s %7s | %7s %7s %7s | %7s %7s | %7s | maxdiff\n", "N x V", "copy", "regs4", "regs@4", "async4", "async8", "async16", "async8T", "asy16T", "regs@4T");
  for (const Sh& s : shapes) {
    const size_t half = (size_t)s.n * s.v;  // bytes of the floor's copy (half of N·V·2)
    const double cp = med_us([&] { CK(cudaMemcpyAsync(dst, x, half, cudaMemcpyDeviceToDevice)); });
    double t[8];
    t[0] = med_us([&] { regs_kernel<4, false><<<s.n, 256>>>(x, s.v, tgt, ref, loss); });
    t[1] = med_us([&] { regs_kernel<4, false><<<s.n, 256, 56 << 10>>>(x, s.v, tgt, lse, loss); });
    t[7] = med_us([&] { regs_kernel<4, true><<<s.n, 256, 56 << 10>>>(x, s.v, tgt, lse, loss); });
    t[2] = med_us([&] { async_kernel<4, false><<<s.n, 256, 4 * 4096>>>(x, s.v, tgt, lse, loss); });
    t[3] = med_us([&] { async_kernel<8, false><<<s.n, 256, 8 * 4096>>>(x, s.v, tgt, lse, loss); });
    t[4] = med_us([&] { async_kernel<16, false><<<s.n, 256, 16 * 4096>>>(x, s.v, tgt, lse, loss); });
    t[5] = med_us([&] { async_kernel<8, true><<<s.n, 256, 8 * 4096>>>(x, s.v, tgt, lse, loss); });
    t[6] = med_us([&] { async_kernel<16, true><<<s.n, 256, 16 * 4096>>>(x, s.v, tgt, lse, loss); });
    CK(cudaDeviceSynchronize());
    std::vector<float> a(s.n), b(s.n);
    CK(cudaMemcpy(a.data(), ref, 4 * s.n, cudaMemcpyDeviceToHost)); CK(cudaMemcpy(b.data(), lse, 4 * s.n, cudaMemcpyDeviceToHost));
    float md = 0; for (int i = 0; i < s.n; ++i) md = std::max(md, std::fabs(a[i] - b[i]));
    // fp64 check of row 0
    std::vector<__nv_bfloat16> h(s.v); CK(cudaMemcpy(h.data(), x, 2 * s.v, cudaMemcpyDeviceToHost));
    double mx = -1e30, sum = 0; for (int k = 0; k < s.v; ++k) mx = std::max(mx, (double)__bfloat162float(h[k]));
    for (int k = 0; k < s.v; ++k) sum += std::exp((double)__bfloat162float(h[k]) - mx);
    printf("%5dx%-6d %7.2f | %7.2f %7.2f | %7.2f %7.2f %7.2f | %7.2f %7.2f | %7.2f | %.1e (row0 %.1e)\n", s.n, s.v, cp, t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7], md,
           std::fabs(a[0] - (mx + std::log(sum))));
  }
  return 0;
}
