#include "host_case.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>

#include "error.hpp"
#include "numerics.hpp"

namespace celtune {

double Rng::normal() {
  // Box–Muller; u1 is kept away from 0 so log() is finite.
  const double u1 = (static_cast<double>(next() >> 11) + 1.0) * 0x1.0p-53;
  const double u2 = uniform();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

namespace {
// Rows of `cols` values, each row from its own stream (seed, stream, row), so
// rows can be generated in parallel and a seed replays the same inputs whatever
// the number of threads. Billions of values (N·V > 2^31) take seconds.
void fill_normal(std::vector<float>& v, int64_t rows, int64_t cols, double stddev, DType t, uint64_t seed,
                 uint64_t stream) {
  v.resize(static_cast<size_t>(rows * cols));
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    Rng rng(seed ^ (stream * 0xA24BAED4963EE407ull) ^ (static_cast<uint64_t>(r) * 0x9FB21C651E98DF25ull));
    float* row = &v[static_cast<size_t>(r * cols)];
    for (int64_t j = 0; j < cols; ++j) row[j] = round_to(t, static_cast<float>(rng.normal() * stddev));
  }
}
// Row i's logits in double: the ce input row, or x_i·W^T (+ b) for flce.
void row_logits(const Problem& p, const HostCase& c, const std::vector<float>& x_i, int64_t i,
                std::vector<double>& z) {
  const auto V = static_cast<size_t>(p.vocab), H = static_cast<size_t>(p.hidden);
  z.resize(V);
  for (size_t j = 0; j < V; ++j) {
    if (p.family == Family::ce) {
      z[j] = c.logits[static_cast<size_t>(i) * V + j];
      continue;
    }
    double acc = p.bias ? c.b[j] : 0.0;
    for (size_t k = 0; k < H; ++k) acc += static_cast<double>(x_i[k]) * c.w[j * H + k];
    z[j] = acc;
  }
}

// The target's margin over the log-sum-exp of the row's other logits.
double target_margin(const std::vector<double>& z, int64_t t) {
  double m = -INFINITY;
  for (size_t j = 0; j < z.size(); ++j)
    if (static_cast<int64_t>(j) != t) m = std::max(m, z[j]);
  double s = 0.0;
  for (size_t j = 0; j < z.size(); ++j)
    if (static_cast<int64_t>(j) != t) s += std::exp(z[j] - m);
  return z[static_cast<size_t>(t)] - (m + std::log(s));
}

// Makes each counted token's target confident (CaseSpec::confident_margin). ce
// sets the target logit itself; flce moves x_i along w_t (x_i + β·w_t raises z_t
// by β·|w_t|² and the others by less), β found by bisection in double, and then
// rounds x_i to the dtype, which moves the margin by well under a nat.
void make_confident(const Problem& p, double margin, HostCase& c) {
  const auto H = static_cast<size_t>(p.hidden);
  std::vector<double> z;
  std::vector<float> x_i(H), trial(H);
  for (int64_t i = 0; i < p.tokens; ++i) {
    const int64_t t = c.targets[static_cast<size_t>(i)];
    if (t == p.loss.ignore_index) continue;
    if (p.family == Family::ce) {
      row_logits(p, c, x_i, i, z);
      const double others = z[static_cast<size_t>(t)] - target_margin(z, t);  // their log-sum-exp
      c.logits[static_cast<size_t>(i * p.vocab + t)] = round_to(p.dtype, static_cast<float>(others + margin));
      continue;
    }
    std::copy_n(c.x.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(i) * H), H, x_i.begin());
    const float* w_t = &c.w[static_cast<size_t>(t) * H];
    auto margin_at = [&](double beta) {
      for (size_t k = 0; k < H; ++k) trial[k] = static_cast<float>(x_i[k] + beta * w_t[k]);
      row_logits(p, c, trial, i, z);
      return target_margin(z, t);
    };
    double lo = 0.0, hi = 1.0;
    for (int k = 0; k < 60 && margin_at(hi) < margin; ++k) hi *= 2.0;
    for (int k = 0; k < 60; ++k) {
      const double mid = 0.5 * (lo + hi);
      (margin_at(mid) < margin ? lo : hi) = mid;
    }
    for (size_t k = 0; k < H; ++k)
      c.x[static_cast<size_t>(i) * H + k] = round_to(p.dtype, static_cast<float>(x_i[k] + hi * w_t[k]));
  }
}
}  // namespace

