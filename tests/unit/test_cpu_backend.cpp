// The CPU backend against the fp64 reference: the default validation matrix,
// configs that do and do not divide the shape, determinism, bad targets.
#include <doctest/doctest.h>

#include <algorithm>

#include <cmath>

#include "kernels/cpu/cpu_backend.hpp"
#include "kernels/reference/fp64.hpp"
#include "model/error.hpp"
#include "validate/validate.hpp"

using namespace celtune;

TEST_CASE("CPU backend passes the default validation matrix") {
  auto backend = cpu::make_backend();
  const auto cases = default_matrix(20261122);
  CHECK(cases.size() >= 100);
  for (const auto& vc : cases) {
    CAPTURE(vc.name);
    const CaseResult r = validate_case(*backend, vc);
    CHECK(r.error == "");
    CHECK(r.deterministic);
    for (const auto& o : r.outputs) {
      CAPTURE(o.name);
      CAPTURE(o.why);
      CHECK(o.pass);
    }
  }
}

TEST_CASE("chunked and one-pass schedules agree across many chunk shapes") {
  Problem p;
  p.family = Family::flce, p.tokens = 29, p.hidden = 16, p.vocab = 301, p.dtype = DType::fp32, p.bias = true;
  p.loss.label_smoothing = 0.05, p.loss.z_loss = 1e-3;
  const HostCase in = make_case(p, CaseSpec{.seed = 99});
  const auto truth = reference::run(p, in);
  for (int64_t vc : {0, 32, 100, 150, 300, 301, 4096})
    for (int64_t rc : {0, 1, 7, 29})
      for (int bs : {32, 64, 256}) {
        KernelConfig c;
        c.v_chunk = vc, c.row_chunk = rc, c.block_size = bs;
        if (c.v_chunk_for(p) < p.vocab && bs > c.v_chunk_for(p)) continue;
        CAPTURE(to_string(c));
        const HostOutputs out = cpu::run(p, c, in);
        const auto d = compare(out.dw.data(), truth.dw.data(), truth.dw.size(), 0, 0);
        const auto x = compare(out.dx.data(), truth.dx.data(), truth.dx.size(), 0, 0);
        const auto l = compare(out.lse.data(), truth.lse.data(), truth.lse.size(), 0, 0);
        CHECK(d.rel_l2 < 1e-5);
        CHECK(x.rel_l2 < 1e-5);
        CHECK(l.rel_l2 < 1e-6);
        CHECK(out.loss == doctest::Approx(truth.loss).epsilon(1e-5));
      }
}

TEST_CASE("output-dtype accumulation is a real choice and stays within bf16 tolerance") {
  Problem p;
  p.family = Family::flce, p.tokens = 64, p.hidden = 32, p.vocab = 777, p.dtype = DType::bf16;
  const HostCase in = make_case(p, CaseSpec{.seed = 5});
  KernelConfig acc32, acc16;
  acc32.v_chunk = 128, acc32.row_chunk = 8, acc32.block_size = 64;
  acc16 = acc32;
  acc16.dw_acc_fp32 = acc16.dx_acc_fp32 = false;
  const auto a = cpu::run(p, acc32, in), b = cpu::run(p, acc16, in);
  CHECK(a.dw != b.dw);  // the flag changes the arithmetic
  auto backend = cpu::make_backend();
  ValidationCase vc{"acc16", p, acc16, CaseSpec{.seed = 5}};
  CHECK(validate_case(*backend, vc).pass);
}

TEST_CASE("CPU backend rejects out-of-range targets and bad configs") {
  Problem p;
  p.family = Family::ce, p.tokens = 4, p.hidden = 0, p.vocab = 10, p.dtype = DType::fp32;
  HostCase in = make_case(p, CaseSpec{.seed = 1});
  in.targets[2] = 10;
  auto backend = cpu::make_backend();
  KernelConfig c;
  c.block_size = 32;
  CHECK_THROWS_AS(backend->run(p, c, in), Error);
  c.threads = 7;
  in.targets[2] = 1;
  CHECK_THROWS_AS(backend->run(p, c, in), Error);
}

TEST_CASE("NaN in the inputs gives a NaN loss, no crash") {
  Problem p;
  p.family = Family::ce, p.tokens = 3, p.hidden = 0, p.vocab = 50, p.dtype = DType::fp32;
  HostCase in = make_case(p, CaseSpec{.seed = 2, .ignore_fraction = 0.0});
  in.logits[60] = NAN;  // row 1
  KernelConfig c;
  c.block_size = 32;
  const auto out = cpu::run(p, c, in);
  CHECK(std::isnan(out.loss));
  CHECK(std::isnan(out.lse[1]));
  CHECK(std::isfinite(out.lse[0]));
}

