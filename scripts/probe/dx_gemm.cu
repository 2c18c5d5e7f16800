// The fused path's dX GEMM, dX[rows, H] = Q[rows, V]·W[V, H], at the row chunks
// a 512 MiB budget allows (sixty-third session): K = V is long and the output
// small, so a data-parallel tiling leaves SMs idle for a whole K sweep (Qwen2.5-7B's
// 1280 × 3584 in 320×128 tiles is 112 tiles on 132 SMs). Times cuBLASLt's
// heuristic candidates (workspace 0, 32 and 128 MiB) against CUTLASS's
// cooperative GEMM under the stream-K tile scheduler in each of its
// decompositions, per shape, and checks CUTLASS's result against cuBLASLt's.
// Event timed after a 256 MiB memset, medians of 25 after 5 warm-ups; the
// CUTLASS times include initialize() (stream-K clears its workspace there),
// as the library would run it. What it found (H200): at 1280 × 3584 × 152064
// stream-K 128×256 took 1.70 ms against cuBLASLt's best 1.84 and data-parallel
// CUTLASS 3.04; at 1024 × 2304 × 256000 1.53 against 1.67; at 2048 × 4096 ×
// 128256 and 4096 × 4096 × 32768 no gain. Isolated timings of these short GEMMs
// moved by up to 10% between identical runs (the clock under the power cap), so
// the library's choice rests on whole steps timed in rounds (variants.hpp).
//   nvcc -O3 -DNDEBUG -std=c++17 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr \
//     -I$(python3 scripts/cutlass_include.py) -o dx_gemm scripts/probe/dx_gemm.cu -lcublasLt && ./dx_gemm
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/kernel/gemm_universal.hpp"

#define CK(x)                                                                     \
  do {                                                                            \
    cudaError_t e_ = (x);                                                         \
    if (e_ != cudaSuccess) {                                                      \
      printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_));           \
      exit(1);                                                                    \
    }                                                                             \
  } while (0)
#define LT(x)                                                                     \
  do {                                                                            \
    cublasStatus_t s_ = (x);                                                      \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                            \
      printf("%s:%d cublasLt status %d\n", __FILE__, __LINE__, static_cast<int>(s_)); \
      exit(1);                                                                    \
    }                                                                             \
  } while (0)

using namespace cute;
using Mode = cutlass::gemm::kernel::detail::DecompositionMode;

__global__ void fill(__nv_bfloat16* p, size_t n, unsigned seed, float scale) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    unsigned h = static_cast<unsigned>(i) * 2654435761u ^ seed;
    h ^= h >> 15, h *= 2246822519u, h ^= h >> 13;
    p[i] = __float2bfloat16(scale * ((h & 0xffff) / 32768.0f - 1.0f));
  }
}

static void* g_flush = nullptr;
constexpr size_t kFlush = size_t(256) << 20;

// Median ms of fn over 25 runs after 5, each after the flush.
static float time_ms(const std::function<void()>& fn) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  std::vector<float> t;
  for (int i = 0; i < 30; ++i) {
    CK(cudaMemsetAsync(g_flush, i, kFlush));
    CK(cudaEventRecord(a));
    fn();
    CK(cudaEventRecord(b));
    CK(cudaEventSynchronize(b));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, a, b));
    if (i >= 5) t.push_back(ms);
  }
  CK(cudaGetLastError());
  CK(cudaEventDestroy(a));
  CK(cudaEventDestroy(b));
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// A stride with its one dynamic leading dimension (modes 0 and 1) set to ld.
template <class Stride>
Stride leading(int64_t ld) {
  Stride s{};
  if constexpr (!cute::is_static_v<cute::remove_cvref_t<decltype(cute::get<0>(s))>>)
    cute::get<0>(s) = ld;
  else
    cute::get<1>(s) = ld;
  return s;
}

