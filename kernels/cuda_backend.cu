// The CUDA backend: moves host cases to the device and back (validate), keeps
// random inputs resident for timing (bench, tune), and measures the floors.
#include "cuda_backend.hpp"

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <dlfcn.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "flce/flce.hpp"
#include "kernels/ce/ce.hpp"
#include "kernels/cuda_check.hpp"
#include "model/numerics.hpp"

namespace celtune::cuda {
namespace {

// A device allocation freed on scope exit.
class Buffer {
 public:
  Buffer() = default;
  explicit Buffer(size_t bytes) : bytes_(bytes) {
    if (bytes) CELTUNE_CUDA(cudaMalloc(&p_, bytes));
  }
  ~Buffer() { cudaFree(p_); }
  Buffer(Buffer&& o) noexcept : p_(o.p_), bytes_(o.bytes_) { o.p_ = nullptr, o.bytes_ = 0; }
  Buffer& operator=(Buffer&& o) noexcept {
    std::swap(p_, o.p_), std::swap(bytes_, o.bytes_);
    return *this;
  }
  template <typename T = void>
  T* get() const { return static_cast<T*>(p_); }
  size_t bytes() const { return bytes_; }

 private:
  void* p_ = nullptr;
  size_t bytes_ = 0;
};

std::vector<uint16_t> to_half_bits(const std::vector<float>& v, DType t) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i)
    out[i] = float_to_half_bits(t, v[i]);
  return out;
}

Buffer upload(const std::vector<float>& v, DType t) {
  Buffer b(v.size() * static_cast<size_t>(dtype_bytes(t)));
  if (v.empty()) return b;
  if (t == DType::fp32) {
    CELTUNE_CUDA(cudaMemcpy(b.get(), v.data(), b.bytes(), cudaMemcpyHostToDevice));
  } else {
    const auto bits = to_half_bits(v, t);
    CELTUNE_CUDA(cudaMemcpy(b.get(), bits.data(), b.bytes(), cudaMemcpyHostToDevice));
  }
  return b;
}

std::vector<float> download(const Buffer& b, size_t n, DType t) {
  std::vector<float> out(n);
  if (n == 0) return out;
  if (t == DType::fp32) {
    CELTUNE_CUDA(cudaMemcpy(out.data(), b.get(), n * 4, cudaMemcpyDeviceToHost));
    return out;
  }
  std::vector<uint16_t> bits(n);
  CELTUNE_CUDA(cudaMemcpy(bits.data(), b.get(), n * 2, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < n; ++i) out[i] = half_bits_to_float(t, bits[i]);
  return out;
}

__device__ __forceinline__ uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Normal-ish values (sum of four uniforms, variance-matched) from a counter hash:
// random, reproducible from the seed, and fast for gigabytes of inputs.
template <typename T>
__global__ void fill_random_kernel(T* out, int64_t n, uint64_t seed, float stddev) {
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const uint64_t h = mix(seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(i));
    float s = 0.0f;
    for (int k = 0; k < 4; ++k) s += static_cast<float>((h >> (16 * k)) & 0xffff) * (1.0f / 65536.0f);
    const float v = (s - 2.0f) * 1.7320508f * stddev;  // Var(sum of 4 U(0,1)) = 1/3
    if constexpr (sizeof(T) == 4) out[i] = v;
    else out[i] = T(v);
  }
}

__global__ void fill_targets_kernel(int64_t* out, int64_t n, int64_t vocab, uint64_t seed) {
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    out[i] = static_cast<int64_t>(mix(seed ^ (0xA5A5ull + static_cast<uint64_t>(i))) % static_cast<uint64_t>(vocab));
}

void fill_random(void* p, int64_t n, DType t, uint64_t seed, float stddev) {
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((n + 255) / 256, 8192));
  if (n == 0) return;
  switch (t) {
    case DType::fp32: fill_random_kernel<<<blocks, 256>>>(static_cast<float*>(p), n, seed, stddev); break;
    case DType::bf16: fill_random_kernel<<<blocks, 256>>>(static_cast<__nv_bfloat16*>(p), n, seed, stddev); break;
    case DType::fp16: fill_random_kernel<<<blocks, 256>>>(static_cast<__half*>(p), n, seed, stddev); break;
  }
  CELTUNE_LAUNCHED();
}