TEST_CASE("an ignored row adds no loss and no gradient whatever its logits hold") {
  // flce-math.md: ignored tokens contribute no gradient. A NaN logit (either
  // sign) or a row all −inf (a padding row masked out) makes the row's L NaN or
  // −inf, and c·(1 + 2λL) with c = 0 is then NaN, not 0: the zero must come from
  // c itself. Smoothing and z-loss on, so every term of dZ is in play; one pass
  // and chunks merged online.
  for (int64_t v_chunk : {int64_t{0}, int64_t{16}}) {
    CAPTURE(v_chunk);
    Problem p;
    p.family = Family::ce, p.tokens = 4, p.hidden = 0, p.vocab = 50, p.dtype = DType::fp32;
    p.mode = Mode::forward_backward, p.loss.label_smoothing = 0.1, p.loss.z_loss = 1e-4;
    HostCase in = make_case(p, CaseSpec{.seed = 5, .ignore_fraction = 0.0});
    const int64_t ig = p.loss.ignore_index;
    in.targets = {3, ig, ig, 49};
    in.n_valid = 2;
    in.logits[50 + 33] = std::copysign(NAN, -1.0f);
    std::fill(in.logits.begin() + 100, in.logits.begin() + 150, -INFINITY);
    KernelConfig c;
    c.block_size = 16, c.v_chunk = v_chunk;
    const HostOutputs out = cpu::run(p, c, in);
    const RefOutputs ref = reference::run(p, in);
    CHECK(std::isfinite(out.loss));
    CHECK(out.loss == doctest::Approx(ref.loss).epsilon(1e-5));
    CHECK(out.token_loss[1] == 0.0f);
    CHECK(out.token_loss[2] == 0.0f);
    for (int64_t j = 0; j < 50; ++j) {
      CAPTURE(j);
      CHECK(out.grad_logits[static_cast<size_t>(50 + j)] == 0.0f);
      CHECK(out.grad_logits[static_cast<size_t>(100 + j)] == 0.0f);
      CHECK(ref.grad_logits[static_cast<size_t>(50 + j)] == 0.0);
      CHECK(ref.grad_logits[static_cast<size_t>(100 + j)] == 0.0);
      CHECK(std::isfinite(out.grad_logits[static_cast<size_t>(j)]));
      CHECK(std::isfinite(out.grad_logits[static_cast<size_t>(150 + j)]));
    }
  }
}

TEST_CASE("a -inf logit (a masked column): PyTorch's finite loss without smoothing, +inf with it") {
  // 0·(−inf) in the smoothing term made the loss NaN at label smoothing 0, with
  // the LSE and the gradients finite and right (found by the C API probe).
  for (double eps : {0.0, 0.1})
    for (int64_t v_chunk : {int64_t{0}, int64_t{16}}) {  // one pass, and chunks merged online
      CAPTURE(eps);
      CAPTURE(v_chunk);
      Problem p;
      p.family = Family::ce, p.tokens = 3, p.hidden = 0, p.vocab = 50, p.dtype = DType::fp32;
      p.mode = Mode::forward_backward, p.loss.label_smoothing = eps;
      HostCase in = make_case(p, CaseSpec{.seed = 3, .ignore_fraction = 0.0});
      in.targets = {1, 7, 49};
      for (int64_t r = 0; r < p.tokens; ++r) in.logits[static_cast<size_t>(r * 50 + 20)] = -INFINITY;
      KernelConfig c;
      c.block_size = 16, c.v_chunk = v_chunk;
      const HostOutputs out = cpu::run(p, c, in);
      const RefOutputs ref = reference::run(p, in);
      if (eps > 0) {
        CHECK((std::isinf(out.loss) && out.loss > 0));
        CHECK((std::isinf(ref.loss) && ref.loss > 0));
        continue;
      }
      double mean = 0;
      for (int64_t r = 0; r < p.tokens; ++r) {
        double s = 0;  // log Σ exp over the other columns, minus the target's logit
        for (int64_t j = 0; j < 50; ++j)
          if (j != 20) s += std::exp(double(in.logits[static_cast<size_t>(r * 50 + j)]));
        const double want = std::log(s) - in.logits[static_cast<size_t>(r * 50 + in.targets[static_cast<size_t>(r)])];
        CHECK(out.token_loss[static_cast<size_t>(r)] == doctest::Approx(want).epsilon(1e-5));
        CHECK(ref.token_loss[static_cast<size_t>(r)] == doctest::Approx(want).epsilon(1e-12));
        CHECK(out.grad_logits[static_cast<size_t>(r * 50 + 20)] == 0.0f);
        mean += want / 3;
      }
      CHECK(out.loss == doctest::Approx(mean).epsilon(1e-5));
      for (float g : out.grad_logits) CHECK(std::isfinite(g));
    }
}

