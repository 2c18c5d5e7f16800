// CPU backend for both kernel families.
//
// What it computes: flce-math.md, in fp32 with fp32 accumulation, with the
// GPU's rounding points: the logits tile is rounded to the input dtype (as the
// cuBLASLt GEMM writes it), dZ is rounded to the input dtype before the gradient
// GEMMs, and gradient accumulation across chunks happens in fp32 or in the output
// dtype as the config says.
//
// How (the same schedule as kernels/flce):
//   for each row chunk R (at most row_chunk rows, as even as 128-row tiles allow):
//     pass 1, for each vocabulary chunk C (v_chunk columns):
//       tile = X[R]·W[C]ᵀ + b[C]           (ce: tile = Z[R, C])
//       fold the tile into a fresh (max, sum-exp) partial, BLOCK_SIZE columns at a
//       time, and merge it into the row's running pair with the ⊕ rule
//       one pass (C covers V): the LSE is final here, so dZ overwrites the tile and
//       dX[R] = dZ·W, dW += dZᵀ·X[R], db += Σ_rows dZ
//     pass 2 (C narrower than V): recompute each tile and do the same with the
//       final LSE, accumulating dX[R] across chunks.
// Rows go to threads inside a chunk (OpenMP); dW and db columns go to threads by
// vocabulary index, so every output element has one writer and a fixed order:
// results are deterministic.
#include "cpu_backend.hpp"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <limits>
#include <thread>

#include "model/error.hpp"
#include "model/numerics.hpp"

namespace celtune::cpu {
namespace {

// Running online-softmax state of one row, plus the two sums the loss needs.
struct RowState {
  float m = -std::numeric_limits<float>::infinity();  // running max of ẑ
  // Σ exp(ẑ − m), summed in double: in fp32, once the max's term (1) was in
  // the sum every later term under half an ulp of 1 was lost, so a confident
  // row whose target came early lost its whole loss and its target's gradient
  // (V = 1024, the others 16.7 below the target: a loss of 0 against 5.7e-5, a
  // helper's probe, sixty-third session); PyTorch's vectorised fp32 sum
  // keeps far more of them.
  double d = 0.0;
  float z_target = 0.0f;                               // ẑ at the target
  double z_sum = 0.0;  // Σ ẑ (label smoothing); fp32 overflowed beside logits near 3e38
};

// (m1,d1) ⊕ (m2,d2), flce-math.md step 3. Guarded so that two empty partials
// (m = −inf) merge to an empty partial instead of NaN.
inline void merge(float& m, double& d, float m2, double d2) {
  const float M = std::max(m, m2);
  if (M == -std::numeric_limits<float>::infinity()) return;
  d = d * std::exp(static_cast<double>(m) - M) + d2 * std::exp(static_cast<double>(m2) - M);
  m = M;
}

inline float softcap(float z, float s) { return s > 0.0f ? s * std::tanh(z / s) : z; }
// The softcap's chain factor 1 − tanh²(z/s) (1 without one), from the raw logit z
// as 4e/(1 + e)², e = exp(−2|z/s|): 1 − (ẑ/s)² cancels where the softcap
// saturates (the CUDA kernels' softcap_dtanh_quarter).
inline float softcap_slope(float z, float s) {
  if (s <= 0.0f) return 1.0f;
  const float e = std::exp(-2.0f * std::fabs(z / s)), r = 1.0f / (1.0f + e);
  return 4.0f * e * r * r;
}

class Runner {
 public:
  Runner(const Problem& p, const KernelConfig& c, const HostCase& in) : p_(p), c_(c), in_(in) {
    N_ = p.tokens, H_ = p.hidden, V_ = p.vocab;
    rc_ = c.row_chunk_for(p), vc_ = c.v_chunk_for(p);
    s_ = static_cast<float>(p.loss.softcap);
    eps_ = static_cast<float>(p.loss.label_smoothing);
    lam_ = static_cast<float>(p.loss.z_loss);
    bwd_ = p.mode == Mode::forward_backward;
  }