std::string version_string(int v) { return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10); }

// Device-resident problem: inputs, outputs, and everything run_* needs.
struct DeviceProblem {
  Problem p;
  Buffer x, w, b, logits, targets, grad_scale, grad_tokens;
  Buffer loss, token_loss, lse, dx, dw, db, dz, bad;

  explicit DeviceProblem(const Problem& pr) : p(pr) {
    const auto N = static_cast<size_t>(p.tokens), H = static_cast<size_t>(p.hidden), V = static_cast<size_t>(p.vocab);
    const size_t e = static_cast<size_t>(dtype_bytes(p.dtype));
    const bool bwd = p.mode == Mode::forward_backward, flce = p.family == Family::flce;
    loss = Buffer(4), token_loss = Buffer(4 * N), lse = Buffer(4 * N), bad = Buffer(8);
    // The upstream gradient exists only for backward, as the C API documents: a
    // forward run gets null pointers here, so every forward case checks that no
    // kernel reads them (a forward-only call from PyTorch once faulted on that).
    if (bwd && p.loss.reduction != Reduction::none) grad_scale = Buffer(4);
    if (bwd && p.loss.reduction == Reduction::none) grad_tokens = Buffer(4 * N);
    if (flce && bwd) dx = Buffer(N * H * e), dw = Buffer(V * H * e);
    if (flce && bwd && p.bias) db = Buffer(V * e);
    if (!flce && bwd) dz = Buffer(N * V * e);
  }
  Args args() const {
    Args a;
    a.x = x.get(), a.w = w.get(), a.b = b.get(), a.logits = logits.get(), a.targets = targets.get();
    a.grad_scale = grad_scale.get<float>(), a.grad_tokens = grad_tokens.get<float>();
    a.loss = loss.get<float>(), a.token_loss = token_loss.get<float>(), a.lse = lse.get<float>();
    a.dx = dx.get(), a.dw = dw.get(), a.db = db.get(), a.dz = dz.get(), a.bad_target = bad.get<int64_t>();
    return a;
  }
  void poison_outputs(cudaStream_t st) const {
    for (const Buffer* o : {&loss, &token_loss, &lse, &dx, &dw, &db, &dz}) fill_nan(o->get(), static_cast<int64_t>(o->bytes()), st);
  }
};

void run(Context& ctx, const DeviceProblem& d, const KernelConfig& c, cudaStream_t st) {
  if (d.p.family == Family::flce)
    run_flce(ctx, d.p, c, d.args(), st);
  else
    run_ce(ctx, d.p, c, d.args(), st);
}

// Milliseconds between CUDA events recorded around work on the default stream.
class EventTimer {
 public:
  EventTimer() {
    CELTUNE_CUDA(cudaEventCreate(&start_));
    CELTUNE_CUDA(cudaEventCreate(&stop_));
  }
  ~EventTimer() {
    cudaEventDestroy(start_);
    cudaEventDestroy(stop_);
  }
  EventTimer(const EventTimer&) = delete;
  EventTimer& operator=(const EventTimer&) = delete;
  template <typename F>
  double operator()(F&& work) {
    CELTUNE_CUDA(cudaEventRecord(start_, nullptr));
    work();
    CELTUNE_CUDA(cudaEventRecord(stop_, nullptr));
    CELTUNE_CUDA(cudaEventSynchronize(stop_));
    float ms = 0;
    CELTUNE_CUDA(cudaEventElapsedTime(&ms, start_, stop_));
    return ms;
  }

 private:
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
};

// A workload timed with CUDA events, whose cache flush writes twice the L2
// between runs (METHOD.md), so a run never finds its inputs there. Buffers are
// allocated on the caller's current device: the backend makes ctx's device
// current before constructing a workload.
class EventTimedWorkload : public Workload {
 public:
  EventTimedWorkload(Context& ctx, size_t l2_bytes) : ctx_(ctx), flush_(2 * l2_bytes) {}
  void flush_caches() override {
    DeviceScope on(ctx_.device());
    CELTUNE_CUDA(cudaMemsetAsync(flush_.get(), static_cast<int>(++flushes_ & 0xff), flush_.bytes(), nullptr));
  }

