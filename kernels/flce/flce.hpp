// Device-level entry points of both families on CUDA. Pointers are device
// pointers; the caller owns inputs and outputs, the context owns scratch.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

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

// The flce GEMMs, in the order of KernelConfig::gemm_algos.
enum class GemmRole { logits = 0, dx = 1, dw = 2 };

// Per role, the heuristic's first k cuBLASLt algorithms at the config's
// full-chunk shape, serialised (the tuner's candidates); a role the mode does not
// run gets none. Empty for the ce family, which runs no GEMM.
std::vector<std::vector<std::string>> gemm_candidates(Context& ctx, const Problem& p, const KernelConfig& c, int k);

// Throws Error(usage) if the CUDA kernels cannot run this config for this problem
// on `device` (−1: the current device; impl fused needs an sm_90 device).
void check_supported(const Problem& p, const KernelConfig& c, int device = -1);
size_t scratch_bytes(const Problem& p, const KernelConfig& c);

void run_flce(Context& ctx, const Problem& p, const KernelConfig& c, const Args& a, cudaStream_t st);
void run_ce(Context& ctx, const Problem& p, const KernelConfig& c, const Args& a, cudaStream_t st);

}  // namespace celtune::cuda
