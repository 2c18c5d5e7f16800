#include "validate.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <cstring>

#include <nlohmann/json.hpp>

#include "kernels/reference/fp64.hpp"
#include "kernels/reference/gpu.hpp"
#include "model/error.hpp"
#include "model/numerics.hpp"

namespace celtune {

Tolerance tolerance_for(DType t) {
  // The baseline already carries the dtype's rounding of logits and gradients, so
  // a correct kernel lands near it: the factor 1.25 allows for fp32 accumulation
  // order (GEMM reductions in another order change the error, not its size).
  // Margins are a few units of the dtype's rounding: bf16 keeps 8 significant bits
  // (unit roundoff 2^-9 ≈ 2e-3, so 4e-3 is two units), fp16 11 bits (2^-12 ≈ 2.4e-4,
  // so 1e-3 is four), fp32 24 bits, where the CE's own fp32 exp/log on logits near
  // 100 carry ~1e-5 relative error that the fp64 baseline does not model.
  // The max-abs slack is two units in the last place of the dtype at the scale
  // of the largest reference value (bf16 2^-7, fp16 2^-10): the worst single
  // element is an extreme-value statistic, and a kernel that rounds at other
  // points than the baseline (the bias added in fp32 after the GEMM's rounding,
  // where PyTorch rounds after the bias) flips other elements' rounding. On the
  // H100 such a case gave dW 1.54e-3 against the baseline's 4.9e-4 while its
  // relative L2 was 1.16x the baseline's, and the CPU backend reproduced it to
  // the digit: the same arithmetic, not an error. Across seeds the ratio ran
  // 0.88-1.16 (docs/results.md). Where fp64 is the truth, flce is also judged
  // against a path that rounds as the kernels do (kernel_rounding_baseline); the
  // slack still serves the GPU reference's shapes, which have no such path.
  // Bounds are absolute: no kernel passes beyond them, except where the plain
  // path it is judged against cannot meet them either (judge).
  switch (t) {
    case DType::bf16: return {1.25, 4e-3, 0x1p-7, 5e-2, 1.6e-2};
    case DType::fp16: return {1.25, 1e-3, 0x1p-10, 1e-2, 2e-3};
    case DType::fp32: return {1.25, 5e-5, 5e-5, 1e-3, 1e-4};
  }
  return {1.25, 5e-5, 5e-5, 1e-3, 1e-4};
}

namespace {

template <typename A, typename B>
bool bitwise_equal(const std::vector<A>& a, const std::vector<B>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(A)) == 0);
}

bool same_outputs(const HostOutputs& a, const HostOutputs& b) {
  return std::memcmp(&a.loss, &b.loss, sizeof a.loss) == 0 && bitwise_equal(a.token_loss, b.token_loss) &&
         bitwise_equal(a.lse, b.lse) && bitwise_equal(a.grad_logits, b.grad_logits) &&
         bitwise_equal(a.dx, b.dx) && bitwise_equal(a.dw, b.dw) && bitwise_equal(a.db, b.db);
}

// out[a, k] = Σ_b g(a, b)·m[b, k] for a < rows, k < cols, summed in fp32 in the
// order of b (one GEMM thread's K loop), then rounded to the dtype.
template <typename G>
std::vector<double> fp32_products(int64_t rows, int64_t inner, int64_t cols, G g, const std::vector<float>& m,
                                  DType dt) {
  std::vector<double> out(static_cast<size_t>(rows * cols));
#pragma omp parallel for schedule(static)
  for (int64_t a = 0; a < rows; ++a) {
    std::vector<float> acc(static_cast<size_t>(cols), 0.0f);
    for (int64_t b = 0; b < inner; ++b) {
      const float ga = g(a, b);
      const float* mb = &m[static_cast<size_t>(b * cols)];
      for (int64_t k = 0; k < cols; ++k) acc[static_cast<size_t>(k)] += ga * mb[k];
    }
    for (int64_t k = 0; k < cols; ++k)
      out[static_cast<size_t>(a * cols + k)] = round_to(dt, acc[static_cast<size_t>(k)]);
  }
  return out;
}

