// Gradients times an upstream scale: what a binding applies in backward to the
// gradients a forward call computed with grad_scale 1 (the Python package's
// mean and sum). A copy-speed elementwise kernel, not a tuned one: it is not in
// the kernel hash (kernels/meson.build), and no database row depends on it.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "model/types.hpp"

namespace celtune::cuda {

// dst[i] = src[i]·(*scale) for i < n: the product in fp32, rounded once to the
// dtype (to nearest even), a zero kept as it is (celtune.h); PyTorch's (t * g).to(t.dtype) on CUDA rounds a
// 16-bit t's scalar g to t's dtype first. dst may equal src; scale is device
// memory; on the current device and stream `st`.
void scale(void* dst, const void* src, int64_t n, DType t, const float* scale, cudaStream_t st);

}  // namespace celtune::cuda