  HostOutputs operator()() {
    check_targets();
    HostOutputs out;
    out.token_loss.assign(static_cast<size_t>(N_), 0.0f);
    out.lse.assign(static_cast<size_t>(N_), 0.0f);
    const bool flce = p_.family == Family::flce;
    if (bwd_) {
      if (flce) {
        out.dx.assign(static_cast<size_t>(N_ * H_), 0.0f);
        dw_acc_.assign(static_cast<size_t>(V_ * H_), 0.0f);
        if (p_.bias) db_acc_.assign(static_cast<size_t>(V_), 0.0f);
      } else {
        out.grad_logits.assign(static_cast<size_t>(N_ * V_), 0.0f);
      }
    }
    tile_.resize(static_cast<size_t>(rc_ * vc_));
    // The CUDA backend's cuBLASLt path: row chunks in whole 128-row tiles.
    const std::vector<int64_t> chunks = c_.row_chunk_rows(p_, flce ? 128 : 0);
    // dW needs an fp32 accumulator unless there is a single row chunk (then each
    // element is written once) or the config asks for output-dtype accumulation.
    dw_in_out_dtype_ = !c_.dw_acc_fp32 && chunks.size() > 1;
    int64_t r0 = 0;
    for (const int64_t rows : chunks) row_chunk(r0, rows, out), r0 += rows;

    if (bwd_ && flce) {
      out.dw.resize(dw_acc_.size());
      for (size_t k = 0; k < dw_acc_.size(); ++k) out.dw[k] = round_to(p_.dtype, dw_acc_[k]);
      if (p_.bias) {
        out.db.resize(db_acc_.size());
        for (size_t k = 0; k < db_acc_.size(); ++k) out.db[k] = round_to(p_.dtype, db_acc_[k]);
      }
    }
    double total = 0.0;
    for (float l : out.token_loss) total += l;
    out.loss = static_cast<float>(p_.loss.reduction == Reduction::mean
                                      ? (in_.n_valid ? total / static_cast<double>(in_.n_valid) : 0.0)
                                      : total);
    return out;
  }

 private:
  void check_targets() const {
    for (int64_t i = 0; i < N_; ++i) {
      const int64_t t = in_.targets[static_cast<size_t>(i)];
      if (t != p_.loss.ignore_index && (t < 0 || t >= V_))
        fail_usage("target " + std::to_string(t) + " at token " + std::to_string(i) +
                   " is outside [0, V) and is not ignore_index");
    }
  }

  // tile[r, j] = logits of row r0+r, column v0+j, rounded as the GEMM rounds.
  void fill_tile(int64_t r0, int64_t rows, int64_t v0, int64_t cols) {
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      float* t = &tile_[static_cast<size_t>(r * vc_)];
      if (p_.family == Family::ce) {
        const float* z = &in_.logits[static_cast<size_t>((r0 + r) * V_ + v0)];
        std::copy(z, z + cols, t);
        continue;
      }
      const float* x = &in_.x[static_cast<size_t>((r0 + r) * H_)];
      for (int64_t j = 0; j < cols; ++j) {
        const float* w = &in_.w[static_cast<size_t>((v0 + j) * H_)];
        float acc = 0.0f;
        for (int64_t k = 0; k < H_; ++k) acc += x[k] * w[k];
        // The GEMM rounds the product to the dtype; the CE kernel adds the bias in
        // fp32 as it reads the tile (one rounding per logit, as on the GPU).
        t[j] = round_to(p_.dtype, acc);
        if (p_.bias) t[j] += in_.b[static_cast<size_t>(v0 + j)];
      }
    }
  }

