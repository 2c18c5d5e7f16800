#include "fp64.hpp"

#include <cmath>
#include <limits>
#include <vector>

#include "model/error.hpp"
#include "model/numerics.hpp"

namespace celtune::reference {
namespace {

double rnd(bool emulate, DType t, double v) {
  return emulate ? static_cast<double>(round_to(t, static_cast<float>(v))) : v;
}

// Steps 2–4 and the backward of flce-math.md for one row of logits z (already
// including the bias, before softcap). Writes dz (if non-null) and returns ℓ_i.
double ce_row(const Problem& p, const double* z, int64_t target, double scale, double lse_offset, double* lse_out,
              double* dz) {
  const int64_t V = p.vocab;
  const double s = p.loss.softcap, eps = p.loss.label_smoothing, lam = p.loss.z_loss;
  std::vector<double> zh(static_cast<size_t>(V));
  double m = -std::numeric_limits<double>::infinity(), zsum = 0.0;
  bool nan = false;
  for (int64_t j = 0; j < V; ++j) {
    const double v = s > 0 ? s * std::tanh(z[j] / s) : z[j];  // step 2
    zh[static_cast<size_t>(j)] = v;
    nan |= std::isnan(v);
    m = std::max(m, v);
    zsum += v;
  }
  double d = 0.0;
  for (int64_t j = 0; j < V; ++j) d += std::exp(zh[static_cast<size_t>(j)] - m);
  // Step 3, with L − m kept apart from m, as log_softmax keeps them: L rounded
  // to one double lost log d entirely beside logits near 3e38 (every loss and
  // gradient 0; a helper's probe, sixty-second session).
  const double ld = nan ? std::numeric_limits<double>::quiet_NaN() : std::log(d) + lse_offset;
  const double L = m + ld;
  *lse_out = L;
  const bool valid = target != p.loss.ignore_index;
  double loss = 0.0;
  if (valid) {  // step 4
    // No smoothing: its term left out, not 0·(−inf) where a logit is −inf
    // (PyTorch computes it only for a smoothing above 0).
    const double smooth = eps > 0 ? eps * ((m - zsum / static_cast<double>(V)) + ld) : 0.0;
    loss = (1 - eps) * ((m - zh[static_cast<size_t>(target)]) + ld) + smooth + lam * L * L;
  }
  if (dz) {
    for (int64_t j = 0; j < V; ++j) {
      if (!valid || scale == 0.0) {
        dz[j] = 0.0;
        continue;
      }
      const double zj = zh[static_cast<size_t>(j)];
      const double pj = std::exp((zj - m) - ld);
      double g = (j == target ? pj - (1 - eps) : pj) - eps / static_cast<double>(V) + 2 * lam * L * pj;
      // 1 − (ẑ/s)² as 1/cosh²(z/s), which does not cancel where the softcap
      // saturates (cosh overflows to inf, and the factor to 0, past |z/s| ≈ 710).
      const double ch = s > 0 ? std::cosh(z[j] / s) : 1.0, cap = 1.0 / (ch * ch);
      dz[j] = scale * g * cap;
    }
  }
  return loss;
}

}  // namespace

RefOutputs run(const Problem& p, const HostCase& c, bool emulate, const double* lse_offset) {
  p.validate();
  const int64_t N = p.tokens, V = p.vocab, H = p.hidden;
  check_targets(p, c);
  const bool bwd = p.mode == Mode::forward_backward;
  RefOutputs r;
  r.token_loss.assign(static_cast<size_t>(N), 0.0);
  r.lse.assign(static_cast<size_t>(N), 0.0);
  std::vector<double> dz;
  if (bwd) dz.assign(static_cast<size_t>(N * V), 0.0);

#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t i = 0; i < N; ++i) {
    std::vector<double> z(static_cast<size_t>(V));
    for (int64_t j = 0; j < V; ++j) {
      double v;
      if (p.family == Family::ce) {
        v = c.logits[static_cast<size_t>(i * V + j)];
      } else {
        v = 0.0;  // step 1
        const float* x = &c.x[static_cast<size_t>(i * H)];
        const float* w = &c.w[static_cast<size_t>(j * H)];
        for (int64_t k = 0; k < H; ++k) v += static_cast<double>(x[k]) * static_cast<double>(w[k]);
        if (p.bias) v += c.b[static_cast<size_t>(j)];
        v = rnd(emulate, p.dtype, v);
      }
      z[static_cast<size_t>(j)] = v;
    }
    const double scale = token_grad_scale(p, c, i);
    double* dzi = bwd ? &dz[static_cast<size_t>(i * V)] : nullptr;
    r.token_loss[static_cast<size_t>(i)] =
        ce_row(p, z.data(), c.targets[static_cast<size_t>(i)], scale, lse_offset ? lse_offset[i] : 0.0,
               &r.lse[static_cast<size_t>(i)], dzi);
    if (dzi && emulate)
      for (int64_t j = 0; j < V; ++j) dzi[j] = rnd(true, p.dtype, dzi[j]);
  }

  double total = 0.0;  // step 5
  for (double l : r.token_loss) total += l;
  r.loss = (p.loss.reduction == Reduction::mean) ? (c.n_valid ? total / static_cast<double>(c.n_valid) : 0.0)
                                                 : total;
  if (!bwd) return r;
  if (p.family == Family::ce) {
    r.grad_logits = std::move(dz);
    return r;
  }
  r.dx.assign(static_cast<size_t>(N * H), 0.0);
  r.dw.assign(static_cast<size_t>(V * H), 0.0);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {  // dX = dZ · W
    double* dx = &r.dx[static_cast<size_t>(i * H)];
    for (int64_t j = 0; j < V; ++j) {
      const double g = dz[static_cast<size_t>(i * V + j)];
      if (g == 0.0) continue;
      const float* w = &c.w[static_cast<size_t>(j * H)];
      for (int64_t k = 0; k < H; ++k) dx[k] += g * w[k];
    }
    for (int64_t k = 0; k < H; ++k) dx[k] = rnd(emulate, p.dtype, dx[k]);
  }
#pragma omp parallel for schedule(static)
  for (int64_t j = 0; j < V; ++j) {  // dW = dZᵀ · X
    double* dw = &r.dw[static_cast<size_t>(j * H)];
    for (int64_t i = 0; i < N; ++i) {
      const double g = dz[static_cast<size_t>(i * V + j)];
      if (g == 0.0) continue;
      const float* x = &c.x[static_cast<size_t>(i * H)];
      for (int64_t k = 0; k < H; ++k) dw[k] += g * x[k];
    }
    for (int64_t k = 0; k < H; ++k) dw[k] = rnd(emulate, p.dtype, dw[k]);
  }
  if (p.bias) {
    r.db.assign(static_cast<size_t>(V), 0.0);
    for (int64_t i = 0; i < N; ++i)
      for (int64_t j = 0; j < V; ++j) r.db[static_cast<size_t>(j)] += dz[static_cast<size_t>(i * V + j)];
    for (auto& v : r.db) v = rnd(emulate, p.dtype, v);
  }
  return r;
}

}  // namespace celtune::reference
