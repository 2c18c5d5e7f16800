// The CUDA context: one cuBLASLt handle and workspace per context, a cache of
// GEMM plans (descriptors + the heuristic's algorithm), and a grow-only scratch
// buffer. Not thread-safe: one context per thread (the runtime documents this).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <tuple>

namespace celtune::cuda {

// One GEMM shape in cuBLASLt's column-major terms: D[m,n] = op(A)[m,k] · op(B)[k,n].
struct GemmShape {
  cudaDataType_t ab_type, d_type;
  bool trans_a, trans_b;
  int64_t m, n, k, lda, ldb, ldd;
  auto tie() const { return std::tie(ab_type, d_type, trans_a, trans_b, m, n, k, lda, ldb, ldd); }
  bool operator<(const GemmShape& o) const { return tie() < o.tie(); }
};

class Context {
 public:
  explicit Context(int device);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  int device() const { return device_; }
  // D = op(A)·op(B) + beta·D, fp32 accumulation.
  void gemm(const GemmShape& s, const void* a, const void* b, void* d, float beta, cudaStream_t st);
  // CELTUNE_POISON_SCRATCH=1: fill scratch with NaN before every call, so a read
  // of scratch nothing wrote shows up as NaN in the outputs (the gpu suite sets it).
  bool poison_scratch() const { return poison_scratch_; }
  // Scratch of at least `bytes`, valid until the next call; contents undefined.
  void* scratch(size_t bytes);
  static constexpr size_t kWorkspaceBytes = size_t{32} << 20;

 private:
  struct Plan {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
    cublasLtMatmulAlgo_t algo{};
  };
  const Plan& plan(const GemmShape& s);

  int device_;
  bool poison_scratch_ = false;
  cublasLtHandle_t lt_ = nullptr;
  void* workspace_ = nullptr;
  void* scratch_ = nullptr;
  size_t scratch_bytes_ = 0;
  std::map<GemmShape, Plan> plans_;
};

}  // namespace celtune::cuda
