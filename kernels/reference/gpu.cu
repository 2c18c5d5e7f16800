// The cuBLAS+softmax GPU reference (see gpu.hpp for what and why).
#include "gpu.hpp"

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdlib>
#include <vector>

#include "kernels/cuda_check.hpp"
#include "model/error.hpp"

namespace celtune::reference {
namespace {

// A device array freed on scope exit.
template <typename T>
struct DeviceArray {
  T* p = nullptr;
  explicit DeviceArray(size_t n) {
    if (n) CELTUNE_CUDA(cudaMalloc(&p, n * sizeof(T)));
  }
  ~DeviceArray() { cudaFree(p); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
};
using DeviceFloats = DeviceArray<float>;

// 0: keep fp32; 1: round to bf16; 2: round to fp16 (round to nearest even).
__device__ __forceinline__ float round_dtype(float v, int to) {
  if (to == 1) return __bfloat162float(__float2bfloat16_rn(v));
  if (to == 2) return __half2float(__float2half_rn(v));
  return v;
}

struct CeParams {
  int64_t V;
  int64_t ignore_index;
  float softcap, eps, lam;
  int round_to;  // round_dtype's code for the logits and dZ
  bool backward;
};

constexpr int kThreads = 256;

// Block-wide reductions over kThreads threads through shared memory: plain and
// obviously right, which matters more here than speed.
__device__ double block_sum(double v, double* smem) {
  smem[threadIdx.x] = v;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s /= 2) {
    if (threadIdx.x < s) smem[threadIdx.x] += smem[threadIdx.x + s];
    __syncthreads();
  }
  const double r = smem[0];
  __syncthreads();
  return r;
}

__device__ float block_max(float v, float* smem) {
  smem[threadIdx.x] = v;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s /= 2) {
    if (threadIdx.x < s) smem[threadIdx.x] = fmaxf(smem[threadIdx.x], smem[threadIdx.x + s]);
    __syncthreads();
  }
  const float r = smem[0];
  __syncthreads();
  return r;
}

// One block per row i of z [N,V] (fp32 logits from the GEMM). flce-math.md:
//   pass 0: z += b, rounded to the dtype when emulating; ẑ = s·tanh(z/s) (step 2)
//   pass 1: m = max ẑ, Σẑ (for label smoothing), NaN seen
//   pass 2: d = Σ exp(ẑ − m);  L = m + log d  (step 3)
//   loss:   (1−ε)(L − ẑ_t) + ε(L − Σẑ/V) + λL²  for a target that is not ignored (step 4)
//   pass 3: dZ_j = c_i·((1 + 2λL)·exp(ẑ_j − L) − ε/V − (1−ε)[j = t])·(1 − (ẑ_j/s)²), in place,
//           the last factor as 1/cosh²(z_j/s): 1 − (ẑ/s)² cancels where the softcap
//           saturates. So the row keeps z, and each pass takes ẑ from it.
__global__ void three_pass_ce(float* z, const float* bias, const int64_t* targets, const float* scale, CeParams q,
                              float* lse, float* token_loss) {
  __shared__ double dsm[kThreads];
  __shared__ float fsm[kThreads];
  const int64_t i = blockIdx.x;
  float* row = z + i * q.V;
  const bool cap = q.softcap > 0.0f;
  auto capped = [&](float v) { return cap ? q.softcap * tanhf(v / q.softcap) : v; };

  float m = -INFINITY;
  double zsum = 0.0, nan = 0.0;
  for (int64_t j = threadIdx.x; j < q.V; j += kThreads) {
    float v = row[j] + (bias ? bias[j] : 0.0f);
    v = round_dtype(v, q.round_to);
    row[j] = v;
    v = capped(v);
    if (isnan(v)) nan = 1.0;
    m = fmaxf(m, v);
    zsum += v;
  }
  m = block_max(m, fsm);
  zsum = block_sum(zsum, dsm);
  nan = block_sum(nan, dsm);

  double d = 0.0;
  for (int64_t j = threadIdx.x; j < q.V; j += kThreads) d += expf(capped(row[j]) - m);
  d = block_sum(d, dsm);
  const float L = nan > 0.0 ? NAN : m + static_cast<float>(log(d));

  const int64_t t = targets[i];
  const bool valid = t != q.ignore_index;
  if (threadIdx.x == 0) {
    lse[i] = L;
    float loss = 0.0f;
    if (valid)
      loss = static_cast<float>((1.0 - q.eps) * (L - capped(row[t])) +
                                (q.eps > 0 ? q.eps * (L - zsum / static_cast<double>(q.V)) : 0.0) +  // as fp64.cpp
                                static_cast<double>(q.lam) * L * L);
    token_loss[i] = loss;
  }
  __syncthreads();  // thread 0 read row[t] above; pass 3 overwrites it
  if (!q.backward) return;
  const float c = scale[i];
  for (int64_t j = threadIdx.x; j < q.V; j += kThreads) {
    const float zj = capped(row[j]);
    float g = 0.0f;
    if (valid && c != 0.0f) {
      g = (1.0f + 2.0f * q.lam * L) * expf(zj - L) - q.eps / static_cast<float>(q.V);
      if (j == t) g -= 1.0f - q.eps;
      if (cap) {
        const float ch = coshf(row[j] / q.softcap);  // ch·ch is inf past |z/s| ≈ 45: g/inf = 0
        g /= ch * ch;
      }
      g *= c;
    }
    row[j] = round_dtype(g, q.round_to);
  }
}

// db_j = Σ_i dZ[i,j]: one thread per column, rows in order, summed in double.
__global__ void column_sums(const float* dz, int64_t N, int64_t V, float* db, int round_to) {
  const int64_t j = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (j >= V) return;
  double s = 0.0;
  for (int64_t i = 0; i < N; ++i) s += dz[i * V + j];
  db[j] = round_dtype(static_cast<float>(s), round_to);
}

__global__ void round_all(float* v, int64_t n, int round_to) {
  for (int64_t k = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; k < n; k += int64_t{gridDim.x} * blockDim.x)
    v[k] = round_dtype(v[k], round_to);
}

// D[m,n] = op(A)·op(B), column-major, all fp32 with fp32 accumulation. Pedantic
// compute keeps TF32 out even when NVIDIA_TF32_OVERRIDE asks for it; where
// cuBLASLt offers no pedantic algorithm, plain 32F (no TF32 unless overridden).
class Gemm {
 public:
  Gemm() {
    CELTUNE_CUBLAS(cublasLtCreate(&lt_));
    CELTUNE_CUDA(cudaMalloc(&ws_, kWorkspace));
  }
  ~Gemm() {
    cudaFree(ws_);
    cublasLtDestroy(lt_);
  }
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  void operator()(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* A, int64_t lda, const float* B,
                  int64_t ldb, float* D, int64_t ldd) {
    for (cublasComputeType_t ct : {CUBLAS_COMPUTE_32F_PEDANTIC, CUBLAS_COMPUTE_32F})
      if (try_run(ct, ta, tb, m, n, k, A, lda, B, ldb, D, ldd)) return;
    fail_env("cuBLASLt offers no fp32 algorithm for the reference GEMM m=" + std::to_string(m) +
             " n=" + std::to_string(n) + " k=" + std::to_string(k));
  }