// The kernel-rounding path of flce: plain loops that round where celtune's
// kernels do. The GEMM rounds x·w to the dtype and the bias joins in fp32 as the
// CE reads the tile, where PyTorch's F.linear rounds x·w + b once; dZ is rounded
// to the dtype; every GEMM accumulates in fp32, each output element's sum in
// index order as one thread of a GEMM runs its K loop, where the fp64 reference
// sums in double. The softmax, loss and dZ are the fp64 reference's (its ce
// family, on these logits), so the two plain paths differ only where they round.
//
// Why a second path. With a bias the two round each logit at different points,
// so their errors are independent draws of the same size; the few logits with
// p near 1/2 decide a gradient's worst element and, at N·H of a few, its whole
// relative L2. In the default matrix's fp16 bias case (seed 40) dW's worst
// element was 2.15e-4 off (7 ulps) where the unfused path's worst was 5.6e-5:
// one logit near 17 with p ≈ 1/2 was rounded 0.0070 away by the kernel and
// 0.0037 by the unfused path. At N = 1, H = 2 (seed 11, bf16) dW had 2.9x the
// unfused path's relative L2. In fp32 the dtype's own error is the accumulation:
// dX sums V terms in fp32, which at V = 65537 and N·H ≤ 32 left ~6e-5 relative
// where the unfused path's fp64 sums leave 1e-7. Over 760 random bf16 cases
// with a bias, N ≤ 8 and H ≤ 4, the CPU backend's gradients stayed within 1.15x
// this path's relative L2, where they reached 5.6x the unfused path's; a kernel
// with a real error is as far from this path as from the other.
// A flce case as the ce problem on the logits its kernels form (x·w rounded to
// the dtype, the bias added in fp32); a ce case as it is.
std::pair<Problem, HostCase> kernel_logits(const Problem& p, const HostCase& in) {
  if (p.family == Family::ce) return {p, in};
  const int64_t N = p.tokens, H = p.hidden, V = p.vocab;
  Problem q = p;
  q.family = Family::ce, q.hidden = 0, q.bias = false;
  HostCase c;
  c.targets = in.targets, c.grad_scale = in.grad_scale, c.grad_tokens = in.grad_tokens, c.n_valid = in.n_valid;
  c.logits.resize(static_cast<size_t>(N * V));
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    const float* x = &in.x[static_cast<size_t>(i * H)];
    for (int64_t j = 0; j < V; ++j) {
      const float* w = &in.w[static_cast<size_t>(j * H)];
      float acc = 0.0f;
      for (int64_t k = 0; k < H; ++k) acc += x[k] * w[k];
      float z = round_to(p.dtype, acc);
      if (p.bias) z += in.b[static_cast<size_t>(j)];
      c.logits[static_cast<size_t>(i * V + j)] = z;
    }
  }
  return {q, std::move(c)};
}

RefOutputs kernel_rounding_baseline(const Problem& p, const HostCase& in) {
  const int64_t N = p.tokens, H = p.hidden, V = p.vocab;
  const auto [q, c] = kernel_logits(p, in);
  RefOutputs r = reference::run(q, c, true);
  if (p.mode != Mode::forward_backward) return r;
  const std::vector<double> dz = std::move(r.grad_logits);  // rounded to the dtype: exact in float
  r.grad_logits.clear();
  const auto dz_at = [&](int64_t i, int64_t j) { return static_cast<float>(dz[static_cast<size_t>(i * V + j)]); };
  const auto dz_transposed = [&](int64_t j, int64_t i) { return dz_at(i, j); };
  r.dx = fp32_products(N, V, H, dz_at, in.w, p.dtype);          // dZ · W
  r.dw = fp32_products(V, N, H, dz_transposed, in.x, p.dtype);  // dZᵀ · X
  if (p.bias) {                                                 // Σ_rows dZ
    const std::vector<float> ones(static_cast<size_t>(N), 1.0f);
    r.db = fp32_products(V, N, 1, dz_transposed, ones, p.dtype);
  }
  return r;
}