TEST_CASE("large logits and the z-loss keep fp32's precision: m and log d apart, 2λL·p after p − 1") {
  // L = m + log d as one fp32 number moved every loss by half an ulp of |L|
  // and every p relatively (logits near 1e7: 5% of the loss; near 3e38 a loss
  // of 0, and the fp64 reference's too), and (1 + 2λL)·p rounded the z-loss
  // term to an ulp of 1 first (5% of the gradient at V = 1, λ = 1e-6): a
  // helper's probe, sixty-second session. PyTorch's fp32 keeps all of these
  // within a few 1e-8.
  for (double offset : {1e6, 1e7, 3e38})
    for (int64_t v_chunk : {int64_t{0}, int64_t{256}})  // one pass, and chunks merged online
      for (double eps : {0.0, 0.1}) {
        CAPTURE(offset);
        CAPTURE(v_chunk);
        CAPTURE(eps);
        Problem p;
        p.family = Family::ce, p.tokens = 16, p.hidden = 0, p.vocab = 1000, p.dtype = DType::fp32;
        p.mode = Mode::forward_backward, p.loss.label_smoothing = eps;
        HostCase in = make_case(p, CaseSpec{.seed = 5, .logit_scale = 1.0, .ignore_fraction = 0.0});
        for (float& z : in.logits) z = static_cast<float>(z + offset);  // the inputs themselves are fp32
        KernelConfig c;
        c.block_size = 128, c.v_chunk = v_chunk;
        const HostOutputs out = cpu::run(p, c, in);
        const RefOutputs ref = reference::run(p, in);
        CHECK(compare(out.token_loss.data(), ref.token_loss.data(), ref.token_loss.size(), 0, 0).rel_l2 < 1e-6);
        CHECK(compare(out.grad_logits.data(), ref.grad_logits.data(), ref.grad_logits.size(), 0, 0).rel_l2 < 1e-6);
      }
  for (double lambda : {1e-6, 1e-4}) {
    CAPTURE(lambda);
    Problem p;
    p.family = Family::ce, p.tokens = 64, p.hidden = 0, p.vocab = 1, p.dtype = DType::fp32;
    p.mode = Mode::forward_backward, p.loss.z_loss = lambda;
    const HostCase in = make_case(p, CaseSpec{.seed = 6, .ignore_fraction = 0.0});  // V = 1: p = 1, dZ = 2λz·c
    KernelConfig c;
    c.block_size = 128;
    const HostOutputs out = cpu::run(p, c, in);
    const RefOutputs ref = reference::run(p, in);
    CHECK(compare(out.grad_logits.data(), ref.grad_logits.data(), ref.grad_logits.size(), 0, 0).rel_l2 < 1e-6);
  }
}