template <int BM, int BN, int CM, int CN>
struct DxGemm {
  using E = cutlass::bfloat16_t;
  using Tile = Shape<Int<BM>, Int<BN>, _64>;
  using Cluster = Shape<Int<CM>, Int<CN>, _1>;
  using Epi = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Tile, Cluster, cutlass::epilogue::collective::EpilogueTileAuto,
      float, float, void, cutlass::layout::RowMajor, 8, E, cutlass::layout::RowMajor, 8,
      cutlass::epilogue::TmaWarpSpecializedCooperative>::CollectiveOp;
  using Main = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, E, cutlass::layout::RowMajor, 8, E,
      cutlass::layout::RowMajor, 8, float, Tile, Cluster,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epi::SharedStorage))>,
      cutlass::gemm::KernelTmaWarpSpecializedCooperative>::CollectiveOp;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, Main, Epi,
                                                      cutlass::gemm::StreamKScheduler>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;

  // One row per decomposition: name, ms, workspace bytes.
  static void run_all(const char* name, int M, int N, int K, const void* q, const void* w, void* d, int sms) {
    struct Choice {
      const char* label;
      Mode mode;
      int splits;
    } choices[] = {{"data-parallel", Mode::DataParallel, 1}, {"stream-K", Mode::StreamK, 1},
                   {"heuristic", Mode::Heuristic, 1},        {"split-K 2", Mode::SplitK, 2},
                   {"split-K 3", Mode::SplitK, 3},           {"split-K 4", Mode::SplitK, 4}};
    for (auto& c : choices) {
      typename Gemm::Arguments args{};
      args.mode = cutlass::gemm::GemmUniversalMode::kGemm;
      args.problem_shape = {M, N, K, 1};
      args.mainloop.ptr_A = static_cast<const E*>(q);
      args.mainloop.dA = leading<typename Kernel::StrideA>(K);
      args.mainloop.ptr_B = static_cast<const E*>(w);
      args.mainloop.dB = leading<typename Kernel::StrideB>(N);
      args.epilogue.thread.alpha = 1.0f;
      args.epilogue.thread.beta = 0.0f;
      args.epilogue.ptr_D = static_cast<E*>(d);
      args.epilogue.dD = leading<typename Kernel::StrideD>(N);
      args.hw_info.sm_count = sms;
      args.scheduler.decomposition_mode = c.mode;
      args.scheduler.splits = c.splits;
      Gemm gemm;
      if (gemm.can_implement(args) != cutlass::Status::kSuccess) {
        printf("  cutlass %-22s %-14s cannot implement\n", name, c.label);
        continue;
      }
      const size_t ws_bytes = Gemm::get_workspace_size(args);
      void* ws = nullptr;
      if (ws_bytes) CK(cudaMalloc(&ws, ws_bytes));
      bool ok = true;
      const float ms = time_ms([&] {
        if (gemm.initialize(args, ws) != cutlass::Status::kSuccess || gemm.run() != cutlass::Status::kSuccess) ok = false;
      });
      printf("  cutlass %-22s %-14s %8.3f ms  ws %7.1f MiB%s\n", name, c.label, ms, ws_bytes / 1048576.0,
             ok ? "" : "  FAILED");
      if (ws) CK(cudaFree(ws));
    }
  }
};

static int cfg(const cublasLtMatmulAlgo_t& a, cublasLtMatmulAlgoConfigAttributes_t attr) {
  int v = 0;
  size_t got = 0;
  cublasLtMatmulAlgoConfigGetAttribute(&a, attr, &v, sizeof v, &got);
  return v;
}

__global__ void max_rel(const __nv_bfloat16* a, const __nv_bfloat16* b, size_t n, float* out) {
  float m = 0, s = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const float x = __bfloat162float(a[i]), y = __bfloat162float(b[i]);
    m = fmaxf(m, fabsf(x - y)), s = fmaxf(s, fabsf(y));
  }
  atomicMax(reinterpret_cast<int*>(out), __float_as_int(m));
  atomicMax(reinterpret_cast<int*>(out) + 1, __float_as_int(s));
}