// magnitude: the dtype's rounding error of a logit is proportional to |z| (its ulp
// grows with it), so the absolute bound grows with the largest LSE (≥ max logit)
// beyond 16, where typical vocabularies sit (log V + a few).
OutputVerdict judge(const std::string& name, const std::vector<float>& got, const std::vector<double>& truth,
                    const std::vector<double>& base, const char* path, DType dt, double magnitude) {
  const Tolerance tol = tolerance_for(dt);
  OutputVerdict v;
  v.name = name;
  v.baseline_path = path;
  if (got.size() != truth.size()) {
    v.why = "output has " + std::to_string(got.size()) + " elements, expected " + std::to_string(truth.size());
    return v;
  }
  double ref_max = 0;
  for (double r : truth) ref_max = std::max(ref_max, std::fabs(r));
  const double atol = tol.margin * ref_max;
  v.baseline = compare(base.data(), truth.data(), truth.size(), atol, tol.rtol);
  // An element the baseline gets wrong by more than tolerance may be as wrong in
  // the kernel: per-element slack is the baseline's worst error, doubled.
  v.kernel = compare(got.data(), truth.data(), truth.size(), atol + 2 * v.baseline.max_abs, tol.rtol);
  const auto& k = v.kernel;
  const auto& b = v.baseline;
  // The bound never asks for more than the plain path itself achieves (plus the
  // margin): where an output cancels, no implementation at this dtype meets it.
  // One dX element at N = 1, H = 1 is Σ_j dZ_j·w_j, whose terms' magnitudes add
  // up to 97 times the sum: rounding dZ to bf16 alone left it 8.6% off (seed 24,
  // V = 3001), kernel and baseline alike, against a bound of 5%.
  const double bound = std::max(tol.bound * std::max(1.0, magnitude / 16.0), b.rel_l2 + tol.margin);
  char buf[256];
  // Every element within fp32's smallest normal of the truth is as right as an
  // fp32 output can be: relative measures of values below fp32's range are
  // noise (one token's z-loss of 1.44e-70 came out 0, "rel L2 1", at V = 1 and
  // a softcap of 1.2e-38).
  const bool below_fp32 = k.max_abs <= std::numeric_limits<float>::min();
  if (k.nonfinite > 0) {
    // A true value beyond the dtype's range is ±inf in any output stored in it
    // (fp16 with a z-loss of 1e5: a dZ of 1.2e5): the problem does not fit the
    // dtype, which no kernel can change, and the verdict says so instead of
    // blaming the kernel.
    // Where the plain path in the same dtype is non-finite at every one of
    // them too, an intermediate (dZ before its GEMM) left the dtype's range:
    // fp16 with a z-loss of 1e6 made dX inf in both, and the kernel was blamed.
    long long overflow = 0, shared = 0;
    double beyond = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      if (std::isfinite(got[i]) || !std::isfinite(truth[i])) continue;
      if (std::isinf(round_to(dt, static_cast<float>(truth[i])))) ++overflow, beyond = std::max(beyond, std::fabs(truth[i]));
      if (!std::isfinite(base[i])) ++shared;
    }
    if (overflow == static_cast<long long>(k.nonfinite))
      std::snprintf(buf, sizeof buf,
                    "%lld values overflow %s: the reference's reach %.3g, beyond the dtype's range (choose a wider "
                    "dtype or smaller scales)",
                    overflow, std::string(to_string(dt)).c_str(), beyond);
    else if (shared == static_cast<long long>(k.nonfinite))
      std::snprintf(buf, sizeof buf,
                    "%lld non-finite values where the reference is finite, and the plain path in %s is non-finite "
                    "at each of them too: an intermediate leaves the dtype's range (choose a wider dtype or smaller "
                    "scales)",
                    shared, std::string(to_string(dt)).c_str());
    else
      std::snprintf(buf, sizeof buf, "%lld non-finite values where the reference is finite",
                    static_cast<long long>(k.nonfinite));
    v.why = buf;
  } else if (below_fp32) {
  } else if (k.rel_l2 > tol.baseline_factor * b.rel_l2 + tol.margin) {
    std::snprintf(buf, sizeof buf, "rel L2 %.3g > %.2g × baseline %.3g + %.1g", k.rel_l2, tol.baseline_factor,
                  b.rel_l2, tol.margin);
    v.why = buf;
  } else if (k.max_abs > 2 * b.max_abs + tol.max_margin * ref_max) {
    std::snprintf(buf, sizeof buf, "max abs %.3g > 2 × baseline %.3g + %.2g × max|ref| %.3g", k.max_abs,
                  b.max_abs, tol.max_margin, ref_max);
    v.why = buf;
  } else if (k.rel_l2 > bound) {
    std::snprintf(buf, sizeof buf, "rel L2 %.3g above the %s bound %.2g", k.rel_l2, std::string(to_string(dt)).c_str(),
                  bound);
    v.why = buf;
  }
  v.pass = v.why.empty();
  return v;
}

