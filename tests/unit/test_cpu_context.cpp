// The C API's CPU context (celtune_create_cpu): host pointers in the caller's
// dtype, the same resolution, and results identical to the CPU backend's, since
// it is the same algorithm behind a conversion to and from the dtype.
#include <doctest/doctest.h>

#include <bit>
#include <csignal>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include <omp.h>
#include <sys/wait.h>
#include <unistd.h>

#include "celtune/celtune.h"
#include "kernels/cpu/cpu_backend.hpp"
#include "model/config.hpp"
#include "model/numerics.hpp"

using namespace celtune;

namespace {

std::vector<uint16_t> to_bits(const std::vector<float>& v, DType t) {
  std::vector<uint16_t> b(v.size());
  for (size_t k = 0; k < v.size(); ++k) b[k] = float_to_half_bits(t, v[k]);
  return b;
}
std::vector<float> from_bits(const std::vector<uint16_t>& b, DType t) {
  std::vector<float> v(b.size());
  for (size_t k = 0; k < b.size(); ++k) v[k] = half_bits_to_float(t, b[k]);
  return v;
}

// An fp32 forward+backward flce call on host buffers: x 0.5, w 0.25, targets
// i mod V, every output 7 (so an untouched one shows), mean reduction.
struct Fp32Flce {
  int64_t N, H, V;
  std::vector<float> x, w, dx, dw, tl, lse;
  std::vector<int64_t> t;
  float loss = 7.0f, g = 1.0f;
  Fp32Flce(int64_t n, int64_t h, int64_t v)
      : N(n), H(h), V(v), x(size_t(n * h), 0.5f), w(size_t(v * h), 0.25f), dx(size_t(n * h), 7.0f),
        dw(size_t(v * h), 7.0f), tl(size_t(n), 7.0f), lse(size_t(n), 7.0f), t(size_t(n)) {
    for (int64_t i = 0; i < n; ++i) t[size_t(i)] = i % v;
  }
  celtune_flce_args args() {
    celtune_flce_args a{};
    a.tokens = N, a.hidden = H, a.vocab = V, a.dtype = CELTUNE_FP32, a.target_dtype = CELTUNE_INT64;
    celtune_loss_defaults(&a.options);
    a.mode = CELTUNE_FORWARD_BACKWARD;
    a.x = x.data(), a.w = w.data(), a.targets = t.data(), a.grad_scale = &g;
    a.loss = &loss, a.token_loss = tl.data(), a.lse = lse.data(), a.dx = dx.data(), a.dw = dw.data();
    return a;
  }
};

}  // namespace