int main(int argc, char** argv) {
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  CK(cudaMalloc(&g_flush, kFlush));
  cublasLtHandle_t lt;
  LT(cublasLtCreate(&lt));
  struct Shape3 {
    int rows, H, V;
  };
  std::vector<Shape3> shapes = {{1280, 3584, 152064}, {1536, 3584, 152064}, {8192, 3584, 152064},
                                {1024, 2304, 256000}, {8192, 2304, 256000}, {2048, 4096, 128256},
                                {4096, 4096, 32768}};
  if (argc > 1) {
    shapes.clear();
    for (int i = 1; i < argc; ++i) {
      Shape3 s{};
      if (sscanf(argv[i], "%d,%d,%d", &s.rows, &s.H, &s.V) == 3) shapes.push_back(s);
    }
  }
  void* ws128 = nullptr;
  CK(cudaMalloc(&ws128, size_t(128) << 20));
  float* diff = nullptr;
  CK(cudaMalloc(&diff, 8));
  for (const auto& s : shapes) {
    const size_t nq = size_t(s.rows) * s.V, nw = size_t(s.V) * s.H, nd = size_t(s.rows) * s.H;
    __nv_bfloat16 *q, *w, *d, *ref;
    CK(cudaMalloc(&q, nq * 2));
    CK(cudaMalloc(&w, nw * 2));
    CK(cudaMalloc(&d, nd * 2));
    CK(cudaMalloc(&ref, nd * 2));
    fill<<<1024, 256>>>(q, nq, 1, 1e-3f);
    fill<<<1024, 256>>>(w, nw, 2, 0.05f);
    const double tflop = 2.0 * s.rows * s.H * double(s.V) * 1e-12;
    printf("shape rows %d, H %d, V %d (%.3f TFLOP)\n", s.rows, s.H, s.V, tflop);
    // Column-major view: D'[H, rows] = W'[H, V] · Q'[V, rows].
    cublasLtMatmulDesc_t op;
    LT(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasLtMatrixLayout_t la, lb, ld;
    LT(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, s.H, s.V, s.H));
    LT(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, s.V, s.rows, s.V));
    LT(cublasLtMatrixLayoutCreate(&ld, CUDA_R_16BF, s.H, s.rows, s.H));
    bool have_ref = false;
    for (size_t ws_mib : {size_t(0), size_t(32), size_t(128)}) {
      size_t ws = ws_mib << 20;
      cublasLtMatmulPreference_t pref;
      LT(cublasLtMatmulPreferenceCreate(&pref));
      LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
      cublasLtMatmulHeuristicResult_t res[16] = {};
      int found = 0;
      LT(cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, ld, ld, pref, 16, res, &found));
      cublasLtMatmulPreferenceDestroy(pref);
      for (int i = 0; i < found; ++i) {
        const float alpha = 1, beta = 0;
        const auto& a = res[i].algo;
        const float ms = time_ms([&] {
          LT(cublasLtMatmul(lt, op, &alpha, w, la, q, lb, &beta, ref, ld, ref, ld, &a, ws128, res[i].workspaceSize, 0));
        });
        have_ref = true;
        printf("  cublasLt ws %3zu MiB #%-2d id %3d tile %3d stages %3d splitK %2d red %d swizzle %d  %8.3f ms  %6.1f TFLOP/s  needs %.1f MiB\n",
               ws_mib, i, cfg(a, CUBLASLT_ALGO_CONFIG_ID), cfg(a, CUBLASLT_ALGO_CONFIG_TILE_ID),
               cfg(a, CUBLASLT_ALGO_CONFIG_STAGES_ID), cfg(a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM),
               cfg(a, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME), cfg(a, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING), ms,
               tflop / ms * 1e3, res[i].workspaceSize / 1048576.0);
      }
    }
    DxGemm<128, 256, 2, 1>::run_all("128x256x64_2x1 coop", s.rows, s.H, s.V, q, w, d, sms);
    if (have_ref) {
      CK(cudaMemset(diff, 0, 8));
      max_rel<<<1024, 256>>>(d, ref, nd, diff);
      float h[2];
      CK(cudaMemcpy(h, diff, 8, cudaMemcpyDeviceToHost));
      printf("  check: CUTLASS (last decomposition) against cuBLASLt: max |diff| %.3g, max |ref| %.3g\n", h[0], h[1]);
    }
    DxGemm<128, 128, 2, 1>::run_all("128x128x64_2x1 coop", s.rows, s.H, s.V, q, w, d, sms);
    DxGemm<256, 128, 1, 2>::run_all("256x128x64_1x2 coop", s.rows, s.H, s.V, q, w, d, sms);
    cublasLtMatrixLayoutDestroy(la), cublasLtMatrixLayoutDestroy(lb), cublasLtMatrixLayoutDestroy(ld);
    cublasLtMatmulDescDestroy(op);
    CK(cudaFree(q));
    CK(cudaFree(w));
    CK(cudaFree(d));
    CK(cudaFree(ref));
  }
  printf("done\n");
  return 0;
}