// How far each output may move with each row's LSE off by what one formed in
// fp32 is off. The kernels keep L = m + log d as one fp32 number and form ℓ =
// (1−ε)(L − ẑ_y) + ε(L − Σẑ/V) + λL² and p = exp(ẑ − L) from it, so at a confident
// token (1 − p_y ≈ 1e-5 at L ≈ 30) a few ulp of L are 10–40% of its loss and of
// its gradient row, where PyTorch's log_softmax, keeping m and log d apart, is
// good to its last bits (the README's precision note). At V = 2 in fp32 a
// correct kernel's loss and dZ came out 0.2–1% off against a margin of 5e-5.
// L's error: its own rounding and log d's (half an ulp of each of m and log d),
// the exponent's shift for 16-bit inputs (half an ulp of m·log2 e), the sum's
// ex2.approx terms (2 ulp of d), a softcap's few ulp of s in each ẑ: under Δ =
// 2^-21·(|m| + log d + 1 + s), where |m| + log d ≤ |L| + 2·log V (d ≤ V). The
// reach is half the change of each output between L + Δ and L − Δ (the fp64
// reference with each row's L moved). Rows move independently, so the sums
// over rows (the scalar loss, dW, db) add magnitudes; a row's dX moves with its
// one L, so its reach is the signed half-change summed (a sum of magnitudes
// there came to 1.4–6.4x that in a review's model of these formulas).
RefOutputs lse_reach(const Problem& p, const HostCase& in, const RefOutputs& truth) {
  const int64_t N = p.tokens, H = p.hidden, V = p.vocab;
  const double log_v = std::log(static_cast<double>(V)), s = p.loss.softcap > 0 ? p.loss.softcap : 0.0;
  std::vector<double> up(static_cast<size_t>(N)), down(static_cast<size_t>(N));
  RefOutputs r;
  r.lse.assign(static_cast<size_t>(N), 0.0);
  for (int64_t i = 0; i < N; ++i) {
    const double L = std::fabs(truth.lse[static_cast<size_t>(i)]);
    const double delta = std::isfinite(L) ? 0x1p-21 * (L + 2 * log_v + 1 + s) : 0.0;
    r.lse[static_cast<size_t>(i)] = delta, up[static_cast<size_t>(i)] = delta, down[static_cast<size_t>(i)] = -delta;
  }
  const auto [q, c] = kernel_logits(p, in);
  const RefOutputs hi = reference::run(q, c, false, up.data()), lo = reference::run(q, c, false, down.data());
  // Signed: dX sums a row's changes with their signs; the rest take magnitudes.
  auto half_change = [](const std::vector<double>& a, const std::vector<double>& b) {
    std::vector<double> h(a.size());
    for (size_t k = 0; k < a.size(); ++k) h[k] = std::isfinite(a[k] - b[k]) ? (a[k] - b[k]) / 2 : 0.0;
    return h;
  };
  auto magnitudes = [](std::vector<double> v) {
    for (double& e : v) e = std::fabs(e);
    return v;
  };
  r.token_loss = magnitudes(half_change(hi.token_loss, lo.token_loss));
  for (double t : r.token_loss) r.loss += t;
  if (p.loss.reduction == Reduction::mean) r.loss = in.n_valid ? r.loss / static_cast<double>(in.n_valid) : 0.0;
  if (p.mode != Mode::forward_backward) return r;
  const std::vector<double> w = half_change(hi.grad_logits, lo.grad_logits);  // [N,V], signed
  if (p.family == Family::ce) {
    r.grad_logits = magnitudes(w);
    return r;
  }
  const auto at = [&](int64_t i, int64_t j) { return std::fabs(w[static_cast<size_t>(i * V + j)]); };
  r.dx.assign(static_cast<size_t>(N * H), 0.0);  // |Σ_j w_ij·W_jk|
  r.dw.assign(static_cast<size_t>(V * H), 0.0);  // Σ_i |w_ij|·|X_ik|
  if (p.bias) r.db.assign(static_cast<size_t>(V), 0.0);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    double* dx = &r.dx[static_cast<size_t>(i * H)];
    for (int64_t j = 0; j < V; ++j)
      for (int64_t k = 0; k < H; ++k)
        dx[k] += w[static_cast<size_t>(i * V + j)] * in.w[static_cast<size_t>(j * H + k)];
    for (int64_t k = 0; k < H; ++k) dx[k] = std::fabs(dx[k]);
  }
#pragma omp parallel for schedule(static)
  for (int64_t j = 0; j < V; ++j)
    for (int64_t i = 0; i < N; ++i) {
      for (int64_t k = 0; k < H; ++k)
        r.dw[static_cast<size_t>(j * H + k)] += at(i, j) * std::fabs(in.x[static_cast<size_t>(i * H + k)]);
      if (p.bias) r.db[static_cast<size_t>(j)] += at(i, j);
    }
  return r;
}

// The outputs with each element's error shrunk by its reach: what is left of
// the error once an fp32 LSE's share is taken out (within reach: the truth, in
// the output's float). Non-finite elements stay as they are.
HostOutputs beyond_reach(const HostOutputs& got, const RefOutputs& truth, const RefOutputs& reach) {
  HostOutputs a = got;
  auto pull = [](float& g, double t, double r) {
    const double e = static_cast<double>(g) - t;
    if (std::isfinite(e)) g = static_cast<float>(t + std::copysign(std::max(0.0, std::fabs(e) - r), e));
  };
  auto pull_all = [&](std::vector<float>& g, const std::vector<double>& t, const std::vector<double>& r) {
    if (g.size() == t.size() && r.size() == t.size())
      for (size_t k = 0; k < g.size(); ++k) pull(g[k], t[k], r[k]);
  };
  pull(a.loss, truth.loss, reach.loss);
  pull_all(a.token_loss, truth.token_loss, reach.token_loss);
  pull_all(a.lse, truth.lse, reach.lse);
  pull_all(a.grad_logits, truth.grad_logits, reach.grad_logits);
  pull_all(a.dx, truth.dx, reach.dx);
  pull_all(a.dw, truth.dw, reach.dw);
  pull_all(a.db, truth.db, reach.db);
  return a;
}

}  // namespace