TEST_CASE("CPU context: flce through the C API equals the CPU backend, bit for bit") {
  const char* cfg = R"({"v_chunk": 64, "row_chunk": 8, "block_size": 32})";  // two passes, several row chunks
  for (auto [dtype, cdt] : {std::pair{DType::bf16, CELTUNE_BF16}, std::pair{DType::fp32, CELTUNE_FP32}}) {
    for (auto red : {Reduction::mean, Reduction::none}) {
      CAPTURE(to_string(dtype));
      Problem p;
      p.family = Family::flce, p.tokens = 19, p.hidden = 16, p.vocab = 150, p.dtype = dtype, p.bias = true;
      p.loss.reduction = red, p.loss.label_smoothing = 0.1, p.loss.softcap = 20;
      p.mode = Mode::forward_backward;
      HostCase in = make_case(p, CaseSpec{.seed = 7});
      const HostOutputs want = cpu::run(p, parse_config_json(cfg), in);

      celtune_context* ctx = nullptr;
      REQUIRE(celtune_create_cpu(&ctx, "") == CELTUNE_OK);
      CHECK(celtune_context_device(ctx) == -1);
      const auto N = static_cast<size_t>(p.tokens), H = static_cast<size_t>(p.hidden), V = static_cast<size_t>(p.vocab);
      std::vector<uint16_t> x16, w16, b16, dx16(N * H), dw16(V * H), db16(V);
      std::vector<float> dx32(N * H), dw32(V * H), db32(V);
      const bool half = dtype != DType::fp32;
      if (half) x16 = to_bits(in.x, dtype), w16 = to_bits(in.w, dtype), b16 = to_bits(in.b, dtype);
      float loss = 0;
      std::vector<float> tl(N), lse(N);
      int64_t bad = 7;
      celtune_flce_args a{};
      a.tokens = p.tokens, a.hidden = p.hidden, a.vocab = p.vocab, a.dtype = cdt, a.target_dtype = CELTUNE_INT64;
      celtune_loss_defaults(&a.options);
      a.options.reduction = red == Reduction::mean ? CELTUNE_MEAN : CELTUNE_NONE;
      a.options.label_smoothing = 0.1f, a.options.softcap = 20;
      a.mode = CELTUNE_FORWARD_BACKWARD;
      a.x = half ? static_cast<const void*>(x16.data()) : in.x.data();
      a.w = half ? static_cast<const void*>(w16.data()) : in.w.data();
      a.bias = half ? static_cast<const void*>(b16.data()) : in.b.data();
      a.targets = in.targets.data(), a.grad_scale = &in.grad_scale, a.grad_tokens = in.grad_tokens.data();
      a.loss = &loss, a.token_loss = tl.data(), a.lse = lse.data(), a.bad_target = &bad;
      a.dx = half ? static_cast<void*>(dx16.data()) : dx32.data();
      a.dw = half ? static_cast<void*>(dw16.data()) : dw32.data();
      a.db = half ? static_cast<void*>(db16.data()) : db32.data();
      a.config_json = cfg;
      REQUIRE_MESSAGE(celtune_flce(ctx, &a, nullptr) == CELTUNE_OK, celtune_last_error(ctx));
      CHECK(bad == -1);
      CHECK(loss == want.loss);
      CHECK(tl == want.token_loss);
      CHECK(lse == want.lse);
      CHECK((half ? from_bits(dx16, dtype) : dx32) == want.dx);
      CHECK((half ? from_bits(dw16, dtype) : dw32) == want.dw);
      CHECK((half ? from_bits(db16, dtype) : db32) == want.db);

      // A target outside [0, V) is reported and treated as ignored, as on the GPU.
      in.targets[3] = 1000;
      REQUIRE(celtune_flce(ctx, &a, nullptr) == CELTUNE_OK);
      CHECK(bad == 3);
      CHECK(tl[3] == 0.0f);
      // Missing host pointers are usage errors with the name, not crashes, and
      // a refused call writes nothing (the loss and bad_target once were).
      a.dw = nullptr;
      loss = -1.0f, bad = -7;
      CHECK(celtune_flce(ctx, &a, nullptr) == CELTUNE_ERROR_INVALID_ARGUMENT);
      CHECK(std::string(celtune_last_error(ctx)).find("dw") != std::string::npos);
      CHECK(loss == -1.0f);
      CHECK(bad == -7);
      celtune_destroy(ctx);
    }
  }
}

TEST_CASE("CPU context: a process forked after CPU calls makes them too (the forking thread's OpenMP pool)") {
  // The child inherits this thread's OpenMP pool without its worker threads:
  // libgomp's next parallel region from the thread waited for them forever (a
  // helper's probe; Python's multiprocessing forks so). Four threads make a
  // pool with workers on any machine.
  const int threads = omp_get_max_threads();
  omp_set_num_threads(4);
  Fp32Flce f(64, 32, 2000);
  for (size_t i = 0; i < f.x.size(); ++i) f.x[i] = std::sin(0.37f * float(i));
  for (size_t i = 0; i < f.w.size(); ++i) f.w[i] = std::cos(0.11f * float(i));
  celtune_flce_args a = f.args();
  celtune_context* ctx = nullptr;
  REQUIRE(celtune_create_cpu(&ctx, "") == CELTUNE_OK);
  REQUIRE(celtune_flce(ctx, &a, nullptr) == CELTUNE_OK);
  const float parent_loss = f.loss;
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::alarm(60);  // hung: SIGALRM ends the child, and the parent says so
    celtune_context* fresh = nullptr;
    float l1 = -1, l2 = -1;
    a.loss = &l1;
    bool ok = celtune_flce(ctx, &a, nullptr) == CELTUNE_OK && l1 == parent_loss;
    a.loss = &l2;
    ok = ok && celtune_create_cpu(&fresh, "") == CELTUNE_OK && celtune_flce(fresh, &a, nullptr) == CELTUNE_OK &&
         l2 == parent_loss;
    ::_exit(ok ? 0 : 1);
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  CHECK_MESSAGE(!WIFSIGNALED(status), "the child was ended by signal " << WTERMSIG(status) << " (" << SIGALRM
                                                                         << ": it hung)");
  CHECK_MESSAGE((WIFEXITED(status) && WEXITSTATUS(status) == 0), "the child's calls failed or differed");
  celtune_destroy(ctx);
  omp_set_num_threads(threads);
}