 private:
  static constexpr size_t kWorkspace = size_t{32} << 20;

  // Descriptors destroyed on every path, errors included.
  struct Descs {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
    cublasLtMatmulPreference_t pref = nullptr;
    ~Descs() {
      cublasLtMatmulPreferenceDestroy(pref);
      cublasLtMatrixLayoutDestroy(d);
      cublasLtMatrixLayoutDestroy(b);
      cublasLtMatrixLayoutDestroy(a);
      cublasLtMatmulDescDestroy(op);
    }
  };

  bool try_run(cublasComputeType_t ct, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* A,
               int64_t lda, const float* B, int64_t ldb, float* D, int64_t ldd) {
    Descs s;
    CELTUNE_CUBLAS(cublasLtMatmulDescCreate(&s.op, ct, CUDA_R_32F));
    const cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    CELTUNE_CUBLAS(cublasLtMatmulDescSetAttribute(s.op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
    CELTUNE_CUBLAS(cublasLtMatmulDescSetAttribute(s.op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
    CELTUNE_CUBLAS(cublasLtMatrixLayoutCreate(&s.a, CUDA_R_32F, ta ? k : m, ta ? m : k, lda));
    CELTUNE_CUBLAS(cublasLtMatrixLayoutCreate(&s.b, CUDA_R_32F, tb ? n : k, tb ? k : n, ldb));
    CELTUNE_CUBLAS(cublasLtMatrixLayoutCreate(&s.d, CUDA_R_32F, m, n, ldd));
    CELTUNE_CUBLAS(cublasLtMatmulPreferenceCreate(&s.pref));
    const size_t ws = kWorkspace;
    CELTUNE_CUBLAS(cublasLtMatmulPreferenceSetAttribute(s.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    cublasLtMatmulHeuristicResult_t h{};
    int found = 0;
    if (cublasLtMatmulAlgoGetHeuristic(lt_, s.op, s.a, s.b, s.d, s.d, s.pref, 1, &h, &found) !=
            CUBLAS_STATUS_SUCCESS ||
        found == 0)
      return false;
    const float one = 1.0f, zero = 0.0f;
    CELTUNE_CUBLAS(cublasLtMatmul(lt_, s.op, &one, A, s.a, B, s.b, &zero, D, s.d, D, s.d, &h.algo, ws_, kWorkspace,
                                  nullptr));
    return true;
  }

  cublasLtHandle_t lt_ = nullptr;
  void* ws_ = nullptr;
};

void upload(float* dst, const std::vector<float>& src) {
  if (!src.empty()) CELTUNE_CUDA(cudaMemcpy(dst, src.data(), src.size() * sizeof(float), cudaMemcpyHostToDevice));
}

std::vector<double> download(const float* src, size_t n) {
  std::vector<float> f(n);
  if (n) CELTUNE_CUDA(cudaMemcpy(f.data(), src, n * sizeof(float), cudaMemcpyDeviceToHost));
  return {f.begin(), f.end()};
}

// Device memory the reference needs, in bytes (all fp32 buffers).
size_t reference_bytes(const Problem& p) {
  const auto N = static_cast<size_t>(p.tokens), H = static_cast<size_t>(p.hidden), V = static_cast<size_t>(p.vocab);
  const bool flce = p.family == Family::flce, bwd = p.mode == Mode::forward_backward;
  size_t floats = N * V + 4 * N;                               // logits / dZ, targets (int64), scale, lse, loss
  if (flce) floats += N * H + V * H + (p.bias ? 2 * V : 0);     // X, W, b, db
  if (flce && bwd) floats += N * H + V * H;                     // dX, dW
  return floats * sizeof(float) + (flce ? size_t{32} << 20 : 0);  // + GEMM workspace
}

}  // namespace

RefOutputs run_gpu(const Problem& p, const HostCase& c, int ordinal, bool emulate) {
  p.validate();
  check_targets(p, c);
  cuda::DeviceScope scope(ordinal);
  {
    size_t free_b = 0, total_b = 0;
    CELTUNE_CUDA(cudaMemGetInfo(&free_b, &total_b));
    const size_t need = reference_bytes(p);
    if (need > free_b)
      fail_env("the GPU reference needs " + std::to_string(need >> 20) + " MiB of device memory for " + p.key() +
               "; " + std::to_string(free_b >> 20) + " MiB are free");
  }
  const int64_t N = p.tokens, H = p.hidden, V = p.vocab;
  const bool flce = p.family == Family::flce, bwd = p.mode == Mode::forward_backward;
  const int round_code = !emulate ? 0 : p.dtype == DType::bf16 ? 1 : p.dtype == DType::fp16 ? 2 : 0;

  DeviceFloats z(static_cast<size_t>(N * V));
  DeviceFloats x(flce ? static_cast<size_t>(N * H) : 0), w(flce ? static_cast<size_t>(V * H) : 0);
  DeviceFloats b(flce && p.bias ? static_cast<size_t>(V) : 0);
  DeviceFloats scale(static_cast<size_t>(N)), lse(static_cast<size_t>(N)), loss(static_cast<size_t>(N));
  DeviceArray<int64_t> targets(static_cast<size_t>(N));
  CELTUNE_CUDA(cudaMemcpy(targets.p, c.targets.data(), static_cast<size_t>(N) * sizeof(int64_t), cudaMemcpyHostToDevice));
  {
    std::vector<float> s(static_cast<size_t>(N));
    for (int64_t i = 0; i < N; ++i) s[static_cast<size_t>(i)] = static_cast<float>(token_grad_scale(p, c, i));
    upload(scale.p, s);
  }

  Gemm gemm;
  if (flce) {
    upload(x.p, c.x), upload(w.p, c.w);
    if (p.bias) upload(b.p, c.b);
    CELTUNE_CUDA(cudaMemset(z.p, 0, static_cast<size_t>(N * V) * sizeof(float)));  // as for dX, dW below
    // Z[N,V] row-major is Zᵀ[V,N] column-major = W[V,H]·Xᵀ: A = W (H×V col-major, transposed), B = X (H×N).
    gemm(true, false, V, N, H, w.p, H, x.p, H, z.p, V);
  } else {
    upload(z.p, c.logits);
  }
  CeParams q{V, p.loss.ignore_index, static_cast<float>(p.loss.softcap), static_cast<float>(p.loss.label_smoothing),
             static_cast<float>(p.loss.z_loss), round_code, bwd};
  if (N > 0) {
    three_pass_ce<<<static_cast<unsigned>(N), kThreads>>>(z.p, b.p, targets.p, scale.p, q, lse.p, loss.p);
    CELTUNE_LAUNCHED();
  }

  RefOutputs r;
  r.lse = download(lse.p, static_cast<size_t>(N));
  r.token_loss = download(loss.p, static_cast<size_t>(N));
  double total = 0.0;  // step 5, on the host in double
  for (double l : r.token_loss) total += l;
  r.loss = p.loss.reduction == Reduction::mean ? (c.n_valid ? total / static_cast<double>(c.n_valid) : 0.0) : total;
  if (!bwd) return r;
  if (!flce) {
    r.grad_logits = download(z.p, static_cast<size_t>(N * V));
    return r;
  }
  DeviceFloats dx(static_cast<size_t>(N * H)), dw(static_cast<size_t>(V * H));
  // cuBLASLt's split-K reduction reads D even with beta = 0 (initcheck flags it):
  // zeroed outputs keep the reference free of uninitialised reads.
  CELTUNE_CUDA(cudaMemset(dx.p, 0, static_cast<size_t>(N * H) * sizeof(float)));
  CELTUNE_CUDA(cudaMemset(dw.p, 0, static_cast<size_t>(V * H) * sizeof(float)));
  // dX[N,H] row-major = col-major [H,N] = W (H×V col-major) · dZᵀ-view (V×N col-major).
  gemm(false, false, H, N, V, w.p, H, z.p, V, dx.p, H);
  // dW[V,H] row-major = col-major [H,V] = X (H×N col-major) · (dZ as V×N col-major)ᵀ.
  gemm(false, true, H, V, N, x.p, H, z.p, V, dw.p, H);
  if (round_code) {
    round_all<<<1024, 256>>>(dx.p, N * H, round_code);
    CELTUNE_LAUNCHED();
    round_all<<<1024, 256>>>(dw.p, V * H, round_code);
    CELTUNE_LAUNCHED();
  }
  r.dx = download(dx.p, static_cast<size_t>(N * H));
  r.dw = download(dw.p, static_cast<size_t>(V * H));
  if (p.bias) {
    column_sums<<<static_cast<unsigned>((V + 255) / 256), 256>>>(z.p, N, V, b.p, round_code);  // b no longer needed
    CELTUNE_LAUNCHED();
    r.db = download(b.p, static_cast<size_t>(V));
  }
  return r;
}

}  // namespace celtune::reference