double fp64_cost(const Problem& p) {
  // Multiply-adds the fp64 reference does: the logits GEMM and the two gradient
  // GEMMs (flce), plus about 20 operations per logit for softmax and dZ.
  const double nv = static_cast<double>(p.tokens) * static_cast<double>(p.vocab);
  return nv * (p.family == Family::flce ? 3.0 * static_cast<double>(p.hidden) + 20.0 : 20.0);
}

bool gpu_truth(const Problem& p, Truth choice, bool have_gpu) {
  return choice == Truth::gpu || (choice == Truth::automatic && fp64_cost(p) > kFp64Budget && have_gpu);
}

Truth parse_truth(std::string_view s) {
  if (s == "auto") return Truth::automatic;
  if (s == "fp64") return Truth::fp64;
  if (s == "gpu") return Truth::gpu;
  fail_usage("unknown reference '" + std::string(s) + "': expected auto, fp64 or gpu");
}

namespace {

// The vector outputs a problem has, by name, in one order for kernel and
// references alike: token_loss, lse, then dz (ce) or dx, dw, db (flce).
template <typename Out>
using Named = std::vector<std::pair<std::string, const std::vector<Out>*>>;

template <typename Out>
Named<Out> named_outputs(const Problem& p, const std::vector<Out>& token_loss, const std::vector<Out>& lse,
                         const std::vector<Out>& dz, const std::vector<Out>& dx, const std::vector<Out>& dw,
                         const std::vector<Out>& db) {
  Named<Out> v{{"token_loss", &token_loss}, {"lse", &lse}};
  if (p.mode != Mode::forward_backward) return v;
  if (p.family == Family::ce) {
    v.push_back({"dz", &dz});
  } else {
    v.push_back({"dx", &dx});
    v.push_back({"dw", &dw});
    if (p.bias) v.push_back({"db", &db});
  }
  return v;
}

Named<double> ref_outputs(const Problem& p, const RefOutputs& r) {
  return named_outputs(p, r.token_loss, r.lse, r.grad_logits, r.dx, r.dw, r.db);
}
Named<float> host_outputs(const Problem& p, const HostOutputs& o) {
  return named_outputs(p, o.token_loss, o.lse, o.grad_logits, o.dx, o.dw, o.db);
}

int cuda_ordinal(const DeviceInfo& d) {
  return d.id.rfind("cuda:", 0) == 0 ? std::stoi(d.id.substr(5)) : 0;
}

}  // namespace

std::string check_gpu_reference(const Problem& p, const CaseSpec& spec, int ordinal) {
  // The GPU reference computes in fp32 (sums in double); against fp64 it must
  // agree to fp32 accuracy in every output. 1e-4 relative L2 leaves room for
  // exp() of logits near 100 (fp32 carries ~1e-5 there), nothing more.
  constexpr double kRelL2 = 1e-4;
  Problem q = p;
  q.tokens = std::min<int64_t>(p.tokens, 67);
  q.vocab = std::min<int64_t>(p.vocab, 1001);
  if (p.family == Family::flce) q.hidden = std::min<int64_t>(p.hidden, 48);
  const HostCase in = make_case(q, spec);
  const RefOutputs gpu = reference::run_gpu(q, in, ordinal, false);
  const RefOutputs cpu = reference::run(q, in, false);
  char buf[200];
  if (q.loss.reduction != Reduction::none &&
      !(std::fabs(gpu.loss - cpu.loss) <= kRelL2 * std::max(1.0, std::fabs(cpu.loss)))) {
    std::snprintf(buf, sizeof buf, "loss %.9g, fp64 %.9g at %s", gpu.loss, cpu.loss, q.key().c_str());
    return buf;
  }
  const auto g = ref_outputs(q, gpu), c = ref_outputs(q, cpu);
  for (size_t k = 0; k < g.size(); ++k) {
    const ErrorStats e = compare(g[k].second->data(), c[k].second->data(), c[k].second->size(), 0.0, 0.0, 1);
    if (g[k].second->size() != c[k].second->size() || e.nonfinite > 0 || !(e.rel_l2 <= kRelL2)) {
      std::snprintf(buf, sizeof buf, "%s rel L2 %.3g (non-finite %lld) against fp64 at %s", g[k].first.c_str(),
                    e.rel_l2, static_cast<long long>(e.nonfinite), q.key().c_str());
      return buf;
    }
  }
  return "";
}