TEST_CASE("CPU context: ce in place, config lookup with tags, struct sizes for bindings") {
  celtune_context* ctx = nullptr;
  REQUIRE(celtune_create_cpu(&ctx, "") == CELTUNE_OK);
  const int64_t N = 5, V = 40;
  std::vector<float> z(N * V);
  for (size_t k = 0; k < z.size(); ++k) z[k] = static_cast<float>((k * 37) % 11) - 5.0f;
  std::vector<int64_t> t = {0, 39, -100, 7, 8};
  float g = 2.0f, loss = 0;
  std::vector<float> tl(N), lse(N);
  celtune_ce_args a{};
  a.tokens = N, a.vocab = V, a.dtype = CELTUNE_FP32, a.target_dtype = CELTUNE_INT64;
  celtune_loss_defaults(&a.options);
  a.mode = CELTUNE_FORWARD_BACKWARD;
  a.logits = z.data(), a.dz = z.data(), a.targets = t.data(), a.grad_scale = &g;
  a.loss = &loss, a.token_loss = tl.data(), a.lse = lse.data();
  char json[512], tag[32];
  REQUIRE(celtune_ce_config(ctx, &a, json, sizeof json, tag, sizeof tag) == CELTUNE_OK);
  CHECK(std::string(tag) == "default");
  REQUIRE(celtune_ce(ctx, &a, nullptr) == CELTUNE_OK);
  // dZ rows sum to zero (softmax minus one-hot, times g/n_valid); the ignored row is zero.
  for (int64_t i = 0; i < N; ++i) {
    double s = 0;
    for (int64_t j = 0; j < V; ++j) s += z[static_cast<size_t>(i * V + j)];
    CHECK(std::abs(s) < 1e-5);
  }
  CHECK(z[2 * V] == 0.0f);
  CHECK(loss > 0);
  a.vocab = -1;
  CHECK(celtune_ce(ctx, &a, nullptr) == CELTUNE_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(celtune_last_error(ctx)).find("vocab") != std::string::npos);
  celtune_destroy(ctx);
  CHECK(celtune_create_cpu(nullptr, nullptr) == CELTUNE_ERROR_INVALID_ARGUMENT);
  CHECK(celtune_sizeof("celtune_flce_args") == sizeof(celtune_flce_args));
  CHECK(celtune_sizeof("celtune_ce_args") == sizeof(celtune_ce_args));
  CHECK(celtune_sizeof("celtune_loss_options") == sizeof(celtune_loss_options));
  CHECK(celtune_sizeof("nope") == 0);
  CHECK(celtune_sizeof(nullptr) == 0);
}

