// Device-level entry points of both families on CUDA. Pointers are device
// pointers; the caller owns inputs and outputs, the context owns scratch.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "context.hpp"
#include "model/config.hpp"
#include "model/problem.hpp"

namespace celtune::cuda {

struct Args {
  // flce: x [N,H], w [V,H], b [V] (or null). ce: logits [N,V].
  const void* x = nullptr;
  const void* w = nullptr;
  const void* b = nullptr;
  void* logits = nullptr;
  const void* targets = nullptr;      // [N] int32 or int64
  const float* grad_scale = nullptr;  // device scalar g (mean/sum, backward)
  const float* grad_tokens = nullptr; // device [N] g_i (none, backward)
  // Outputs.
  float* loss = nullptr;        // device scalar (mean/sum: reduced; none: Σ ℓ_i)
  float* token_loss = nullptr;  // [N]
  float* lse = nullptr;         // [N]
  void* dx = nullptr;           // [N,H]  flce
  void* dw = nullptr;           // [V,H]  flce
  void* db = nullptr;           // [V]    flce with bias
  void* dz = nullptr;           // [N,V]  ce (may equal logits: in place)
  int64_t* bad_target = nullptr;  // device scalar: first token with a target outside [0,V), or −1
};

// Throws Error(usage) if the CUDA kernels cannot run this config for this problem.
void check_supported(const Problem& p, const KernelConfig& c);
size_t scratch_bytes(const Problem& p, const KernelConfig& c);

void run_flce(Context& ctx, const Problem& p, const KernelConfig& c, const Args& a, cudaStream_t st);
void run_ce(Context& ctx, const Problem& p, const KernelConfig& c, const Args& a, cudaStream_t st);

}  // namespace celtune::cuda
