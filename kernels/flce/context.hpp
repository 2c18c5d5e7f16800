// The CUDA context: one cuBLASLt handle per context, a cache of GEMM plans
// (descriptors + the heuristic's algorithm for a workspace size), and a grow-only
// scratch buffer. The GEMM workspace is each call's own (a piece of its scratch). Not thread-safe: one context per thread (the runtime documents this).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/flce/workspace.hpp"

namespace celtune::cuda {

// One GEMM shape in cuBLASLt's column-major terms: D[m,n] = op(A)[m,k] · op(B)[k,n].
struct GemmShape {
  cudaDataType_t ab_type, d_type;
  bool trans_a, trans_b;
  int64_t m, n, k, lda, ldb, ldd;
  auto tie() const { return std::tie(ab_type, d_type, trans_a, trans_b, m, n, k, lda, ldb, ldd); }
  bool operator<(const GemmShape& o) const { return tie() < o.tie(); }
};

// cuBLASLt algorithms travel as text: the 64 bytes of cublasLtMatmulAlgo_t in
// hex. The struct is opaque and only meaningful to the cuBLASLt version that
// produced it, which the config records beside it (gemm_algos_cublaslt).
std::string serialise_algo(const cublasLtMatmulAlgo_t& a);
bool parse_algo(const std::string& text, cublasLtMatmulAlgo_t* out);  // false: not 128 hex digits

class Context {
 public:
  explicit Context(int device);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  int device() const { return device_; }
  // D = op(A)·op(B) + beta·D, fp32 accumulation. `algo`: a serialised cuBLASLt
  // algorithm (a tuned config's gemm_algos entry), or null/empty for the
  // heuristic's first choice. A tuned algorithm is found for the config's
  // full-chunk shape; where cuBLASLt's check rejects it for another shape (the
  // ragged last chunk), that shape takes the heuristic's choice instead.
  // `ws`: the device memory it may use; the heuristic picks among the algorithms
  // that fit it.
  void gemm(const GemmShape& s, const void* a, const void* b, void* d, float beta, cudaStream_t st,
            const Workspace& ws, const std::string* algo = nullptr);
  // The heuristic's first k algorithms for a shape within `ws_bytes` of
  // workspace, serialised; [0] is what a null `algo` runs. The tuner's candidates
  // for each GEMM role.
  std::vector<std::string> heuristic_algos(const GemmShape& s, int k, size_t ws_bytes);
  // Shapes that fell back from a tuned algorithm to the heuristic (diagnostics).
  int64_t algo_fallbacks() const { return algo_fallbacks_; }
  // CELTUNE_POISON_SCRATCH=1: fill scratch with NaN before every call, so a read
  // of scratch nothing wrote shows up as NaN in the outputs (the gpu suite sets it).
  bool poison_scratch() const { return poison_scratch_; }
  // Scratch of at least `bytes`, valid until the next call; contents undefined.
  void* scratch(size_t bytes);
  // Device counters that are zero between calls, for kernels whose last block
  // finishes the call (ce's one launch and the fused flce merge: [0]) and whose
  // blocks meet per row (ce_spread: [1 + row], kCeOneLaunchTokens rows). Outside
  // scratch: poisoning must not touch them, and they keep their zero from one
  // call to the next.
  unsigned* ce_counters();

 private:
  struct Plan {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
    cublasLtMatmulAlgo_t algo{};
  };
  // Descriptors for a shape (destroyed by release() or the destructor).
  Plan describe(const GemmShape& s);
  static void release(Plan& p);
  // The heuristic's first k results for a described shape (fewer when it has
  // fewer). Named wrapper: nvcc's front end fails on std::vector of cuBLASLt's
  // anonymous typedef'd structs.
  struct Algo {
    cublasLtMatmulAlgo_t algo;
  };
  std::vector<Algo> heuristic(const Plan& p, int k, size_t ws_bytes, cublasStatus_t* status);
  const Plan& plan(const GemmShape& s, const std::string& algo, size_t ws_bytes);

  int device_;
  bool poison_scratch_ = false;
  cublasLtHandle_t lt_ = nullptr;
  void* scratch_ = nullptr;
  size_t scratch_bytes_ = 0;
  unsigned* counter_ = nullptr;
  struct PlanKey {
    GemmShape shape;
    std::string algo;
    size_t ws_bytes;
    bool operator<(const PlanKey& o) const {
      return shape < o.shape || (!(o.shape < shape) && std::tie(algo, ws_bytes) < std::tie(o.algo, o.ws_bytes));
    }
  };
  std::map<PlanKey, Plan> plans_;
  int64_t algo_fallbacks_ = 0;
};

}  // namespace celtune::cuda