TEST_CASE("CPU context: an output sharing memory with another buffer is refused, every output untouched") {
  // The header allows only ce's dz == logits. A loss pointed at token_loss
  // returned status 0 with the loss in token_loss[0] (a helper's C API probe,
  // sixty-second session); on a GPU a dX over X is read back as X.
  celtune_context* ctx = nullptr;
  REQUIRE(celtune_create_cpu(&ctx, "") == CELTUNE_OK);
  Fp32Flce f(6, 8, 40);
  const int64_t N = f.N, V = f.V;
  auto &x = f.x, &dx = f.dx, &dw = f.dw, &tl = f.tl, &lse = f.lse;
  auto& t = f.t;
  float &loss = f.loss, &g = f.g;
  const celtune_flce_args a = f.args();
  auto refused = [&](celtune_flce_args b, const char* what) {
    CAPTURE(what);
    CHECK(celtune_flce(ctx, &b, nullptr) == CELTUNE_ERROR_INVALID_ARGUMENT);
    CHECK(std::string(celtune_last_error(ctx)).find(what) != std::string::npos);
  };
  celtune_flce_args b = a;
  b.loss = tl.data() + 2;  // inside token_loss
  refused(b, "overlaps");
  b = a, b.dx = x.data();
  refused(b, "dx overlaps x");
  b = a, b.lse = reinterpret_cast<float*>(t.data());
  refused(b, "lse overlaps targets");
  b = a, b.dw = dx.data() + 4;  // partly over dx
  refused(b, "dw overlaps dx");
  for (float v : tl) CHECK(v == 7.0f);
  for (float v : dx) CHECK(v == 7.0f);
  for (float v : dw) CHECK(v == 7.0f);
  CHECK(loss == 7.0f);
  b = a, b.w = x.data(), b.vocab = N;  // inputs may share memory: w is x (tied)
  CHECK(celtune_flce(ctx, &b, nullptr) == CELTUNE_OK);
  b = a, b.mode = CELTUNE_FORWARD, b.dx = x.data();  // forward writes no dX: its pointer is not read
  CHECK(celtune_flce(ctx, &b, nullptr) == CELTUNE_OK);
  // ce: dz equal to the logits is in place; dz over part of them is refused.
  std::vector<float> z(N * V, 1.0f);
  celtune_ce_args c{};
  c.tokens = N, c.vocab = V, c.dtype = CELTUNE_FP32, c.target_dtype = CELTUNE_INT64;
  celtune_loss_defaults(&c.options);
  c.mode = CELTUNE_FORWARD_BACKWARD;
  c.logits = z.data(), c.dz = z.data() + V, c.targets = t.data(), c.grad_scale = &g;
  c.loss = &loss, c.token_loss = tl.data(), c.lse = lse.data();
  CHECK(celtune_ce(ctx, &c, nullptr) == CELTUNE_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(celtune_last_error(ctx)).find("dz overlaps logits") != std::string::npos);
  for (float v : z) CHECK(v == 1.0f);
  c.dz = z.data();
  CHECK(celtune_ce(ctx, &c, nullptr) == CELTUNE_OK);
  // A message echoing bytes that are not UTF-8 hands them back escaped, as the CLI prints them.
  c.config_json = "{\"v_chunk\": \"\xff\xfe\"}";
  CHECK(celtune_ce(ctx, &c, nullptr) == CELTUNE_ERROR_INVALID_ARGUMENT);
  const std::string said = celtune_last_error(ctx);
  CHECK(said.find('\xff') == std::string::npos);
  CHECK(said.find("\\xff") != std::string::npos);
  celtune_destroy(ctx);
}

TEST_CASE("CPU context: a config the CPU cannot run is refused by the config query, as the call refuses it") {
  // The query once returned status 0 and the fused config, tagged explicit (or
  // env), and only the kernel call then failed: explain() and celtune lookup
  // must not present as the answer a config that will not run.
  celtune_context* ctx = nullptr;
  REQUIRE(celtune_create_cpu(&ctx, "") == CELTUNE_OK);
  celtune_flce_args a{};
  a.tokens = 8, a.hidden = 16, a.vocab = 300, a.dtype = CELTUNE_BF16, a.target_dtype = CELTUNE_INT64;
  celtune_loss_defaults(&a.options);
  a.mode = CELTUNE_FORWARD_BACKWARD;
  char json[512] = "untouched", tag[32] = "untouched";
  a.config_json = "{\"impl\":\"fused\"}";
  CHECK(celtune_flce_config(ctx, &a, json, sizeof json, tag, sizeof tag) == CELTUNE_ERROR_INVALID_ARGUMENT);
  std::string err = celtune_last_error(ctx);
  CHECK(err.find("config_json cannot run flce:N8:H16:V300") != std::string::npos);
  CHECK(err.find("impl fused") != std::string::npos);
  CHECK(std::string(json) == "untouched");  // nothing written on refusal
  // The call, with every buffer it needs (so that the config is what it refuses).
  std::vector<uint16_t> x(8 * 16, 0x3f80), w(300 * 16, 0x3f80), dx(x.size()), dw(w.size());  // bf16 1.0
  std::vector<int64_t> y(8, 1);
  std::vector<float> tl(8), lse(8);
  float g = 1.0f, loss = 0.0f;
  int64_t bad = 0;
  a.x = x.data(), a.w = w.data(), a.targets = y.data(), a.grad_scale = &g, a.loss = &loss;
  a.token_loss = tl.data(), a.lse = lse.data(), a.dx = dx.data(), a.dw = dw.data(), a.bad_target = &bad;
  CHECK(celtune_flce(ctx, &a, nullptr) == CELTUNE_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(celtune_last_error(ctx)).find("impl fused") != std::string::npos);
  a.config_json = nullptr;
  REQUIRE(celtune_flce(ctx, &a, nullptr) == CELTUNE_OK);  // the same buffers run the default
  // The same config from the environment, named as such.
  a.config_json = nullptr;
  REQUIRE(::setenv("CELTUNE_CONFIG", "{\"impl\":\"fused\"}", 1) == 0);
  CHECK(celtune_flce_config(ctx, &a, json, sizeof json, tag, sizeof tag) == CELTUNE_ERROR_INVALID_ARGUMENT);
  err = celtune_last_error(ctx);
  ::unsetenv("CELTUNE_CONFIG");
  CHECK(err.find("CELTUNE_CONFIG cannot run flce:N8:H16:V300") != std::string::npos);
  // A config the CPU runs is still answered as given.
  a.config_json = "{\"block_size\":512}";
  REQUIRE(celtune_flce_config(ctx, &a, json, sizeof json, tag, sizeof tag) == CELTUNE_OK);
  CHECK(std::string(tag) == "explicit");
  CHECK(std::string(json).find("\"block_size\":512") != std::string::npos);
  celtune_destroy(ctx);
}