CaseResult validate_case(Backend& backend, const ValidationCase& vc, Truth choice) {
  CaseResult r;
  r.vcase = vc;
  const auto t0 = std::chrono::steady_clock::now();
  const Problem& p = vc.problem;
  try {
    const bool have_gpu = cuda_device_count() > 0;
    const bool gpu_ref = gpu_truth(p, choice, have_gpu);
    if (gpu_ref && !have_gpu) fail_env("the GPU reference needs a CUDA GPU and a build with CUDA");
    backend.check(p, vc.config);
    const HostCase in = make_case(p, vc.spec);
    const HostOutputs got = backend.run(p, vc.config, in);
    const HostOutputs again = backend.run(p, vc.config, in);
    r.deterministic = same_outputs(got, again);
    RefOutputs truth, base;
    if (gpu_ref) {
      const int ordinal = cuda_ordinal(backend.device());
      r.reference_check = check_gpu_reference(p, vc.spec, ordinal);
      if (!r.reference_check.empty()) fail_env("the GPU reference failed its own check: " + r.reference_check);
      r.reference_check = "pass";
      truth = reference::run_gpu(p, in, ordinal, false);
      base = reference::run_gpu(p, in, ordinal, true);
      r.truth = "gpu-fp32";
    } else {
      truth = reference::run(p, in, false);
      base = reference::run(p, in, true);
      r.truth = "fp64";
    }
    const DType dt = p.dtype;
    double magnitude = 0;
    for (double l : truth.lse) magnitude = std::max(magnitude, std::fabs(l));
    const auto t = ref_outputs(p, truth);
    // Every output of `out` against one plain path; the scalar loss first (for
    // 'none' there is no scalar output, only the vector).
    auto judge_all = [&](const HostOutputs& out, const RefOutputs& plain, const char* path) {
      std::vector<OutputVerdict> v;
      if (p.loss.reduction != Reduction::none)
        v.push_back(judge("loss", {out.loss}, {truth.loss}, {plain.loss}, path, dt, magnitude));
      const auto k = host_outputs(p, out);
      const auto b = ref_outputs(p, plain);
      for (size_t i = 0; i < k.size(); ++i)
        v.push_back(judge(k[i].first, *k[i].second, *t[i].second, *b[i].second, path, dt, magnitude));
      return v;
    };
    auto failed = [&] { return std::any_of(r.outputs.begin(), r.outputs.end(), [](const auto& o) { return !o.pass; }); };
    // A failed output passes if its verdict in `again` does.
    auto take = [&](const std::vector<OutputVerdict>& again) {
      for (size_t i = 0; i < again.size(); ++i)
        if (!r.outputs[i].pass && again[i].pass) r.outputs[i] = again[i];
    };
    r.outputs = judge_all(got, base, kUnfusedPath);
    // An output that fails against the unfused path passes if it meets the same
    // criteria against the kernel-rounding one (flce, fp64 truth); a failure is
    // reported against the unfused path, the one the README documents. Built only
    // then: it costs another N·V·H, and tune's correctness gate validates every
    // candidate. The GPU reference has no such path: its shapes are beyond what
    // these CPU loops can afford, and their N·H is large enough for the unfused
    // path's statistics to be stable.
    std::vector<std::pair<RefOutputs, const char*>> plains;
    if (failed() && !gpu_ref) {
      plains.emplace_back(std::move(base), kUnfusedPath);
      if (p.family == Family::flce) {
        plains.emplace_back(kernel_rounding_baseline(p, in), kKernelRoundingPath);
        take(judge_all(got, plains.back().first, kKernelRoundingPath));
      }
    }
    // Then what is left of its error beyond an fp32 LSE's reach, against either
    // path (the same criteria; the verdict says so).
    if (failed() && !gpu_ref) {
      const HostOutputs rest = beyond_reach(got, truth, lse_reach(p, in, truth));
      for (const auto& [plain, path] : plains) {
        auto again = judge_all(rest, plain, path);
        for (size_t i = 0; i < again.size(); ++i)
          again[i].beyond_lse_reach = true, again[i].kernel_raw = r.outputs[i].kernel;
        take(again);
      }
    }
    r.pass = r.deterministic;
    for (const auto& o : r.outputs) r.pass = r.pass && o.pass;
  } catch (const Error& e) {
    r.error = e.what();
    r.pass = false;
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

std::vector<ValidationCase> default_matrix(uint64_t seed, bool gpu_cases) {
  std::vector<ValidationCase> out;
  uint64_t s = seed;
  // Shapes: N = 67 is not a multiple of any row chunk, V = 1001 of any block
  // size or chunk; H = 48 keeps the 16-byte alignment cuBLASLt wants for 16-bit
  // rows (H % 8 == 0) while not being a power of two.
  struct Opt {
    const char* name;
    void (*apply)(Problem&, CaseSpec&);
    bool sixteen_bit_only = false;
  };
  const Opt opts[] = {
      {"plain", [](Problem&, CaseSpec&) {}},
      {"sum", [](Problem& p, CaseSpec&) { p.loss.reduction = Reduction::sum; }},
      {"none", [](Problem& p, CaseSpec&) { p.loss.reduction = Reduction::none; }},
      {"smooth+ignored", [](Problem& p, CaseSpec& c) { p.loss.label_smoothing = 0.1, c.ignore_fraction = 0.3; }},
      {"softcap+zloss", [](Problem& p, CaseSpec&) { p.loss.softcap = 30.0, p.loss.z_loss = 1e-4; }},
      {"zloss", [](Problem& p, CaseSpec&) { p.loss.z_loss = 1e-3; }},
      {"bias", [](Problem& p, CaseSpec&) { p.bias = p.family == Family::flce; }},
      {"int32", [](Problem& p, CaseSpec&) { p.target_type = TargetType::i32, p.loss.ignore_index = -1; }},
      {"forward", [](Problem& p, CaseSpec&) { p.mode = Mode::forward; }},
      {"all-ignored", [](Problem&, CaseSpec& c) { c.ignore_fraction = 1.0; }},
      {"one-token", [](Problem& p, CaseSpec&) { p.tokens = 1; }},
      {"large-logits", [](Problem&, CaseSpec& c) { c.logit_scale = 150.0; }},
  };
  // Added later, so they come after the cases above and leave those their seeds
  // (tests replay some by seed and name).
  const Opt late[] = {
      // p of the target ≈ 1 − 6.7e-3: rounding p to 16 bits before subtracting 1
      // moves the target's dZ by up to 2^−9 (bf16, ~30%) or 2^−12 (fp16, ~4%).
      // Not more confident, and not fp32: ℓ = L − z_t and p − 1 = exp(z_t − L) − 1
      // cancel in fp32, where L (≈ 20 here) is good to 1e-6 absolute, so 1 − p
      // below ~1e-3 would fail correct kernels on the fp32 criteria. (PyTorch's
      // log_softmax, keeping m and log d apart, does not cancel there.)
      {"confident", [](Problem&, CaseSpec& c) { c.confident_margin = 5.0, c.edge_targets = false; }, true},
      // Options at sizes that 16-bit outputs resolve. In dZ the target's
      // element (≈ 1 − ε) dominates the row's norm, so at ε = 0.1 a kernel that
      // dropped the ε/V term moved dZ by 3.5e-3 relative, and at λ = 1e-4 one
      // that dropped z-loss by less: both within bf16's margin (4e-3), caught
      // only by the fp32 cases, while impl fused runs only in 16 bits. At ε = 0.5
      // and λ = 2e-2 each is several margins (a unit test drops each).
      {"strong-options",
       [](Problem& p, CaseSpec& c) {
         p.loss.label_smoothing = 0.5, p.loss.z_loss = 2e-2, c.ignore_fraction = 0.2;
         p.bias = p.family == Family::flce;
       },
       true},
  };
  auto add = [&](const auto& options) {
    for (Family fam : {Family::flce, Family::ce}) {
      for (DType dt : {DType::bf16, DType::fp16, DType::fp32}) {
        for (const Opt& o : options) {
          if (o.sixteen_bit_only && dt == DType::fp32) continue;
          for (int two_pass = 0; two_pass < 2; ++two_pass) {
            ValidationCase vc;
            Problem& p = vc.problem;
            p.family = fam;
            p.tokens = 67;
            p.hidden = fam == Family::flce ? 48 : 0;
            p.vocab = 1001;
            p.dtype = dt;
            vc.spec.seed = s++;
            o.apply(p, vc.spec);
            KernelConfig& c = vc.config;
            c.threads = 128;
            if (two_pass) {  // chunks that divide neither N nor V
              c.block_size = 128;
              c.v_chunk = 384;
              c.row_chunk = fam == Family::flce ? 40 : 0;
            } else {
              c.block_size = 256;
              c.v_chunk = 0;
              c.row_chunk = fam == Family::flce ? 32 : 0;
            }
            vc.name = std::string(to_string(fam)) + "/" + std::string(to_string(dt)) + "/" + o.name +
                      (two_pass ? "/chunked" : "/one-pass");
            out.push_back(vc);
          }
        }
      }
    }
  };
  add(opts);
  add(late);
  if (gpu_cases) {
    // The fused sm_90 path (impl fused): every option in bf16 and fp16, one pass
    // (the tile stored by the statistics GEMM) and two passes (statistics first,
    // then recomputed tiles), both with row chunks that do not divide N. The
    // CLI drops these, saying why, where the device or build cannot run them.
    const size_t plain = out.size();
    for (size_t i = 0; i < plain; ++i) {
      const ValidationCase& base = out[i];
      if (base.problem.family != Family::flce || base.problem.dtype == DType::fp32) continue;
      ValidationCase vc = base;
      vc.config.impl = KernelConfig::Impl::fused;
      vc.spec.seed = s++;
      vc.name += "/sm90-fused";
      out.push_back(vc);
    }
    // ce rows shared by a thread-block cluster (sm_90): the chunked cases again
    // with fused, so each row's three segments are held on chip by three blocks
    // that exchange their statistics through distributed shared memory.
    for (size_t i = 0; i < plain; ++i) {
      const ValidationCase& base = out[i];
      if (base.problem.family != Family::ce || base.config.v_chunk == 0) continue;
      ValidationCase vc = base;
      vc.config.fused = true;
      vc.spec.seed = s++;
      vc.name += "/cluster";
      out.push_back(vc);
    }
    // ce rows spread over the GPU: the same cases with segments of one tile of
    // 64 columns (16 a row, more than a cluster holds), each block holding its
    // segment in registers, the row's blocks meeting through global memory.
    for (size_t i = 0; i < plain; ++i) {
      const ValidationCase& base = out[i];
      if (base.problem.family != Family::ce || base.config.v_chunk == 0) continue;
      ValidationCase vc = base;
      vc.config.fused = true;
      vc.config.block_size = 64, vc.config.threads = 32, vc.config.v_chunk = 64;
      vc.spec.seed = s++;
      vc.name += "/spread";
      out.push_back(vc);
    }
    // 64-bit indexing: one row chunk of all N rows and one vocabulary chunk, so
    // the kernel's single logits tile holds N·V = 16411·131072 ≈ 2^31 + 3.6e6
    // elements (4.3 GB in bf16). H = 64 keeps the inputs small; the GPU reference
    // materialises the fp32 logits (8.6 GB), where fp64 would take minutes.
    ValidationCase vc;
    Problem& p = vc.problem;
    p.family = Family::flce;
    p.tokens = 16411;
    p.hidden = 64;
    p.vocab = 131072;
    p.dtype = DType::bf16;
    vc.spec.seed = s++;
    vc.config.block_size = 2048;
    vc.config.threads = 256;
    vc.config.v_chunk = 0;
    vc.config.row_chunk = p.tokens;
    vc.name = "flce/bf16/N·V>2^31/one-tile";
    out.push_back(vc);
  }
  return out;
}

ValidationCase reduced_case(const Problem& p, const KernelConfig& c, uint64_t seed) {
  ValidationCase vc;
  Problem& g = vc.problem;
  KernelConfig& gc = vc.config;
  g = p;
  gc = c;
  if (p.family == Family::flce) g.hidden = std::min<int64_t>(p.hidden, 64);
  if (c.one_pass(p)) {
    g.vocab = std::min<int64_t>(p.vocab, 3001);
    gc.v_chunk = 0;
  } else {
    // Two passes with a ragged last chunk: two full chunks and a remainder.
    g.vocab = std::min<int64_t>(p.vocab, 2 * c.v_chunk_for(p) + 123);
  }
  const bool several_rows = c.row_chunk_for(p) < p.tokens;
  g.tokens = std::min<int64_t>(p.tokens, several_rows ? 83 : 67);
  gc.row_chunk = several_rows ? 32 : 0;  // 83 rows: 32, 32, 19
  vc.spec.seed = seed;
  vc.name = "reduced " + g.key();
  return vc;
}

void to_json(nlohmann::json& j, const CaseResult& r) {
  nlohmann::json outs = nlohmann::json::array();
  for (const auto& o : r.outputs) {
    outs.push_back({{"output", o.name}, {"pass", o.pass}, {"why", o.why}, {"kernel", o.kernel},
                    {"baseline", o.baseline}, {"baseline_path", o.baseline_path},
                    {"beyond_lse_reach", o.beyond_lse_reach}});
    if (o.beyond_lse_reach) outs.back()["kernel_raw"] = o.kernel_raw;
  }
  j = nlohmann::json{{"case", r.vcase.name},
                     {"problem", r.vcase.problem},
                     {"config", r.vcase.config},
                     {"seed", r.vcase.spec.seed},
                     {"truth", r.truth},
                     {"reference_check", r.reference_check},
                     {"pass", r.pass},
                     {"deterministic", r.deterministic},
                     {"error", r.error},
                     {"seconds", r.seconds},
                     {"outputs", outs}};
}

}  // namespace celtune