TEST_CASE("confident rows keep their loss and target gradient wherever the target sits in the row") {
  // Σ exp(ẑ − m) in fp32 lost every term under half an ulp of 1 once the max's
  // term was in: with the target first and the others 16.7 below it, a loss of
  // 0 against 1023·e^−16.7 = 5.7e-5 and no gradient at the target (a helper's
  // probe, sixty-third session). Targets first, in the middle and last, one
  // block and several, one pass and chunks.
  for (int64_t target : {int64_t{0}, int64_t{500}, int64_t{1023}})
    for (int bs : {128, 2048})
      for (int64_t v_chunk : {int64_t{0}, int64_t{256}}) {
        CAPTURE(target);
        CAPTURE(bs);
        CAPTURE(v_chunk);
        Problem p;
        p.family = Family::ce, p.tokens = 4, p.hidden = 0, p.vocab = 1024, p.dtype = DType::fp32;
        p.mode = Mode::forward_backward;
        HostCase in = make_case(p, CaseSpec{.seed = 8, .logit_scale = 1.0, .ignore_fraction = 0.0});
        for (int64_t r = 0; r < p.tokens; ++r) {
          in.targets[static_cast<size_t>(r)] = target;
          for (int64_t j = 0; j < p.vocab; ++j)  // rows 0, 1: flat; 2, 3: N(0, 1) below 18
            in.logits[static_cast<size_t>(r * p.vocab + j)] =
                j == target ? 18.0f : r < 2 ? 1.3f : in.logits[static_cast<size_t>(r * p.vocab + j)];
        }
        KernelConfig c;
        c.block_size = bs, c.v_chunk = v_chunk;
        const HostOutputs out = cpu::run(p, c, in);
        const RefOutputs ref = reference::run(p, in);
        for (int64_t r = 0; r < p.tokens; ++r) {
          CAPTURE(r);
          const auto i = static_cast<size_t>(r), t = static_cast<size_t>(r * p.vocab + target);
          CHECK(ref.token_loss[i] > 1e-5);
          CHECK(out.token_loss[i] == doctest::Approx(ref.token_loss[i]).epsilon(1e-4));
          CHECK(out.grad_logits[t] == doctest::Approx(ref.grad_logits[t]).epsilon(1e-2));  // 1/d − 1 in fp32
        }
        CHECK(compare(out.grad_logits.data(), ref.grad_logits.data(), ref.grad_logits.size(), 0, 0).rel_l2 < 1e-4);
      }
}

TEST_CASE("validate's truth: fp64 for small shapes, the GPU reference beyond, never a silent substitute") {
  auto backend = cpu::make_backend();
  const auto small = default_matrix(11);
  for (const auto& vc : small) CHECK(fp64_cost(vc.problem) < kFp64Budget);
  Problem llama;
  llama.family = Family::flce, llama.tokens = 4096, llama.hidden = 4096, llama.vocab = 128256;
  CHECK(fp64_cost(llama) > kFp64Budget);

  // The GPU-only cases: every flce bf16/fp16 case again under impl fused, every
  // chunked ce case again with its row held by a cluster and again spread over
  // the GPU (segments of one tile), and the 64-bit case, one tile of N·V > 2^31
  // logits.
  const auto with_gpu = default_matrix(11, true);
  const auto fused = std::count_if(with_gpu.begin(), with_gpu.end(),
                                   [](const ValidationCase& vc) { return vc.config.impl == KernelConfig::Impl::fused; });
  CHECK(fused == 2 * 14 * 2);  // dtypes × option sets × (one pass, chunked)
  auto segments = [](const ValidationCase& vc) {
    const Problem& p = vc.problem;
    return p.family == Family::ce && vc.config.fused && vc.config.v_chunk > 0
               ? (p.vocab + vc.config.v_chunk - 1) / vc.config.v_chunk
               : int64_t{0};
  };
  const auto cluster = std::count_if(with_gpu.begin(), with_gpu.end(), [&](const ValidationCase& vc) {
    return segments(vc) > 0 && segments(vc) <= kCeMaxClusterBlocks;
  });
  const auto spread = std::count_if(with_gpu.begin(), with_gpu.end(), [&](const ValidationCase& vc) {
    return segments(vc) > kCeMaxClusterBlocks && vc.config.v_chunk == vc.config.block_size;
  });
  CHECK(cluster == 3 * 14 - 2);  // dtypes × option sets, less fp32's two 16-bit-only cases
  CHECK(spread == cluster);
  for (const auto& vc : with_gpu) CHECK_NOTHROW(validate_config(vc.problem, vc.config));
  REQUIRE(with_gpu.size() == small.size() + static_cast<size_t>(fused + cluster + spread) + 1);
  CHECK_THROWS_AS(backend->check(with_gpu[small.size()].problem, with_gpu[small.size()].config), Error);
  const ValidationCase& big = with_gpu.back();
  CHECK(big.problem.tokens * big.problem.vocab > int64_t{INT32_MAX});
  CHECK(big.config.row_chunk == big.problem.tokens);
  CHECK(big.config.v_chunk_for(big.problem) == big.problem.vocab);

  CHECK(parse_truth("gpu") == Truth::gpu);
  CHECK(parse_truth("auto") == Truth::automatic);
  CHECK_THROWS_AS(parse_truth("fp32"), Error);

  const CaseResult r = validate_case(*backend, small.front());
  CHECK(r.truth == "fp64");
  CHECK(r.reference_check == "");
  if (cuda_device_count() == 0) {
    const CaseResult g = validate_case(*backend, small.front(), Truth::gpu);
    CHECK_FALSE(g.pass);
    CHECK(g.error.find("GPU reference") != std::string::npos);
  }
}