TEST_CASE("celtune_scale on a CPU context: the product in fp32, rounded once to the dtype; bad arguments refused") {
  celtune_context* ctx = nullptr;
  REQUIRE(celtune_create_cpu(&ctx, "") == CELTUNE_OK);
  const std::vector<float> v = {1.0f, -2.5f, 3.1415926f, 65504.0f, 1e-7f, -0.0f, 0.3f};
  const float g = 0.37f;
  for (const DType t : {DType::bf16, DType::fp16}) {
    CAPTURE(to_string(t));
    const auto src = to_bits(v, t);
    std::vector<uint16_t> dst(src.size(), 0xffff);
    REQUIRE(celtune_scale(ctx, dst.data(), src.data(), static_cast<int64_t>(src.size()),
                          t == DType::bf16 ? CELTUNE_BF16 : CELTUNE_FP16, &g, nullptr) == CELTUNE_OK);
    const auto back = from_bits(src, t);
    for (size_t k = 0; k < src.size(); ++k) CHECK(dst[k] == to_bits({back[k] * g}, t)[0]);
    // fp16's 65504 · 0.37 stays finite; in place gives the same bits.
    auto inplace = src;
    REQUIRE(celtune_scale(ctx, inplace.data(), inplace.data(), static_cast<int64_t>(src.size()),
                          t == DType::bf16 ? CELTUNE_BF16 : CELTUNE_FP16, &g, nullptr) == CELTUNE_OK);
    CHECK(inplace == dst);
  }
  std::vector<float> f = v, out(v.size());
  REQUIRE(celtune_scale(ctx, out.data(), f.data(), static_cast<int64_t>(f.size()), CELTUNE_FP32, &g, nullptr) ==
          CELTUNE_OK);
  for (size_t k = 0; k < f.size(); ++k) CHECK(out[k] == f[k] * g);
  // An upstream gradient of inf or NaN (a sum over no valid tokens divided by
  // their count) leaves zeros (ignored tokens' gradients) zero, as PyTorch
  // does, where 0·inf is NaN; every other element takes the product.
  for (const float bad : {std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
    CAPTURE(bad);
    REQUIRE(celtune_scale(ctx, out.data(), f.data(), static_cast<int64_t>(f.size()), CELTUNE_FP32, &bad, nullptr) ==
            CELTUNE_OK);
    for (size_t k = 0; k < f.size(); ++k) {
      if (f[k] == 0.0f)
        CHECK(std::bit_cast<uint32_t>(out[k]) == std::bit_cast<uint32_t>(f[k]));
      else
        CHECK(std::bit_cast<uint32_t>(out[k]) == std::bit_cast<uint32_t>(f[k] * bad));
    }
    const auto src = to_bits({0.0f, -0.0f, 1.5f}, DType::bf16);
    std::vector<uint16_t> dst(3);
    REQUIRE(celtune_scale(ctx, dst.data(), src.data(), 3, CELTUNE_BF16, &bad, nullptr) == CELTUNE_OK);
    CHECK(dst[0] == src[0]);
    CHECK(dst[1] == src[1]);
    CHECK(!std::isfinite(from_bits(dst, DType::bf16)[2]));
  }
  // In place by 1 leaves the memory alone: a signalling NaN stays one, where
  // the product by 1 quietens it (out of place it does).
  {
    const float one = 1.0f;
    std::vector<uint32_t> bits = {0x7f800001u, 0x3f800000u, 0x00000001u, 0x80000000u};
    const auto before = bits;
    REQUIRE(celtune_scale(ctx, bits.data(), bits.data(), 4, CELTUNE_FP32, &one, nullptr) == CELTUNE_OK);
    CHECK(bits == before);
    std::vector<uint32_t> copy(4);
    REQUIRE(celtune_scale(ctx, copy.data(), bits.data(), 4, CELTUNE_FP32, &one, nullptr) == CELTUNE_OK);
    CHECK(copy[0] != before[0]);
    CHECK(std::isnan(std::bit_cast<float>(copy[0])));
    CHECK(copy[1] == before[1]);
  }
  // Nothing to do: no pointer is needed. Refused: n < 0, a null pointer, a byte
  // count past INT64_MAX, a dtype outside the enum.
  CHECK(celtune_scale(ctx, nullptr, nullptr, 0, CELTUNE_BF16, nullptr, nullptr) == CELTUNE_OK);
  CHECK(celtune_scale(ctx, out.data(), f.data(), -1, CELTUNE_FP32, &g, nullptr) == CELTUNE_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(celtune_last_error(ctx)).find("n must be >= 0") != std::string::npos);
  CHECK(celtune_scale(ctx, out.data(), f.data(), 3, CELTUNE_FP32, nullptr, nullptr) == CELTUNE_ERROR_INVALID_ARGUMENT);
  CHECK(celtune_scale(ctx, out.data(), f.data(), INT64_MAX / 2, CELTUNE_FP32, &g, nullptr) ==
        CELTUNE_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(celtune_last_error(ctx)).find("overflow") != std::string::npos);
  CHECK(celtune_scale(ctx, out.data(), f.data(), 3, static_cast<celtune_dtype>(7), &g, nullptr) ==
        CELTUNE_ERROR_INVALID_ARGUMENT);
  CHECK(celtune_scale(ctx, nullptr, nullptr, 0, static_cast<celtune_dtype>(7), nullptr, nullptr) ==
        CELTUNE_ERROR_INVALID_ARGUMENT);  // the dtype is checked before n == 0 returns
  CHECK(celtune_scale(ctx, nullptr, f.data(), 3, CELTUNE_FP32, &g, nullptr) == CELTUNE_ERROR_INVALID_ARGUMENT);
  CHECK(celtune_scale(ctx, out.data(), nullptr, 3, CELTUNE_FP32, &g, nullptr) == CELTUNE_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(celtune_last_error(ctx)).find("null") != std::string::npos);
  CHECK(celtune_scale(nullptr, out.data(), f.data(), 3, CELTUNE_FP32, &g, nullptr) == CELTUNE_ERROR_INVALID_ARGUMENT);
  // In place or apart, as the header says: dst one element past src scaled the
  // elements already scaled (1 2 4 8 …, status 0). Either way round is refused
  // and nothing is written; ranges that only touch are apart.
  std::vector<float> ones(8, 1.0f);
  const float two = 2.0f;
  CHECK(celtune_scale(ctx, ones.data() + 1, ones.data(), 7, CELTUNE_FP32, &two, nullptr) ==
        CELTUNE_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(celtune_last_error(ctx)).find("overlap") != std::string::npos);
  CHECK(celtune_scale(ctx, ones.data(), ones.data() + 1, 7, CELTUNE_FP32, &two, nullptr) ==
        CELTUNE_ERROR_INVALID_ARGUMENT);
  CHECK(ones == std::vector<float>(8, 1.0f));
  REQUIRE(celtune_scale(ctx, ones.data() + 4, ones.data(), 4, CELTUNE_FP32, &two, nullptr) == CELTUNE_OK);
  CHECK(ones == std::vector<float>{1, 1, 1, 1, 2, 2, 2, 2});
  celtune_destroy(ctx);
}