void require_host_memory(const Problem& p) {
  // A quarter: results and references take as much again as the inputs; better
  // refused with the sizes than dying halfway through of an allocation failure
  // or the out-of-memory killer.
  const double n = static_cast<double>(p.tokens), h = static_cast<double>(p.hidden), v = static_cast<double>(p.vocab);
  const double need = 4.0 * (p.family == Family::ce ? n * v : n * h + v * h + v) + 12.0 * n;
  const double phys = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGE_SIZE));
  if (phys > 0 && need > phys / 4)
    fail_env("the host copies of " + p.key() + " need " + std::to_string(static_cast<int64_t>(need / (1 << 30))) +
             " GiB; this machine has " + std::to_string(static_cast<int64_t>(phys / (1 << 30))) +
             " GiB of memory (at most a quarter may go to inputs)");
}

HostCase make_case(const Problem& p, const CaseSpec& spec) {
  require_host_memory(p);
  Rng rng(spec.seed);
  HostCase c;
  const auto N = static_cast<size_t>(p.tokens);
  if (p.family == Family::ce) {
    fill_normal(c.logits, p.tokens, p.vocab, spec.logit_scale, p.dtype, spec.seed, 1);
  } else {
    // x ~ N(0,1), w ~ N(0, s²/H) gives logits with standard deviation ≈ s.
    fill_normal(c.x, p.tokens, p.hidden, 1.0, p.dtype, spec.seed, 2);
    fill_normal(c.w, p.vocab, p.hidden, spec.logit_scale / std::sqrt(static_cast<double>(p.hidden)), p.dtype,
                spec.seed, 3);
    if (p.bias) fill_normal(c.b, 1, p.vocab, 0.5, p.dtype, spec.seed, 4);
  }
  c.targets.resize(N);
  for (size_t i = 0; i < N; ++i) {
    if (rng.uniform() < spec.ignore_fraction)
      c.targets[i] = p.loss.ignore_index;
    else
      c.targets[i] = rng.below(p.vocab);
  }
  if (spec.edge_targets && spec.ignore_fraction < 1.0) {
    c.targets[0] = 0;
    if (N > 1) c.targets[N - 1] = p.vocab - 1;
  }
  if (spec.confident_margin > 0.0) make_confident(p, spec.confident_margin, c);
  c.n_valid = 0;
  for (auto t : c.targets) c.n_valid += (t != p.loss.ignore_index);
  // Upstream gradients away from 1, and non-uniform per token for 'none', so a
  // kernel that ignores them cannot pass.
  c.grad_scale = static_cast<float>(0.5 + rng.uniform());
  if (p.loss.reduction == Reduction::none) {
    c.grad_tokens.resize(N);
    for (auto& g : c.grad_tokens) g = static_cast<float>(rng.uniform() * 2.0 - 0.5);
  }
  return c;
}

double token_grad_scale(const Problem& p, const HostCase& c, int64_t i) {
  if (c.targets[static_cast<size_t>(i)] == p.loss.ignore_index) return 0.0;
  switch (p.loss.reduction) {
    case Reduction::mean: return c.n_valid ? static_cast<double>(c.grad_scale) / static_cast<double>(c.n_valid) : 0.0;
    case Reduction::sum: return c.grad_scale;
    case Reduction::none: return c.grad_tokens[static_cast<size_t>(i)];
  }
  return 0.0;
}

void check_targets(const Problem& p, const HostCase& c) {
  for (int64_t i = 0; i < p.tokens; ++i) {
    const int64_t t = c.targets[static_cast<size_t>(i)];
    if (t != p.loss.ignore_index && (t < 0 || t >= p.vocab))
      fail_usage("target " + std::to_string(t) + " at token " + std::to_string(i) +
                 " is outside [0, V) and is not ignore_index");
  }
}

}  // namespace celtune
