// What a few rows' ce forward can cost at best (docs/results.md, forty-sixth
// session): a copy of the bytes timed cold (after an L2 flush, as bench times the
// ce rows) and hot, against kernels that read the same bytes and reduce them with
// no exchange between blocks, one (a fence and an atomic, the last block merges),
// two (a row's last block, then the call's), or a cluster's exchange through
// distributed shared memory. Event timed, medians; nothing of celtune is linked.
//   nvcc -O3 -std=c++17 -arch=sm_90a -o fewrows scripts/probe/fewrows.cu && ./fewrows [N,V ...]
// N,V arguments replace the few-row shapes (the forty-seventh session ran it at
// 256-4096 rows: `./fewrows 256,32000 512,32000 1024,32000 ...`).
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <algorithm>
#include <cuda_runtime.h>
#include <cooperative_groups.h>
namespace cg = cooperative_groups;
#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); exit(1);} } while (0)

__global__ void empty_kernel() {}

__device__ unsigned g_count[16384];  // a row counter for up to 16384 rows (MODE 2)
__device__ unsigned g_call;

// This block's slab of the input summed as bf16 pairs, 16-byte loads, D of them
// a thread in flight at once (256 threads a block); every thread's share.
__device__ __forceinline__ float thread_read(const uint4* in, long long vecs_per_block) {
  float s = 0.f;
  const uint4* p = in + blockIdx.x * vecs_per_block;
  constexpr int D = 8;
  for (long long i = threadIdx.x; i < vecs_per_block; i += 256 * D) {
    uint4 v[D];
#pragma unroll
    for (int k = 0; k < D; ++k) v[k] = (i + k * 256 < vecs_per_block) ? __ldg(p + i + k * 256) : make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int k = 0; k < D; ++k) s += __uint_as_float(v[k].x << 16) + __uint_as_float(v[k].y << 16) + __uint_as_float(v[k].z << 16) + __uint_as_float(v[k].w << 16);
  }
  return s;
}

// The sum of every thread's s, valid in thread 0 (256 threads a block).
__device__ __forceinline__ float block_sum(float s) {
  __shared__ float w[8];
  __syncthreads();  // a previous call's reader is done with w
  for (int o = 16; o; o >>= 1) s += __shfl_xor_sync(~0u, s, o);
  if (threadIdx.x % 32 == 0) w[threadIdx.x / 32] = s;
  __syncthreads();
  float t = 0;
  if (threadIdx.x == 0)
    for (int k = 0; k < 8; ++k) t += w[k];
  return t;
}

template <int MODE>  // 0: each block writes its sum; 1: one counter, last block merges; 2: row counter then call counter
__global__ void __launch_bounds__(256) read_reduce(const uint4* in, long long vecs_per_block, float* part, float* out, int rows, int splits) {
  __shared__ bool last;
  const float t = block_sum(thread_read(in, vecs_per_block));
  if (threadIdx.x == 0) {
    part[blockIdx.x] = t;
    if (MODE == 0) { last = false; }
    else if (MODE == 1) {
      __threadfence();
      last = atomicAdd(&g_call, 1u) == gridDim.x - 1;
      if (last) g_call = 0;
    } else {
      __threadfence();
      const int r = blockIdx.x / splits;
      bool row_last = atomicAdd(&g_count[r], 1u) == splits - 1;
      last = false;
      if (row_last) {
        g_count[r] = 0;
        float t2 = 0;
        for (int k = 0; k < splits; ++k) t2 += __ldcg(part + r * splits + k);
        part[gridDim.x + r] = t2;
        __threadfence();
        last = atomicAdd(&g_call, 1u) == rows - 1;
        if (last) g_call = 0;
      }
    }
  }
  __syncthreads();
  if (!last) return;
  float u = 0;
  const int n = MODE == 1 ? gridDim.x : rows;
  const float* q = MODE == 1 ? part : part + gridDim.x;
  for (int k = threadIdx.x; k < n; k += 256) u += __ldcg(q + k);
  u = block_sum(u);
  if (threadIdx.x == 0) *out = u;
}


