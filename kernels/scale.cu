// celtune_scale's kernel (scale.hpp). PyTorch multiplies a 16-bit tensor by a
// CUDA fp32 scalar in its generic mixed-dtype kernel: 1.84 ms for Llama-3-8B's
// 1 GB bf16 dW on an H100, where a copy of it takes 0.71 and this kernel 0.78
// (docs/results.md, fortieth session). Each thread moves 16-byte vectors,
// grid-stride.
#include "kernels/scale.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "kernels/cuda_check.hpp"
#include "kernels/device_math.cuh"

namespace celtune::cuda {
namespace {

// x·g, but a zero stays as it is (celtune.h): a gradient element that is zero is
// an ignored token's, which PyTorch leaves zero whatever the upstream gradient,
// where 0·inf and 0·NaN are NaN. The CPU context's loop (api.cpp) does the same.
__device__ __forceinline__ float scaled(float x, float g) { return x == 0.0f ? x : x * g; }

// wide: both pointers on the 16-byte grid, so the first n - n % kPer elements
// go as vectors and the rest one by one.
template <typename T>
__global__ void scale_kernel(T* dst, const T* src, int64_t n, const float* scale, bool wide) {
  constexpr int kPer = 16 / sizeof(T);
  const float g = *scale;
  // In place by 1 (loss.backward() on a mean or sum: the Python package's
  // common backward) leaves every element as it is, bit for bit (x·1 = x, a
  // zero stays): no pass over the gradient, 1 GB of dW read and written at
  // Llama-3-8B. Only the device knows g, so the kernel is launched and leaves.
  if (dst == src && g == 1.0f) return;
  const int64_t stride = int64_t{gridDim.x} * blockDim.x, first = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  int64_t done = 0;
  if (wide) {
    const int64_t vecs = n / kPer;
    for (int64_t v = first; v < vecs; v += stride) {
      uint4 raw = reinterpret_cast<const uint4*>(src)[v];
      T* e = reinterpret_cast<T*>(&raw);
#pragma unroll
      for (int k = 0; k < kPer; ++k) e[k] = Conv<T>::from(scaled(Conv<T>::to(e[k]), g));
      reinterpret_cast<uint4*>(dst)[v] = raw;
    }
    done = vecs * kPer;
  }
  for (int64_t i = done + first; i < n; i += stride) dst[i] = Conv<T>::from(scaled(Conv<T>::to(src[i]), g));
}

template <typename T>
void launch(void* dst, const void* src, int64_t n, const float* scale, cudaStream_t st) {
  constexpr int kThreads = 256, kPer = 16 / sizeof(T);
  // Enough 16-byte loads in flight to keep HBM busy (~2 K blocks of 256 threads),
  // each thread looping over the rest.
  constexpr int64_t kMaxBlocks = 2048;
  const bool wide = reinterpret_cast<uintptr_t>(dst) % 16 == 0 && reinterpret_cast<uintptr_t>(src) % 16 == 0;
  const int64_t items = wide ? n / kPer + n % kPer : n;
  const auto blocks = static_cast<unsigned>(std::clamp<int64_t>((items + kThreads - 1) / kThreads, 1, kMaxBlocks));
  scale_kernel<T><<<blocks, kThreads, 0, st>>>(static_cast<T*>(dst), static_cast<const T*>(src), n, scale, wide);
  CELTUNE_LAUNCHED();
}

}  // namespace

void scale(void* dst, const void* src, int64_t n, DType t, const float* scale, cudaStream_t st) {
  if (n == 0) return;
  switch (t) {
    case DType::bf16: return launch<__nv_bfloat16>(dst, src, n, scale, st);
    case DType::fp16: return launch<__half>(dst, src, n, scale, st);
    case DType::fp32: return launch<float>(dst, src, n, scale, st);
  }
}

}  // namespace celtune::cuda