  // Folds columns [0, cols) of each tile row into its RowState, BLOCK_SIZE at a time.
  void fold_tile(int64_t r0, int64_t rows, int64_t v0, int64_t cols) {
    const int64_t bs = c_.block_size;
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const float* t = &tile_[static_cast<size_t>(r * vc_)];
      RowState& st = state_[static_cast<size_t>(r)];
      const int64_t y = in_.targets[static_cast<size_t>(r0 + r)];
      float pm = -std::numeric_limits<float>::infinity();  // this chunk's partial
      double pd = 0.0;
      for (int64_t b0 = 0; b0 < cols; b0 += bs) {
        const int64_t b1 = std::min(cols, b0 + bs);
        float bm = -std::numeric_limits<float>::infinity();
        bool nan = false;
        for (int64_t j = b0; j < b1; ++j) {
          const float z = softcap(t[j], s_);
          nan |= std::isnan(z);
          bm = std::max(bm, z);
        }
        if (nan) bm = std::numeric_limits<float>::quiet_NaN();  // propagate, as PyTorch does
        double bd = 0.0;
        for (int64_t j = b0; j < b1; ++j) {
          const float z = softcap(t[j], s_);
          bd += std::exp(z - bm);
          st.z_sum += z;
        }
        if (std::isnan(bm)) {
          pm = bm, pd = bm;
        } else {
          merge(pm, pd, bm, bd);
        }
      }
      if (std::isnan(pm))
        st.m = pm, st.d = pm;
      else
        merge(st.m, st.d, pm, pd);
      if (y >= v0 && y < v0 + cols) st.z_target = softcap(t[y - v0], s_);
    }
  }

  void finish_rows(int64_t r0, int64_t rows, HostOutputs& out) {
    for (int64_t r = 0; r < rows; ++r) {
      const RowState& st = state_[static_cast<size_t>(r)];
      const float log_d = static_cast<float>(std::log(st.d));
      const float L = st.m + log_d;
      lse_[static_cast<size_t>(r)] = L;
      out.lse[static_cast<size_t>(r0 + r)] = L;
      const int64_t y = in_.targets[static_cast<size_t>(r0 + r)];
      float loss = 0.0f;
      if (y != p_.loss.ignore_index) {  // no smoothing: its term left out, not 0·(−inf) at a −inf logit
        // m and log d apart, as PyTorch's log_softmax keeps them: L − ẑ_y
        // carried L's rounding, half an ulp of |L|, into every loss (5% of it
        // with logits near 1e7, all of it near 3e38: a helper's probe,
        // sixty-second session).
        const float smooth =
            eps_ > 0 ? eps_ * (static_cast<float>(st.m - st.z_sum / static_cast<double>(V_)) + log_d) : 0.0f;
        loss = (1 - eps_) * ((st.m - st.z_target) + log_d) + smooth + lam_ * L * L;
      }
      out.token_loss[static_cast<size_t>(r0 + r)] = loss;
      scale_[static_cast<size_t>(r)] = static_cast<float>(token_grad_scale(p_, in_, r0 + r));
    }
  }