 protected:
  template <typename F>
  double timed(F&& work) {
    DeviceScope on(ctx_.device());
    return timer_(work);
  }
  Context& ctx_;

 private:
  Buffer flush_;
  EventTimer timer_;
  unsigned flushes_ = 0;
};

class CudaWorkload : public EventTimedWorkload {
 public:
  CudaWorkload(Context& ctx, const Problem& p, uint64_t seed, size_t l2_bytes)
      : EventTimedWorkload(ctx, l2_bytes), d_(p) {
    const auto N = p.tokens, H = p.hidden, V = p.vocab;
    if (p.family == Family::flce) {
      d_.x = Buffer(static_cast<size_t>(N * H * dtype_bytes(p.dtype)));
      d_.w = Buffer(static_cast<size_t>(V * H * dtype_bytes(p.dtype)));
      fill_random(d_.x.get(), N * H, p.dtype, seed, 1.0f);
      fill_random(d_.w.get(), V * H, p.dtype, seed + 1, 4.0f / std::sqrt(static_cast<float>(H)));
      if (p.bias) d_.b = Buffer(static_cast<size_t>(V * dtype_bytes(p.dtype))), fill_random(d_.b.get(), V, p.dtype, seed + 2, 0.5f);
    } else {
      d_.logits = Buffer(static_cast<size_t>(N * V * dtype_bytes(p.dtype)));
      fill_random(d_.logits.get(), N * V, p.dtype, seed, 4.0f);
    }
    // Random int64 targets in [0, V); int32 problems narrow them on the device.
    Buffer t64(static_cast<size_t>(N) * 8);
    fill_targets_kernel<<<256, 256>>>(t64.get<int64_t>(), N, V, seed + 3);
    CELTUNE_LAUNCHED();
    if (p.target_type == TargetType::i64) {
      d_.targets = std::move(t64);
    } else {
      std::vector<int64_t> h(static_cast<size_t>(N));
      CELTUNE_CUDA(cudaMemcpy(h.data(), t64.get(), h.size() * 8, cudaMemcpyDeviceToHost));
      std::vector<int32_t> h32(h.begin(), h.end());
      d_.targets = Buffer(h32.size() * 4);
      CELTUNE_CUDA(cudaMemcpy(d_.targets.get(), h32.data(), h32.size() * 4, cudaMemcpyHostToDevice));
    }
    const float g = 1.0f;
    if (d_.grad_scale.bytes()) CELTUNE_CUDA(cudaMemcpy(d_.grad_scale.get(), &g, 4, cudaMemcpyHostToDevice));
    if (d_.grad_tokens.bytes()) fill_random(d_.grad_tokens.get(), N, DType::fp32, seed + 4, 1.0f);
    CELTUNE_CUDA(cudaDeviceSynchronize());
  }
  double run_timed(const KernelConfig& c) override {
    return timed([&] { run(ctx_, d_, c, nullptr); });
  }

 private:
  DeviceProblem d_;
};

