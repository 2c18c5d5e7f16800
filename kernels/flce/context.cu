#include "context.hpp"

#include <algorithm>
#include <cstdlib>
#include <string>

#include "kernels/cuda_check.hpp"
#include "model/config.hpp"

namespace celtune::cuda {

Context::Context(int device) : device_(device) {
  const char* poison = std::getenv("CELTUNE_POISON_SCRATCH");
  poison_scratch_ = poison && *poison && std::string(poison) != "0";
  DeviceScope on(device);
  CELTUNE_CUBLAS(cublasLtCreate(&lt_));
}

Context::~Context() {
  DeviceScope on(device_, std::nothrow);
  for (auto& [k, p] : plans_) release(p);
  cudaFree(scratch_);
  cudaFree(counter_);
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

unsigned* Context::ce_counters() {
  if (!counter_) {
    constexpr size_t kBytes = sizeof(unsigned) * (1 + kCeOneLaunchTokens);
    CELTUNE_CUDA(cudaMalloc(&counter_, kBytes));
    CELTUNE_CUDA(cudaMemset(counter_, 0, kBytes));
  }
  return counter_;
}

std::string serialise_algo(const cublasLtMatmulAlgo_t& a) {
  static constexpr char kHex[] = "0123456789abcdef";
  const auto* bytes = reinterpret_cast<const unsigned char*>(&a);
  std::string out;
  for (size_t i = 0; i < sizeof a; ++i) out += kHex[bytes[i] >> 4], out += kHex[bytes[i] & 15];
  return out;
}

bool parse_algo(const std::string& text, cublasLtMatmulAlgo_t* out) {
  if (text.size() != 2 * sizeof(cublasLtMatmulAlgo_t)) return false;
  auto nibble = [](char c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1; };
  auto* bytes = reinterpret_cast<unsigned char*>(out);
  for (size_t i = 0; i < sizeof *out; ++i) {
    const int hi = nibble(text[2 * i]), lo = nibble(text[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    bytes[i] = static_cast<unsigned char>(hi * 16 + lo);
  }
  return true;
}

Context::Plan Context::describe(const GemmShape& s) {
  Plan p;
  try {
    CELTUNE_CUBLAS(cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t ta = s.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, tb = s.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    CELTUNE_CUBLAS(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    CELTUNE_CUBLAS(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    CELTUNE_CUBLAS(cublasLtMatrixLayoutCreate(&p.a, s.ab_type, s.trans_a ? s.k : s.m, s.trans_a ? s.m : s.k, s.lda));
    CELTUNE_CUBLAS(cublasLtMatrixLayoutCreate(&p.b, s.ab_type, s.trans_b ? s.n : s.k, s.trans_b ? s.k : s.n, s.ldb));
    CELTUNE_CUBLAS(cublasLtMatrixLayoutCreate(&p.d, s.d_type, s.m, s.n, s.ldd));
  } catch (...) {
    release(p);
    throw;
  }
  return p;
}

void Context::release(Plan& p) {
  cublasLtMatrixLayoutDestroy(p.a);
  cublasLtMatrixLayoutDestroy(p.b);
  cublasLtMatrixLayoutDestroy(p.d);
  cublasLtMatmulDescDestroy(p.op);
  p = Plan{};
}

std::vector<Context::Algo> Context::heuristic(const Plan& p, int k, size_t ws_bytes, cublasStatus_t* status) {
  cublasLtMatmulPreference_t pref = nullptr;
  *status = cublasLtMatmulPreferenceCreate(&pref);
  if (*status != CUBLAS_STATUS_SUCCESS) return {};
  const size_t ws = ws_bytes;
  // Our chunk pointers are 16-byte aligned (H and v_chunk multiples of 8), not
  // 256: tell the heuristic, so it picks algorithms valid for every chunk.
  const uint32_t align = 16;
  constexpr int kMax = 32;
  cublasLtMatmulHeuristicResult_t results[kMax] = {};
  k = std::clamp(k, 1, kMax);
  int found = 0;
  cublasStatus_t st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
  for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
    if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatmulPreferenceSetAttribute(pref, attr, &align, sizeof align);
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatmulAlgoGetHeuristic(lt_, p.op, p.a, p.b, p.d, p.d, pref, k, results, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  *status = st;
  std::vector<Algo> out;
  for (int i = 0; i < found && st == CUBLAS_STATUS_SUCCESS; ++i)
    if (results[i].state == CUBLAS_STATUS_SUCCESS) out.push_back(Algo{results[i].algo});
  return out;
}

std::vector<std::string> Context::heuristic_algos(const GemmShape& s, int k, size_t ws_bytes) {
  DeviceScope on(device_);
  Plan p = describe(s);
  cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
  const auto algos = heuristic(p, k, ws_bytes, &st);
  release(p);
  std::vector<std::string> out;
  for (const auto& a : algos) out.push_back(serialise_algo(a.algo));
  return out;
}

const Context::Plan& Context::plan(const GemmShape& s, const std::string& algo, size_t ws_bytes) {
  if (auto it = plans_.find(PlanKey{s, algo, ws_bytes}); it != plans_.end()) return it->second;
  Plan p = describe(s);
  bool have = false;
  if (!algo.empty()) {
    cublasLtMatmulAlgo_t tuned{};
    if (!parse_algo(algo, &tuned)) {
      release(p);
      fail_usage("gemm_algos entry is not a serialised cuBLASLt algorithm (128 hex digits)");
    }
    // The tuned algorithm was chosen for the full-chunk shape; cuBLASLt decides
    // whether it also serves this one (and within our workspace).
    cublasLtMatmulHeuristicResult_t check{};
    if (cublasLtMatmulAlgoCheck(lt_, p.op, p.a, p.b, p.d, p.d, &tuned, &check) == CUBLAS_STATUS_SUCCESS &&
        check.workspaceSize <= ws_bytes) {
      p.algo = tuned;
      have = true;
    } else {
      ++algo_fallbacks_;
    }
  }
  if (!have) {
    cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
    const auto algos = heuristic(p, 1, ws_bytes, &st);
    if (algos.empty()) {
      release(p);
      throw Error(Status::environment, "cuBLASLt has no algorithm for GEMM m=" + std::to_string(s.m) +
                                           " n=" + std::to_string(s.n) + " k=" + std::to_string(s.k) +
                                           " (status " + std::to_string(static_cast<int>(st)) + ")");
    }
    p.algo = algos.front().algo;
  }
  return plans_.emplace(PlanKey{s, algo, ws_bytes}, p).first->second;
}

void Context::gemm(const GemmShape& s, const void* a, const void* b, void* d, float beta, cudaStream_t st,
                   const Workspace& ws, const std::string* algo) {
  static const std::string kHeuristic;
  const Plan& p = plan(s, algo ? *algo : kHeuristic, ws.bytes);
  const float alpha = 1.0f;
  CELTUNE_CUBLAS(
      cublasLtMatmul(lt_, p.op, &alpha, a, p.a, b, p.b, &beta, d, p.d, d, p.d, &p.algo, ws.ptr, ws.bytes, st));
}

}  // namespace celtune::cuda