  // Overwrites the tile with dZ (rounded to the dtype). The target term is formed
  // in fp32 before rounding: rounding p first would lose confident tokens' gradient.
  // p = exp(ẑ − m) / d, not exp(ẑ − L): L's rounding moved every p by up to
  // half an ulp of |L| relatively. The z-loss term 2λL·p joins after p − (1 − ε):
  // (1 + 2λL)·p rounded 2λL to an ulp of 1 first (5% of the gradient at V = 1,
  // λ = 1e-6), the helper's probe above.
  void tile_to_dz(int64_t r0, int64_t rows, int64_t v0, int64_t cols) {
    const float inv_v = 1.0f / static_cast<float>(V_);
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      float* t = &tile_[static_cast<size_t>(r * vc_)];
      const float c = scale_[static_cast<size_t>(r)];
      if (c == 0.0f) {
        std::fill(t, t + cols, 0.0f);
        continue;
      }
      const RowState& st = state_[static_cast<size_t>(r)];
      const float z_scale = 2 * lam_ * lse_[static_cast<size_t>(r)];
      const int64_t y = in_.targets[static_cast<size_t>(r0 + r)];
      for (int64_t j = 0; j < cols; ++j) {
        const float z = softcap(t[j], s_);
        const float prob = static_cast<float>(std::exp(z - st.m) / st.d);
        // The target's p − (1 − ε) in double from d itself: p rounded to fp32
        // first kept a confident row's 1 − p to an ulp of 1 (2.6e-4 of it where
        // 1 − p = 5.7e-5).
        float g = v0 + j == y ? static_cast<float>((std::exp(static_cast<double>(z) - st.m) - (1 - eps_) * st.d) / st.d)
                              : prob;
        g = g - eps_ * inv_v + z_scale * prob;
        t[j] = round_to(p_.dtype, c * g * softcap_slope(t[j], s_));
      }
    }
  }

  // Consumes a dZ tile: dX, dW, db (flce) or the dZ output (ce).
  void apply_dz(int64_t r0, int64_t rows, int64_t v0, int64_t cols, bool last_v_chunk, HostOutputs& out) {
    if (p_.family == Family::ce) {
      for (int64_t r = 0; r < rows; ++r)
        std::copy(&tile_[static_cast<size_t>(r * vc_)], &tile_[static_cast<size_t>(r * vc_ + cols)],
                  &out.grad_logits[static_cast<size_t>((r0 + r) * V_ + v0)]);
      return;
    }
    const bool single_v = vc_ >= V_;
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {  // dX[R] (+)= dZ · W[C]
      const float* t = &tile_[static_cast<size_t>(r * vc_)];
      float* acc = dx_acc_.empty() ? nullptr : &dx_acc_[static_cast<size_t>(r * H_)];
      std::vector<float> part(static_cast<size_t>(H_), 0.0f);
      for (int64_t j = 0; j < cols; ++j) {
        if (t[j] == 0.0f) continue;
        const float* w = &in_.w[static_cast<size_t>((v0 + j) * H_)];
        for (int64_t k = 0; k < H_; ++k) part[static_cast<size_t>(k)] += t[j] * w[k];
      }
      float* dx = &out.dx[static_cast<size_t>((r0 + r) * H_)];
      for (int64_t k = 0; k < H_; ++k) {
        if (single_v) {
          dx[k] = round_to(p_.dtype, part[static_cast<size_t>(k)]);
        } else if (c_.dx_acc_fp32) {
          acc[k] += part[static_cast<size_t>(k)];
          if (last_v_chunk) dx[k] = round_to(p_.dtype, acc[k]);
        } else {  // output-dtype accumulation: D = round(C + A·B), as cuBLASLt with beta = 1
          dx[k] = round_to(p_.dtype, dx[k] + part[static_cast<size_t>(k)]);
        }
      }
    }
#pragma omp parallel for schedule(static)
    for (int64_t j = 0; j < cols; ++j) {  // dW[C] += dZᵀ · X[R];  db[C] += Σ_rows dZ
      float* dw = &dw_acc_[static_cast<size_t>((v0 + j) * H_)];
      std::vector<float> part(static_cast<size_t>(H_), 0.0f);
      float db = 0.0f;
      for (int64_t r = 0; r < rows; ++r) {
        const float g = tile_[static_cast<size_t>(r * vc_ + j)];
        db += g;
        if (g == 0.0f) continue;
        const float* x = &in_.x[static_cast<size_t>((r0 + r) * H_)];
        for (int64_t k = 0; k < H_; ++k) part[static_cast<size_t>(k)] += g * x[k];
      }
      for (int64_t k = 0; k < H_; ++k)
        dw[k] = dw_in_out_dtype_ ? round_to(p_.dtype, dw[k] + part[static_cast<size_t>(k)])
                                 : dw[k] + part[static_cast<size_t>(k)];
      if (p_.bias) db_acc_[static_cast<size_t>(v0 + j)] += db;
    }
  }

  void row_chunk(int64_t r0, int64_t rows, HostOutputs& out) {
    state_.assign(static_cast<size_t>(rows), RowState{});
    lse_.assign(static_cast<size_t>(rows), 0.0f);
    scale_.assign(static_cast<size_t>(rows), 0.0f);
    if (bwd_ && p_.family == Family::flce && vc_ < V_) dx_acc_.assign(static_cast<size_t>(rows * H_), 0.0f);
    const bool one_pass = vc_ >= V_;
    for (int64_t v0 = 0; v0 < V_; v0 += vc_) {  // pass 1
      const int64_t cols = std::min(vc_, V_ - v0);
      fill_tile(r0, rows, v0, cols);
      fold_tile(r0, rows, v0, cols);
      if (one_pass) {
        finish_rows(r0, rows, out);
        if (bwd_) {
          tile_to_dz(r0, rows, v0, cols);
          apply_dz(r0, rows, v0, cols, true, out);
        }
      }
    }
    if (one_pass) return;
    finish_rows(r0, rows, out);
    if (!bwd_) return;
    for (int64_t v0 = 0; v0 < V_; v0 += vc_) {  // pass 2: recompute each tile
      const int64_t cols = std::min(vc_, V_ - v0);
      fill_tile(r0, rows, v0, cols);
      tile_to_dz(r0, rows, v0, cols);
      apply_dz(r0, rows, v0, cols, v0 + vc_ >= V_, out);
    }
  }

  const Problem& p_;
  const KernelConfig& c_;
  const HostCase& in_;
  int64_t N_, H_, V_, rc_, vc_;
  float s_, eps_, lam_;
  bool bwd_;
  bool dw_in_out_dtype_ = false;
  std::vector<float> tile_, lse_, scale_, dx_acc_, dw_acc_, db_acc_;
  std::vector<RowState> state_;
};

