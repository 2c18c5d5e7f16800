// The cuBLAS+softmax GPU reference: the truth where the fp64 CPU reference would
// take too long (a tokenizer-sized vocabulary times thousands of tokens).
//
// Nothing in it is tuned or fused, so it can be trusted by reading:
//   1. cuBLASLt GEMM in fp32 (pedantic: no TF32) materialises the whole [N,V]
//      logits from fp32 copies of X and W;
//   2. a plain three-pass kernel per row, in fp32 with sums accumulated in double:
//      max and Σz, then Σexp, then the loss and dZ, following flce-math.md step
//      for step (softcap, label smoothing, z-loss, ignore_index);
//   3. cuBLASLt GEMMs in fp32 give dX = dZ·W and dW = dZᵀ·X; db sums dZ's columns.
// It is not the online kernel under test and shares no code with it.
//
// `emulate_dtype` makes it the unfused low-precision path, as in fp64.hpp: logits
// rounded to the input dtype after the bias, dZ rounded before the gradient
// GEMMs, gradients rounded on output. validate uses it as the yardstick for large
// shapes, the way it uses the fp64 reference's emulation for small ones.
//
// Plain C++ interface: callers (validate, tests) need no CUDA headers. It runs
// where cuda_device_count() (kernels/backend.hpp) is positive; in a build
// without CUDA, run_gpu throws.
#pragma once

#include "model/host_case.hpp"
#include "model/problem.hpp"

namespace celtune::reference {

// Runs on CUDA device `ordinal`. Throws Error(usage) for a bad target and
// Error(environment) when the device has too little free memory or CUDA fails.
RefOutputs run_gpu(const Problem& p, const HostCase& c, int ordinal, bool emulate_dtype = false);

}  // namespace celtune::reference