// The three full-size GEMMs of flce-math.md (the logits, dX, dW; forward: the
// logits alone), one after another on random inputs, outputs in the input dtype:
// the floor no fused schedule can beat. At V padded to a multiple of 128
// (Floors::gemm_vocab says why); the padding costs at most 127/V of the work,
// under 0.4% from V = 32000 up. The GEMMs get the default config's workspace:
// what they pay, not less.
class FloorWorkload : public EventTimedWorkload {
 public:
  FloorWorkload(Context& ctx, const Problem& p, size_t l2_bytes)
      : EventTimedWorkload(ctx, l2_bytes), bwd_(p.mode == Mode::forward_backward) {
    const int64_t N = p.tokens, H = p.hidden, V = padded_vocab(p);
    const size_t e = static_cast<size_t>(dtype_bytes(p.dtype));
    const cudaDataType_t ty = p.dtype == DType::bf16 ? CUDA_R_16BF : p.dtype == DType::fp16 ? CUDA_R_16F : CUDA_R_32F;
    x_ = Buffer(checked_bytes(N, H, e)), w_ = Buffer(checked_bytes(V, H, e)), z_ = Buffer(checked_bytes(N, V, e));
    fill_random(x_.get(), N * H, p.dtype, 1, 1.0f);
    fill_random(w_.get(), V * H, p.dtype, 2, 0.05f);
    fill_random(z_.get(), N * V, p.dtype, 3, 1e-3f);
    if (bwd_) dx_ = Buffer(checked_bytes(N, H, e)), dw_ = Buffer(checked_bytes(V, H, e));
    const size_t ws_bytes = size_t{KernelConfig::kDefaultWorkspaceMib} << 20;
    ws_ = Buffer(ws_bytes);
    CELTUNE_CUDA(cudaMemset(ws_.get(), 0, ws_bytes));
    logits_ = GemmShape{ty, ty, true, false, V, N, H, H, H, V};
    dx_shape_ = GemmShape{ty, ty, false, false, H, N, V, H, V, H};
    dw_shape_ = GemmShape{ty, ty, false, true, H, V, N, H, V, H};
    CELTUNE_CUDA(cudaDeviceSynchronize());
  }
  static int64_t padded_vocab(const Problem& p) { return (p.vocab + 127) / 128 * 128; }
  double run_timed(const KernelConfig&) override {
    const Workspace ws{ws_.get(), ws_.bytes()};
    return timed([&] {
      ctx_.gemm(logits_, w_.get(), x_.get(), z_.get(), 0.0f, nullptr, ws);
      if (!bwd_) return;
      ctx_.gemm(dx_shape_, w_.get(), z_.get(), dx_.get(), 0.0f, nullptr, ws);
      ctx_.gemm(dw_shape_, x_.get(), z_.get(), dw_.get(), 0.0f, nullptr, ws);
    });
  }

 private:
  static size_t checked_bytes(int64_t rows, int64_t cols, size_t elem) {
    int64_t n = 0;
    if (__builtin_mul_overflow(rows, cols, &n) || __builtin_mul_overflow(n, static_cast<int64_t>(elem), &n))
      fail_usage("the floor GEMMs' buffers overflow a 64-bit size");
    return static_cast<size_t>(n);
  }
  bool bwd_;
  Buffer x_, w_, z_, dx_, dw_, ws_;
  GemmShape logits_{}, dx_shape_{}, dw_shape_{};
};