// MODE 3: a row per cluster (splits blocks); partials pushed into rank 0's shared
// memory, one cluster barrier (arrive.release / wait.acquire); rank 0 merges; with
// rows > 1 the rank-0 blocks then take one global level (fence + atomic).
__global__ void __launch_bounds__(256) read_cluster(const uint4* in, long long vecs_per_block, float* part, float* out, int rows, int splits) {
  cg::cluster_group cl = cg::this_cluster();
  __shared__ float inbox[16];
  __shared__ bool last;
  const float sum = block_sum(thread_read(in, vecs_per_block));
  const unsigned rank = cl.block_rank();
  if (threadIdx.x == 0) cl.map_shared_rank(inbox, 0)[rank] = sum;
  asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
  if (rank != 0) { asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory"); return; }
  asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
  if (threadIdx.x == 0) {
    float t = 0;
    for (int k = 0; k < splits; ++k) t += inbox[k];
    const int r = blockIdx.x / splits;
    if (rows == 1) { *out = t; return; }
    part[r] = t;
    __threadfence();
    last = atomicAdd(&g_call, 1u) == rows - 1;
    if (last) g_call = 0;
  }
  __syncthreads();
  if (rows == 1 || !last) return;
  float u = 0;
  for (int k = threadIdx.x; k < rows; k += 256) u += __ldcg(part + k);
  u = block_sum(u);
  if (threadIdx.x == 0) *out = u;
}

static char* g_flush; static size_t g_flush_bytes; static int g_flips;
template <class F> double med_us(F f, bool flush, int runs = 200) {
  cudaEvent_t a, b; CK(cudaEventCreate(&a)); CK(cudaEventCreate(&b));
  std::vector<float> t;
  for (int i = 0; i < runs + 5; ++i) {
    if (flush) CK(cudaMemsetAsync(g_flush, (++g_flips) & 0xff, g_flush_bytes));
    CK(cudaEventRecord(a)); f(); CK(cudaEventRecord(b)); CK(cudaEventSynchronize(b));
    float ms; CK(cudaEventElapsedTime(&ms, a, b)); if (i >= 5) t.push_back(ms * 1000);
  }
  std::sort(t.begin(), t.end());
  CK(cudaEventDestroy(a)); CK(cudaEventDestroy(b));
  return t[t.size() / 2];
}

int main(int argc, char** argv) {
  int l2 = 0, sms = 0; CK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0)); CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  cudaDeviceProp pr; CK(cudaGetDeviceProperties(&pr, 0));
  printf("device %s, %d SMs, L2 %d MB\n", pr.name, sms, l2 >> 20);
  g_flush_bytes = 2 * (size_t)l2; CK(cudaMalloc(&g_flush, g_flush_bytes));
  struct S { int n; int v; };
  std::vector<S> shapes = {{1, 32000}, {1, 128256}, {1, 256000}, {4, 128256}, {16, 128256}, {64, 128256}, {64, 256000}, {256, 128256}, {512, 128256}, {512, 32000}};
  if (argc > 1) {
    shapes.clear();
    for (int i = 1; i < argc; ++i) {
      S s{};
      if (sscanf(argv[i], "%d,%d", &s.n, &s.v) != 2 || s.n < 1 || s.n > 16384 || s.v < 1) { printf("fewrows: '%s' is not N,V\n", argv[i]); return 2; }
      shapes.push_back(s);
    }
  }
  size_t maxb = 0;  // the largest forward's bytes: N*V*2
  for (const S& s : shapes) maxb = std::max(maxb, 2 * (size_t)s.n * s.v);
  char *src, *dst; CK(cudaMalloc(&src, maxb)); CK(cudaMalloc(&dst, maxb));
  CK(cudaMemset(src, 0x3c, maxb));
  float *part, *out; CK(cudaMalloc(&part, 1 << 22)); CK(cudaMalloc(&out, 64));
  CK(cudaFuncSetAttribute(read_cluster, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  printf("empty<<<1,32>>>        cold %.2f us  hot %.2f us\n", med_us([] { empty_kernel<<<1, 32>>>(); }, true), med_us([] { empty_kernel<<<1, 32>>>(); }, false));
  printf("empty<<<2*sms,256>>>   cold %.2f us  hot %.2f us\n", med_us([&] { empty_kernel<<<2 * sms, 256>>>(); }, true), med_us([&] { empty_kernel<<<2 * sms, 256>>>(); }, false));
  // Sizes: half of ce forward's bytes (the floor's copy) at (N, V) bf16: N*V bytes.
  printf("%-12s %9s %9s | %9s %9s | %s\n", "N x V", "copyCold", "copyHot", "read0", "", "best read/1-level/2-level (blocks)");
  for (const S& s : shapes) {
    const size_t half = (size_t)s.n * s.v;  // bytes of the floor's copy
    const size_t full = 2 * half;           // forward reads N*V*2 bytes
    double cc = med_us([&] { CK(cudaMemcpyAsync(dst, src, half, cudaMemcpyDeviceToDevice)); }, true);
    double ch = med_us([&] { CK(cudaMemcpyAsync(dst, src, half, cudaMemcpyDeviceToDevice)); }, false);
    double best[3] = {1e9, 1e9, 1e9}; int bestg[3] = {0, 0, 0};
    for (int splits : {1, 2, 4, 8, 16, 32, 64, 128}) {
      long long blocks = (long long)s.n * splits;
      if (blocks > 16384 || blocks < 1) continue;
      long long vpb = (long long)(full / 16) / blocks;
      if (vpb < 64) continue;
      for (int mode = 0; mode < 3; ++mode) {
        double t;
        if (mode == 0) t = med_us([&] { read_reduce<0><<<blocks, 256>>>((const uint4*)src, vpb, part, out, s.n, splits); }, true, 100);
        else if (mode == 1) t = med_us([&] { read_reduce<1><<<blocks, 256>>>((const uint4*)src, vpb, part, out, s.n, splits); }, true, 100);
        else t = med_us([&] { read_reduce<2><<<blocks, 256>>>((const uint4*)src, vpb, part, out, s.n, splits); }, true, 100);
        CK(cudaGetLastError());
        if (t < best[mode]) best[mode] = t, bestg[mode] = splits;
      }
    }
    double bc = 1e9; int bcg = 0;
    for (int splits : {2, 4, 8, 16}) {
      long long blocks = (long long)s.n * splits;
      long long vpb = (long long)(full / 16) / blocks;
      if (blocks > 4096 || vpb < 64) continue;
      cudaLaunchConfig_t cfg{}; cfg.gridDim = dim3((unsigned)blocks); cfg.blockDim = dim3(256);
      cudaLaunchAttribute at{}; at.id = cudaLaunchAttributeClusterDimension; at.val.clusterDim.x = splits; at.val.clusterDim.y = at.val.clusterDim.z = 1;
      cfg.attrs = &at; cfg.numAttrs = 1;
      double t = med_us([&] { CK(cudaLaunchKernelEx(&cfg, read_cluster, (const uint4*)src, vpb, part, out, s.n, splits)); }, true, 100);
      if (t < bc) bc = t, bcg = splits;
    }
    printf("%4dx%-7d %8.2f %9.2f | read %6.2f (s%d)  1lvl %6.2f (s%d)  2lvl %6.2f (s%d)  clus %6.2f (s%d) | 1lvl/cold %.2f 2lvl/cold %.2f clus/cold %.2f\n", s.n, s.v, cc, ch,
           best[0], bestg[0], best[1], bestg[1], best[2], bestg[2], bc, bcg, best[1] / cc, best[2] / cc, bc / cc);
  }
  CK(cudaDeviceSynchronize());
  return 0;
}
