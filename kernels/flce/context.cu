#include "context.hpp"

#include <cstdlib>
#include <string>

#include "kernels/cuda_check.hpp"

namespace celtune::cuda {

Context::Context(int device) : device_(device) {
  const char* poison = std::getenv("CELTUNE_POISON_SCRATCH");
  poison_scratch_ = poison && *poison && std::string(poison) != "0";
  CELTUNE_CUDA(cudaSetDevice(device));
  CELTUNE_CUBLAS(cublasLtCreate(&lt_));
  CELTUNE_CUDA(cudaMalloc(&workspace_, kWorkspaceBytes));
}

Context::~Context() {
  for (auto& [k, p] : plans_) {
    cublasLtMatrixLayoutDestroy(p.a);
    cublasLtMatrixLayoutDestroy(p.b);
    cublasLtMatrixLayoutDestroy(p.d);
    cublasLtMatmulDescDestroy(p.op);
  }
  cudaFree(scratch_);
  cudaFree(workspace_);
  cublasLtDestroy(lt_);
}

void* Context::scratch(size_t bytes) {
  if (bytes <= scratch_bytes_) return scratch_;
  CELTUNE_CUDA(cudaFree(scratch_));
  scratch_ = nullptr;
  scratch_bytes_ = 0;
  CELTUNE_CUDA(cudaMalloc(&scratch_, bytes));
  scratch_bytes_ = bytes;
  return scratch_;
}

const Context::Plan& Context::plan(const GemmShape& s) {
  if (auto it = plans_.find(s); it != plans_.end()) return it->second;
  Plan p;
  CELTUNE_CUBLAS(cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = s.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, tb = s.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  CELTUNE_CUBLAS(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
  CELTUNE_CUBLAS(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
  CELTUNE_CUBLAS(cublasLtMatrixLayoutCreate(&p.a, s.ab_type, s.trans_a ? s.k : s.m, s.trans_a ? s.m : s.k, s.lda));
  CELTUNE_CUBLAS(cublasLtMatrixLayoutCreate(&p.b, s.ab_type, s.trans_b ? s.n : s.k, s.trans_b ? s.k : s.n, s.ldb));
  CELTUNE_CUBLAS(cublasLtMatrixLayoutCreate(&p.d, s.d_type, s.m, s.n, s.ldd));
  cublasLtMatmulPreference_t pref = nullptr;
  CELTUNE_CUBLAS(cublasLtMatmulPreferenceCreate(&pref));
  const size_t ws = kWorkspaceBytes;
  // Our chunk pointers are 16-byte aligned (H and v_chunk multiples of 8), not
  // 256: tell the heuristic, so it picks an algorithm valid for every chunk.
  const uint32_t align = 16;
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  cublasStatus_t st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
  for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
    if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatmulPreferenceSetAttribute(pref, attr, &align, sizeof align);
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatmulAlgoGetHeuristic(lt_, p.op, p.a, p.b, p.d, p.d, pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (st != CUBLAS_STATUS_SUCCESS || found == 0) {
    cublasLtMatrixLayoutDestroy(p.a);
    cublasLtMatrixLayoutDestroy(p.b);
    cublasLtMatrixLayoutDestroy(p.d);
    cublasLtMatmulDescDestroy(p.op);
    throw Error(Status::environment, "cuBLASLt has no algorithm for GEMM m=" + std::to_string(s.m) +
                                         " n=" + std::to_string(s.n) + " k=" + std::to_string(s.k) +
                                         " (status " + std::to_string(static_cast<int>(st)) + ")");
  }
  p.algo = result.algo;
  return plans_.emplace(s, p).first->second;
}

void Context::gemm(const GemmShape& s, const void* a, const void* b, void* d, float beta, cudaStream_t st) {
  const Plan& p = plan(s);
  const float alpha = 1.0f;
  CELTUNE_CUBLAS(cublasLtMatmul(lt_, p.op, &alpha, a, p.a, b, p.b, &beta, d, p.d, d, p.d, &p.algo, workspace_,
                                kWorkspaceBytes, st));
}

}  // namespace celtune::cuda