// `before` runs ahead of each timed run, outside the events (a cache flush).
template <typename F, typename B = void (*)()>
double median_ms(F&& f, int runs, B&& before = [] {}) {
  EventTimer timer;
  std::vector<double> t;
  for (int i = 0; i < runs + 3; ++i) {  // three warm-ups
    before();
    const double ms = timer(f);
    if (i >= 3) t.push_back(ms);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// NVML, loaded at run time so the build needs no NVML headers or library; it
// comes with the driver. Read-only use: the clock is recorded, never set.
class Nvml {
 public:
  Nvml() {
    lib_ = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib_) return;
    init_ = reinterpret_cast<int (*)()>(dlsym(lib_, "nvmlInit_v2"));
    by_pci_ = reinterpret_cast<int (*)(const char*, void**)>(dlsym(lib_, "nvmlDeviceGetHandleByPciBusId_v2"));
    clock_ = reinterpret_cast<int (*)(void*, int, unsigned*)>(dlsym(lib_, "nvmlDeviceGetClockInfo"));
    ok_ = init_ && by_pci_ && clock_ && init_() == 0;
  }
  double sm_clock(int ordinal) {
    if (!ok_) return 0;
    char bus[32] = {};
    if (cudaDeviceGetPCIBusId(bus, sizeof bus, ordinal) != cudaSuccess) return 0;
    void* dev = nullptr;
    unsigned mhz = 0;
    if (by_pci_(bus, &dev) != 0 || clock_(dev, /*NVML_CLOCK_SM*/ 1, &mhz) != 0) return 0;
    return mhz;
  }

 private:
  void* lib_ = nullptr;
  int (*init_)() = nullptr;
  int (*by_pci_)(const char*, void**) = nullptr;
  int (*clock_)(void*, int, unsigned*) = nullptr;
  bool ok_ = false;
};

class CudaBackend : public Backend {
 public:
  explicit CudaBackend(int ordinal) : info_(device_info(ordinal)), ctx_(ordinal), ordinal_(ordinal) {
    CELTUNE_CUDA(cudaDeviceGetAttribute(&l2_bytes_, cudaDevAttrL2CacheSize, ordinal));
  }
  const DeviceInfo& device() const override { return info_; }
  double sm_clock_mhz() override {
    static Nvml nvml;
    return nvml.sm_clock(ordinal_);
  }
  void check(const Problem& p, const KernelConfig& c) const override { check_supported(p, c, ordinal_); }
  std::vector<std::vector<std::string>> gemm_candidates(const Problem& p, const KernelConfig& c, int k) override {
    check_supported(p, c, ordinal_);
    DeviceScope on(ordinal_);
    return cuda::gemm_candidates(ctx_, p, c, k);
  }
  size_t scratch_bytes(const Problem& p, const KernelConfig& c) const override { return cuda::scratch_bytes(p, c); }

  HostOutputs run(const Problem& p, const KernelConfig& c, const HostCase& in) override {
    check_supported(p, c, ordinal_);
    DeviceScope on(ordinal_);
    DeviceProblem d(p);
    if (p.family == Family::flce) {
      d.x = upload(in.x, p.dtype), d.w = upload(in.w, p.dtype);
      if (p.bias) d.b = upload(in.b, p.dtype);
    } else {
      d.logits = upload(in.logits, p.dtype);
    }
    if (p.target_type == TargetType::i64) {
      d.targets = Buffer(in.targets.size() * 8);
      CELTUNE_CUDA(cudaMemcpy(d.targets.get(), in.targets.data(), d.targets.bytes(), cudaMemcpyHostToDevice));
    } else {
      std::vector<int32_t> t32(in.targets.begin(), in.targets.end());
      d.targets = Buffer(t32.size() * 4);
      CELTUNE_CUDA(cudaMemcpy(d.targets.get(), t32.data(), d.targets.bytes(), cudaMemcpyHostToDevice));
    }
    if (d.grad_scale.bytes()) CELTUNE_CUDA(cudaMemcpy(d.grad_scale.get(), &in.grad_scale, 4, cudaMemcpyHostToDevice));
    if (d.grad_tokens.bytes() && !in.grad_tokens.empty())
      CELTUNE_CUDA(cudaMemcpy(d.grad_tokens.get(), in.grad_tokens.data(), d.grad_tokens.bytes(), cudaMemcpyHostToDevice));
    d.poison_outputs(nullptr);
    cuda::run(ctx_, d, c, nullptr);
    CELTUNE_CUDA(cudaDeviceSynchronize());
    int64_t bad = -1;
    CELTUNE_CUDA(cudaMemcpy(&bad, d.bad.get(), 8, cudaMemcpyDeviceToHost));
    if (bad >= 0)
      fail_usage("target " + std::to_string(in.targets[static_cast<size_t>(bad)]) + " at token " + std::to_string(bad) +
                 " is outside [0, V) and is not ignore_index");
    HostOutputs out;
    const auto N = static_cast<size_t>(p.tokens), H = static_cast<size_t>(p.hidden), V = static_cast<size_t>(p.vocab);
    out.loss = download(d.loss, 1, DType::fp32)[0];
    out.token_loss = download(d.token_loss, N, DType::fp32);
    out.lse = download(d.lse, N, DType::fp32);
    if (p.mode == Mode::forward_backward) {
      if (p.family == Family::flce) {
        out.dx = download(d.dx, N * H, p.dtype);
        out.dw = download(d.dw, V * H, p.dtype);
        if (p.bias) out.db = download(d.db, V, p.dtype);
      } else {
        out.grad_logits = download(d.dz, N * V, p.dtype);
      }
    }
    return out;
  }

  std::unique_ptr<Workload> prepare(const Problem& p, uint64_t seed) override {
    p.validate();
    DeviceScope on(ordinal_);
    return std::make_unique<CudaWorkload>(ctx_, p, seed, static_cast<size_t>(l2_bytes_));
  }

  Floors measure_floors(const Problem& p) override {
    DeviceScope on(ordinal_);
    Floors f;
    f.available = true;
    const size_t e = static_cast<size_t>(dtype_bytes(p.dtype));
    {  // copy bandwidth: 2 GiB device-to-device, bytes read + written
      const size_t bytes = size_t{1} << 30;
      Buffer a(bytes), b(bytes);
      CELTUNE_CUDA(cudaMemset(a.get(), 1, bytes));
      const double ms = median_ms([&] { CELTUNE_CUDA(cudaMemcpyAsync(b.get(), a.get(), bytes, cudaMemcpyDeviceToDevice)); }, 20);
      f.copy_gb_per_s = 2.0 * static_cast<double>(bytes) / (ms * 1e-3) / 1e9;
    }
    // ce's bytes in one copy: forward moves N·V elements (half read, half
    // written), forward+backward 2·N·V; each copy reads and writes half of it.
    // Timed as the ce rows are, after a flush of L2: the copies up to a few MB
    // otherwise read their source from L2 where the ce kernel reads device
    // memory, and their launch waited on the host, which the ce rows' flush
    // hides (H100 and H200, scripts/probe/fewrows.cu: an empty kernel 2.8–3.2 µs
    // after a flush, 6.2–6.8 µs without; a copy of 128 KB 3.8–4.0 µs cold,
    // 6.9–7.0 hot).
    Buffer flush(2 * static_cast<size_t>(l2_bytes_));
    unsigned flushes = 0;
    auto flush_l2 = [&] { CELTUNE_CUDA(cudaMemsetAsync(flush.get(), static_cast<int>(++flushes & 0xff), flush.bytes())); };
    for (int bwd = 0; bwd < 2; ++bwd) {
      int64_t moved = 0;
      if (__builtin_mul_overflow(p.tokens, p.vocab * static_cast<int64_t>(e) * (bwd + 1), &moved)) continue;
      const auto half = static_cast<size_t>(moved / 2);
      if (half == 0 || half > (size_t{1} << 30)) continue;
      Buffer a(half), b(half);
      CELTUNE_CUDA(cudaMemset(a.get(), 1, half));
      f.ce_copy_ms[bwd] =
          median_ms([&] { CELTUNE_CUDA(cudaMemcpyAsync(b.get(), a.get(), half, cudaMemcpyDeviceToDevice)); }, 20, flush_l2);
    }
    if (p.family != Family::flce) return f;
    f.gemm_vocab = FloorWorkload::padded_vocab(p);
    f.gemms = p.mode == Mode::forward_backward ? 3 : 1;
    return f;
  }

  std::unique_ptr<Workload> prepare_floor(const Problem& p) override {
    if (p.family != Family::flce) return nullptr;
    p.validate();
    DeviceScope on(ordinal_);
    return std::make_unique<FloorWorkload>(ctx_, p, static_cast<size_t>(l2_bytes_));
  }

 private:
  DeviceInfo info_;
  Context ctx_;
  int ordinal_;
  int l2_bytes_ = 0;
};

}  // namespace

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver"/"no device" error
    return 0;
  }
  return n;
}

DeviceInfo device_info(int ordinal) {
  cudaDeviceProp prop{};
  CELTUNE_CUDA(cudaGetDeviceProperties(&prop, ordinal));
  int driver = 0, runtime = 0;
  CELTUNE_CUDA(cudaDriverGetVersion(&driver));
  CELTUNE_CUDA(cudaRuntimeGetVersion(&runtime));
  const size_t lt = cublasLtGetVersion();
  DeviceInfo d;
  d.id = "cuda:" + std::to_string(ordinal);
  d.name = prop.name;
  d.arch = "sm_" + std::to_string(prop.major) + std::to_string(prop.minor);
  d.sm_count = prop.multiProcessorCount;
  d.memory_bytes = static_cast<int64_t>(prop.totalGlobalMem);
  d.driver = version_string(driver);
  d.runtime = version_string(runtime);
  d.cublaslt = std::to_string(lt / 10000) + "." + std::to_string((lt / 100) % 100) + "." + std::to_string(lt % 100);
  d.cublaslt_version = static_cast<int64_t>(lt);
  return d;
}

std::unique_ptr<Backend> make_backend(int ordinal) { return std::make_unique<CudaBackend>(ordinal); }

}  // namespace celtune::cuda
