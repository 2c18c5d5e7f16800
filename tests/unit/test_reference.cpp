// The fp64 reference against hand-computed cases and central finite differences.
#include <doctest/doctest.h>

#include <cmath>

#include "kernels/reference/fp64.hpp"
#include "model/error.hpp"

using namespace celtune;

namespace {
Problem ce_problem(int64_t n, int64_t v) {
  Problem p;
  p.family = Family::ce, p.tokens = n, p.hidden = 0, p.vocab = v, p.dtype = DType::fp32;
  return p;
}
}  // namespace

TEST_CASE("ce reference: one row by hand") {
  Problem p = ce_problem(1, 3);
  HostCase c;
  c.logits = {1.0f, 2.0f, 3.0f};
  c.targets = {2};
  c.n_valid = 1;
  c.grad_scale = 1.0f;
  const auto r = reference::run(p, c);
  const double L = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0));
  CHECK(r.lse[0] == doctest::Approx(L).epsilon(1e-14));
  CHECK(r.loss == doctest::Approx(L - 3.0).epsilon(1e-14));
  for (int j = 0; j < 3; ++j)
    CHECK(r.grad_logits[static_cast<size_t>(j)] ==
          doctest::Approx(std::exp(j + 1.0 - L) - (j == 2 ? 1.0 : 0.0)).epsilon(1e-14));
}

TEST_CASE("ce reference: smoothing, z-loss, softcap and ignore by hand") {
  Problem p = ce_problem(2, 3);
  p.loss.label_smoothing = 0.2, p.loss.z_loss = 0.01, p.loss.softcap = 2.0;
  HostCase c;
  c.logits = {1.0f, -1.0f, 0.5f, 9.0f, 9.0f, 9.0f};
  c.targets = {0, -100};  // second token ignored
  c.n_valid = 1;
  c.grad_scale = 1.0f;
  const auto r = reference::run(p, c);
  double zh[3], sum = 0, zs = 0;
  for (int j = 0; j < 3; ++j) {
    zh[j] = 2.0 * std::tanh(c.logits[static_cast<size_t>(j)] / 2.0);
    sum += std::exp(zh[j]);
    zs += zh[j];
  }
  const double L = std::log(sum);
  const double loss = 0.8 * (L - zh[0]) + 0.2 * (L - zs / 3) + 0.01 * L * L;
  CHECK(r.loss == doctest::Approx(loss).epsilon(1e-13));  // mean over the one valid token
  CHECK(r.token_loss[1] == 0.0);
  for (int j = 0; j < 3; ++j) {
    const double g = (1 + 0.02 * L) * std::exp(zh[j] - L) - 0.8 * (j == 0) - 0.2 / 3;
    CHECK(r.grad_logits[static_cast<size_t>(j)] ==
          doctest::Approx(g * (1 - (zh[j] / 2) * (zh[j] / 2))).epsilon(1e-13));
    CHECK(r.grad_logits[static_cast<size_t>(3 + j)] == 0.0);
  }
}

TEST_CASE("reference: all tokens ignored gives loss 0 and zero gradients under mean") {
  Problem p = ce_problem(3, 5);
  HostCase c = make_case(p, CaseSpec{.seed = 3, .ignore_fraction = 1.0});
  CHECK(c.n_valid == 0);
  const auto r = reference::run(p, c);
  CHECK(r.loss == 0.0);
  for (double g : r.grad_logits) CHECK(g == 0.0);
}

TEST_CASE("reference: out-of-range targets are an input error") {
  Problem p = ce_problem(2, 5);
  HostCase c = make_case(p, CaseSpec{.seed = 4});
  c.targets[1] = 5;
  CHECK_THROWS_AS(reference::run(p, c), Error);
  c.targets[1] = -7;
  CHECK_THROWS_AS(reference::run(p, c), Error);
}

// The loss as a function of the inputs, for finite differences: for 'none' the
// scalar is Σ g_i ℓ_i, whose gradient is what the backward computes.
double objective(const Problem& p, const HostCase& c) {
  const auto r = reference::run(p, c);
  if (p.loss.reduction != Reduction::none) return c.grad_scale * r.loss;
  double s = 0;
  for (size_t i = 0; i < r.token_loss.size(); ++i) s += c.grad_tokens[i] * r.token_loss[i];
  return s;
}

TEST_CASE("flce reference gradients match central finite differences, every option") {
  struct Opt {
    const char* name;
    Reduction red;
    double ls, cap, z;
    bool bias;
  };
  const Opt opts[] = {{"mean", Reduction::mean, 0, 0, 0, false},
                      {"sum+bias", Reduction::sum, 0, 0, 0, true},
                      {"none", Reduction::none, 0, 0, 0, false},
                      {"smooth", Reduction::mean, 0.2, 0, 0, true},
                      {"softcap", Reduction::sum, 0, 3.0, 0, false},
                      {"zloss", Reduction::mean, 0, 0, 0.05, false},
                      {"all", Reduction::none, 0.1, 2.5, 0.02, true}};
  for (const Opt& o : opts) {
    CAPTURE(o.name);
    Problem p;
    p.family = Family::flce, p.tokens = 4, p.hidden = 3, p.vocab = 5, p.dtype = DType::fp32;
    p.loss.reduction = o.red, p.loss.label_smoothing = o.ls, p.loss.softcap = o.cap, p.loss.z_loss = o.z;
    p.bias = o.bias;
    HostCase c = make_case(p, CaseSpec{.seed = 11, .logit_scale = 2.0, .ignore_fraction = 0.25});
    const auto r = reference::run(p, c);
    // Inputs are floats, so perturb by a float-exact step and difference in double.
    const float h = 1.0f / 1024;
    auto fd = [&](std::vector<float>& v, size_t k) {
      const float keep = v[k];
      v[k] = keep + h;
      const double up = objective(p, c);
      v[k] = keep - h;
      const double down = objective(p, c);
      v[k] = keep;
      return (up - down) / (2.0 * h);
    };
    // Central differences err by O(h²·f'''); 1e-5 relative to the gradient scale is well above that.
    for (size_t k = 0; k < c.x.size(); ++k) CHECK(r.dx[k] == doctest::Approx(fd(c.x, k)).epsilon(1e-5).scale(1.0));
    for (size_t k = 0; k < c.w.size(); ++k) CHECK(r.dw[k] == doctest::Approx(fd(c.w, k)).epsilon(1e-5).scale(1.0));
    for (size_t k = 0; k < c.b.size(); ++k) CHECK(r.db[k] == doctest::Approx(fd(c.b, k)).epsilon(1e-5).scale(1.0));
  }
}