std::string cpu_model_name() {
  std::ifstream f("/proc/cpuinfo");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("model name", 0) == 0) {
      auto pos = line.find(':');
      if (pos != std::string::npos) return line.substr(line.find_first_not_of(' ', pos + 1));
    }
  return "unknown";
}

int64_t host_memory_bytes() {
  std::ifstream f("/proc/meminfo");
  std::string key;
  int64_t kb = 0;
  while (f >> key >> kb)
    if (key == "MemTotal:") return kb * 1024;
  return 0;
}

class CpuWorkload : public Workload {
 public:
  CpuWorkload(const Problem& p, uint64_t seed) : p_(p), in_(make_case(p, CaseSpec{.seed = seed})) {}
  double run_timed(const KernelConfig& c) override {
    const auto t0 = std::chrono::steady_clock::now();
    HostOutputs out = run(p_, c, in_);
    const auto t1 = std::chrono::steady_clock::now();
    sink_ += out.loss;  // keep the work observable
    return std::chrono::duration<double, std::milli>(t1 - t0).count();
  }

 private:
  Problem p_;
  HostCase in_;
  double sink_ = 0;
};

class CpuBackend : public Backend {
 public:
  CpuBackend() : info_(device_info()) {}
  const DeviceInfo& device() const override { return info_; }
  void check(const Problem& p, const KernelConfig& c) const override {
    p.validate();
    validate_config(p, c);
    // fused changes where the GPU keeps a row, not what is computed: accepted.
    if (c.impl == KernelConfig::Impl::fused)
      fail_usage("impl fused is the sm_90 GPU path (CUTLASS GEMMs with the statistics in their epilogue); the CPU "
                 "backend runs impl cublaslt's algorithm");
  }
  size_t scratch_bytes(const Problem& p, const KernelConfig& c) const override {
    // The fp32 tile, the row state, and the fp32 accumulators the config asks for.
    const auto rc = static_cast<size_t>(c.row_chunk_for(p)), vc = static_cast<size_t>(c.v_chunk_for(p));
    size_t bytes = rc * vc * 4 + rc * (sizeof(RowState) + 8);
    if (p.family == Family::flce && p.mode == Mode::forward_backward) {
      bytes += static_cast<size_t>(p.vocab * p.hidden) * 4;
      if (!c.one_pass(p)) bytes += rc * static_cast<size_t>(p.hidden) * 4;
    }
    return bytes;
  }
  HostOutputs run(const Problem& p, const KernelConfig& c, const HostCase& in) override {
    check(p, c);
    return cpu::run(p, c, in);
  }
  std::unique_ptr<Workload> prepare(const Problem& p, uint64_t seed) override {
    p.validate();
    return std::make_unique<CpuWorkload>(p, seed);
  }

 private:
  DeviceInfo info_;
};

}  // namespace

HostOutputs run(const Problem& p, const KernelConfig& c, const HostCase& in) {
  return Runner(p, c, in)();
}

DeviceInfo device_info() {
  DeviceInfo d;
  d.id = "cpu";
  d.name = "cpu: " + cpu_model_name();
  d.arch = "cpu";
  d.sm_count = omp_get_max_threads();
  d.memory_bytes = host_memory_bytes();
  return d;
}

std::unique_ptr<Backend> make_backend() { return std::make_unique<CpuBackend>(); }

}  // namespace celtune::cpu
