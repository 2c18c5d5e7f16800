// GPU suite: both CUDA families against the fp64 reference on small shapes, and
// against the cuBLAS+softmax GPU reference (itself checked against fp64) on large ones.
// Exits 77 (meson's "skipped") where there is no CUDA device.
//
// Method (METHOD.md): the backend poisons every output with NaN before each run,
// so an element never written fails as non-finite; every check draws fresh random
// inputs from its own seed, never zeros; tolerances are validate's, per dtype
// (validate/validate.cpp says why each number is what it is): a kernel may be no
// worse than the unfused low-precision path plus a few units of the dtype's
// rounding, and never beyond an absolute bound.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "kernels/backend.hpp"
#include "kernels/flce/sm90/variants.hpp"
#include "kernels/reference/fp64.hpp"
#include "model/error.hpp"
#include "validate/validate.hpp"

using namespace celtune;

namespace {
std::unique_ptr<Backend>& gpu() {
  static std::unique_ptr<Backend> b = open_backend("0");
  return b;
}

// impl fused: the CUTLASS statistics GEMM, the merge, and dW in place on CUTLASS.
// Skips (with the reason) where the device or build cannot run it.
bool fused_runs(const Problem& p, const KernelConfig& c) {
  std::string why;
  if (gpu()->supports(p, c, &why)) return true;
  MESSAGE("impl fused not run: " << why);
  return false;
}

uint64_t next_seed() {
  static uint64_t s = 0x5eed;
  return ++s;
}

// A ce case of `tokens` rows of `vocab` logits at tiles of 2048 with 256 threads
// (the fused ce default's), with the next seed; callers set the rest.
ValidationCase ce_case(int64_t tokens, int64_t vocab, DType dt, Mode mode, const char* name) {
  ValidationCase vc;
  Problem& p = vc.problem;
  p.family = Family::ce, p.tokens = tokens, p.hidden = 0, p.vocab = vocab, p.dtype = dt, p.mode = mode;
  vc.config.block_size = 2048, vc.config.threads = 256;
  vc.spec.seed = next_seed();
  vc.name = name;
  return vc;
}

CaseResult expect_pass(const ValidationCase& vc) {
  const CaseResult r = validate_case(*gpu(), vc);
  CAPTURE(vc.name);
  CAPTURE(vc.problem.key());
  CAPTURE(to_string(vc.config));
  CAPTURE(vc.spec.seed);
  CAPTURE(r.error);
  CHECK(r.error.empty());
  CHECK(r.deterministic);
  for (const auto& o : r.outputs) {
    CAPTURE(o.name);
    CAPTURE(o.why);
    CAPTURE(o.kernel.rel_l2);
    CAPTURE(o.baseline.rel_l2);
    CHECK(o.pass);
  }
  return r;
}

// Every block size of the compiled table, one pass and chunked, for one family and
// dtype. Split into test cases per family and dtype so that compute-sanitizer can
// take them one at a time: racecheck over all of them at once outlasts a device call.
void check_block_table(Family fam, DType dt) {
  for (int threads : {128, 256})
    for (int elems : {1, 2, 4, 8, 16, 32})
      for (bool chunked : {false, true}) {
        ValidationCase vc;
        Problem& p = vc.problem;
        p.family = fam, p.tokens = 37, p.hidden = fam == Family::flce ? 64 : 0, p.vocab = 10007, p.dtype = dt;
        p.loss.label_smoothing = 0.05;
        p.bias = fam == Family::flce && elems % 4 == 0;
        KernelConfig& c = vc.config;
        c.threads = threads, c.block_size = threads * elems;
        c.v_chunk = chunked ? std::max(2048, c.block_size) : 0;
        c.row_chunk = fam == Family::flce ? 16 : 0;  // 37 rows: chunks of 16, 16, 5
        c.fused = !chunked && elems >= 4;  // the row-on-chip path, one pass only
        vc.spec.seed = next_seed();
        vc.name = "table";
        expect_pass(vc);
      }
}

// bf16/fp16 dW accumulated in the output dtype over 16 row chunks: the rounding
// the default config accepts for memory must stay within tolerance.
void check_dw_in_dtype(DType dt) {
  ValidationCase vc;
  Problem& p = vc.problem;
  p.family = Family::flce, p.tokens = 2048, p.hidden = 256, p.vocab = 8000, p.dtype = dt;
  vc.config = default_config(p);
  vc.config.row_chunk = 128, vc.config.dw_acc_fp32 = false;
  vc.spec.seed = next_seed();
  vc.name = "dw-out-16-chunks";
  expect_pass(vc);
}
}  // namespace

TEST_CASE("default validation matrix on the GPU (every option, dtype, odd shapes, edges)") {
  for (const auto& vc : default_matrix(next_seed())) expect_pass(vc);
}

TEST_CASE("every block size of the compiled table: ce, every dtype") {
  for (DType dt : {DType::bf16, DType::fp16, DType::fp32}) check_block_table(Family::ce, dt);
}
TEST_CASE("every block size of the compiled table: flce bf16") { check_block_table(Family::flce, DType::bf16); }
TEST_CASE("every block size of the compiled table: flce fp16") { check_block_table(Family::flce, DType::fp16); }
TEST_CASE("every block size of the compiled table: flce fp32") { check_block_table(Family::flce, DType::fp32); }

TEST_CASE("a larger flce shape through the default config and through output-dtype accumulation") {
  ValidationCase vc;
  Problem& p = vc.problem;
  p.family = Family::flce, p.tokens = 300, p.hidden = 256, p.vocab = 32003, p.dtype = DType::bf16, p.bias = true;
  vc.config = default_config(p);
  vc.spec.seed = next_seed();
  vc.name = "default";
  expect_pass(vc);
  vc.config.v_chunk = 4096, vc.config.row_chunk = 128, vc.config.dw_acc_fp32 = vc.config.dx_acc_fp32 = false;
  vc.spec.seed = next_seed();
  expect_pass(vc);
}

TEST_CASE("dW accumulated in bf16 across 16 row chunks stays within tolerance (the default's choice)") {
  check_dw_in_dtype(DType::bf16);
}
TEST_CASE("dW accumulated in fp16 across 16 row chunks stays within tolerance") { check_dw_in_dtype(DType::fp16); }

TEST_CASE("a target outside [0, V) is an input error naming the token") {
  // Every place a call counts its targets: flce's cuBLASLt path (before its
  // kernels) and its fused path (forward: the merges, in one chunk and across
  // three; forward+backward: before its kernels too); ce's split statistics, its
  // cluster kernel in one launch (a few rows: the kernel counts) and beyond
  // (count_targets before it); both modes. The bad target is neither the first
  // nor the last token, and a second one after it is not the one named.
  struct Path {
    Family family;
    int64_t tokens;
    bool fused;           // ce: the fused kernels; flce: impl fused
    int64_t row_chunk;    // flce fused: 0, or chunks of this many rows
  };
  int runs = 0, skipped = 0;
  for (const Path& path : {Path{Family::flce, 9, false, 0}, Path{Family::flce, 9, true, 0},
                           Path{Family::flce, 700, true, 256}, Path{Family::ce, 9, false, 0},
                           Path{Family::ce, 700, false, 0}, Path{Family::ce, 9, true, 0}, Path{Family::ce, 700, true, 0}})
    for (Mode mode : {Mode::forward_backward, Mode::forward}) {
      Problem p;
      const bool flce = path.family == Family::flce;
      p.family = path.family, p.tokens = path.tokens, p.hidden = flce ? 64 : 0;
      p.vocab = flce ? 1000 : 5003, p.dtype = DType::bf16, p.mode = mode;
      HostCase in = make_case(p, CaseSpec{.seed = next_seed()});
      in.targets[6] = p.vocab;
      in.targets[static_cast<size_t>(p.tokens - 2)] = -5;
      KernelConfig c = default_config(p);
      if (!flce) c.fused = path.fused, c.v_chunk = 0, c.block_size = 2048, c.threads = 256;
      if (flce && path.fused) {
        c = KernelConfig{};
        c.impl = KernelConfig::Impl::fused, c.row_chunk = path.row_chunk;
        if (!fused_runs(p, c)) {
          ++skipped;
          continue;
        }
      }
      CAPTURE(p.key());
      CAPTURE(to_string(c));
      try {
        gpu()->run(p, c, in);
        FAIL("no error for target V at token 6");
      } catch (const Error& e) {
        CAPTURE(e.what());
        CHECK(e.status() == Status::usage);
        CHECK(std::string(e.what()).find("token 6") != std::string::npos);
      }
      ++runs;
    }
  CHECK(runs + skipped == 14);
}

TEST_CASE("ce with N·V beyond 2^31 (64-bit indexing): rows past the 2^31st element are right") {
  // 16500 × 131072 = 2.16e9 logits, past INT32_MAX: any 32-bit index product
  // wraps in the last rows. Those rows (and the first) are checked against fp64.
  Problem p;
  p.family = Family::ce, p.tokens = 16500, p.hidden = 0, p.vocab = 131072, p.dtype = DType::bf16;
  p.loss.reduction = Reduction::sum;
  REQUIRE(p.tokens * p.vocab > int64_t{INT32_MAX});
  const HostCase in = make_case(p, CaseSpec{.seed = next_seed(), .ignore_fraction = 0.0});
  KernelConfig c = default_config(p);
  const HostOutputs out = gpu()->run(p, c, in);
  const int64_t V = p.vocab;
  for (int64_t row : {int64_t{0}, int64_t{16383}, int64_t{16384}, p.tokens - 2, p.tokens - 1}) {
    CAPTURE(row);
    const float* z = &in.logits[static_cast<size_t>(row * V)];
    double m = -INFINITY, s = 0;
    for (int64_t j = 0; j < V; ++j) m = std::max(m, double(z[j]));
    for (int64_t j = 0; j < V; ++j) s += std::exp(double(z[j]) - m);
    const double L = m + std::log(s);
    const int64_t y = in.targets[static_cast<size_t>(row)];
    CHECK(out.lse[static_cast<size_t>(row)] == doctest::Approx(L).epsilon(1e-5));
    CHECK(out.token_loss[static_cast<size_t>(row)] == doctest::Approx(L - z[y]).epsilon(1e-4));
    double err2 = 0, ref2 = 0;
    for (int64_t j = 0; j < V; ++j) {
      const double g = in.grad_scale * (std::exp(double(z[j]) - L) - (j == y));
      const double d = double(out.grad_logits[static_cast<size_t>(row * V + j)]) - g;
      err2 += d * d, ref2 += g * g;
    }
    CHECK(std::sqrt(err2 / ref2) < 1e-2);  // dZ is rounded to bf16: ~2^-9 relative per element
  }
  double total = 0;
  for (float l : out.token_loss) total += l;
  CHECK(out.loss == doctest::Approx(total).epsilon(1e-4));
}

TEST_CASE("ce rows split across blocks and shared by clusters: few rows, wide and odd vocabularies") {
  // Three rows cannot fill the GPU with one block each, so rows split into
  // segments (partials merged after) or, with fused, into a cluster that holds the
  // row on chip. Segment widths that are not multiples of 8 start segments off
  // the 16-byte grid, and V = 50257 starts every row off it: the head path.
  int runs = 0;
  for (int64_t V : {int64_t{128256}, int64_t{50257}})
    for (DType dt : {DType::bf16, DType::fp32})
      for (int splits : {2, 5, 8, 24})
        for (bool fused : {false, true}) {
          if (fused && splits > kCeMaxClusterBlocks) continue;
          ValidationCase vc = ce_case(3, V, dt, Mode::forward_backward, "split-rows");
          vc.problem.loss.label_smoothing = 0.1, vc.problem.loss.softcap = splits == 5 ? 30.0 : 0.0;
          vc.config.v_chunk = (V + splits - 1) / splits;
          vc.config.fused = fused;
          vc.spec.ignore_fraction = 0.0;
          expect_pass(vc);
          ++runs;
        }
  CHECK(runs == 28);
}

TEST_CASE("fused ce with more segments than a cluster holds is refused unless a segment is one tile, naming why") {
  Problem p;
  p.family = Family::ce, p.tokens = 2, p.hidden = 0, p.vocab = 128256, p.dtype = DType::bf16;
  KernelConfig c;
  c.block_size = 2048, c.threads = 256, c.fused = true, c.v_chunk = 8192;  // 16 segments of 4 tiles
  std::string why;
  CHECK_FALSE(gpu()->supports(p, c, &why));
  CHECK(why.find("must equal block_size") != std::string::npos);
  // A grid larger than the GPU holds at once: forward runs it, backward (whose
  // blocks wait for their row) is refused. 512 rows × 126 segments of 1024.
  p.tokens = 512;
  c.block_size = 1024, c.threads = 128, c.v_chunk = 1024;
  p.mode = Mode::forward;
  CHECK(gpu()->supports(p, c, &why));
  p.mode = Mode::forward_backward;
  CHECK_FALSE(gpu()->supports(p, c, &why));
  CHECK(why.find("more than this GPU holds at once") != std::string::npos);
}

TEST_CASE("fused ce spread over the GPU: a segment a block, a few rows, every option, both modes, odd widths") {
  // More segments than a cluster holds: each block keeps one tile in registers
  // and the row's blocks meet through global memory (counters that must return
  // to zero: validate_case runs each case twice and compares the bits). V =
  // 50257 starts rows and segments off the 16-byte grid; its last segment is
  // partial. Options: label smoothing with ignored targets (mean), softcap with
  // z-loss, none with int32 targets, and a confident target.
  struct Opt {
    const char* name;
    void (*apply)(ValidationCase&);
  };
  const Opt opts[] = {
      {"smooth+ignored", [](ValidationCase& vc) { vc.problem.loss.label_smoothing = 0.1, vc.spec.ignore_fraction = 0.3; }},
      {"softcap+zloss", [](ValidationCase& vc) { vc.problem.loss.softcap = 30.0, vc.problem.loss.z_loss = 1e-4; }},
      {"none+int32",
       [](ValidationCase& vc) {
         vc.problem.loss.reduction = Reduction::none, vc.problem.target_type = TargetType::i32;
         vc.problem.loss.ignore_index = -1;
       }},
      {"sum", [](ValidationCase& vc) { vc.problem.loss.reduction = Reduction::sum; }},
  };
  int runs = 0;
  for (int64_t N : {int64_t{1}, int64_t{3}, int64_t{12}})
    for (int64_t V : {int64_t{128256}, int64_t{50257}})
      for (DType dt : {DType::bf16, DType::fp16, DType::fp32})
        for (Mode mode : {Mode::forward_backward, Mode::forward}) {
          const Opt& o = opts[runs % 4];
          ValidationCase vc = ce_case(N, V, dt, mode, o.name);
          o.apply(vc);
          vc.config.fused = true;
          // Tiles of 2048 (8 elements a thread) and of 4096 (16), alternately;
          // 12 rows at 4096 (384 blocks at V = 128256: a GPU of ≥ 96 SMs holds
          // them at once).
          vc.config.block_size = runs % 2 || N > 3 ? 4096 : 2048;
          vc.config.v_chunk = vc.config.block_size;
          std::string why;
          REQUIRE_MESSAGE(gpu()->supports(vc.problem, vc.config, &why), why);
          expect_pass(vc);
          ++runs;
        }
  CHECK(runs == 36);
}

TEST_CASE("ce in one launch up to kCeOneLaunchTokens rows, fused or split statistics, count and loss kernels beyond, both modes") {
  // At ≤ 512 rows the cluster kernel also counts the targets and its last row
  // reduces the loss; the split statistics' last block of a split row merges
  // its partials (a counter a row), and the last block to write a row's loss
  // counts and reduces. Every counter must return to zero after each call: the
  // case runs twice, and validate_case checks the two runs agree bit for bit.
  // Beyond, count_targets and reduce_loss run around the cluster kernel, and
  // merge_parts_kernel and count_reduce_kernel after the split statistics.
  // Around the boundary, whole rows and rows in four segments, with ignored
  // targets under mean and (511 rows) under sum, whose loss needs no count.
  int runs = 0;
  for (int64_t N : {int64_t{1}, int64_t{511}, int64_t{512}, int64_t{513}, int64_t{1500}})
    for (int64_t V : {int64_t{32000}, int64_t{128256}})
      for (bool fused : {true, false})
        for (Mode mode : {Mode::forward_backward, Mode::forward}) {
          ValidationCase vc = ce_case(N, V, DType::bf16, mode, "one-launch");
          vc.config.fused = fused;
          vc.config.v_chunk = V == 128256 ? 32256 : 0;
          vc.problem.loss.reduction = N == 511 ? Reduction::sum : Reduction::mean;
          vc.spec.ignore_fraction = 0.25;
          expect_pass(vc);
          ++runs;
        }
  CHECK(runs == 40);
}

TEST_CASE("the GPU reference agrees with fp64 to fp32 accuracy for every option of the default matrix") {
  // validate trusts the GPU reference where fp64 cannot go; here it earns that
  // trust on every family, dtype and option set at the matrix's odd shapes.
  for (const auto& vc : default_matrix(next_seed())) {
    CAPTURE(vc.name);
    CHECK(check_gpu_reference(vc.problem, vc.spec, 0) == "");
  }
}

TEST_CASE("N·V > 2^31 in one flce tile, judged against the GPU reference in every output") {
  // The default matrix's 64-bit case: validate on a GPU adds it; run it here too.
  const auto cases = default_matrix(next_seed(), true);
  REQUIRE(cases.back().problem.tokens * cases.back().problem.vocab > int64_t{INT32_MAX});
  const CaseResult r = expect_pass(cases.back());
  CHECK(r.truth == "gpu-fp32");
}

TEST_CASE("[large] a Llama-3-8B-sized shape under the default config, judged by the GPU reference") {
  // fp64 would need ~3e12 multiply-adds here, so automatic picks the GPU
  // reference (after checking it against fp64 at a small shape).
  ValidationCase vc;
  Problem& p = vc.problem;
  p.family = Family::flce, p.tokens = 1024, p.hidden = 4096, p.vocab = 128256, p.dtype = DType::bf16;
  p.loss.label_smoothing = 0.1;
  REQUIRE(fp64_cost(p) > kFp64Budget);
  vc.config = default_config(p);
  vc.spec.seed = next_seed();
  vc.name = "llama3-8b N=1024";
  const CaseResult r = expect_pass(vc);
  CHECK(r.truth == "gpu-fp32");
  CHECK(r.reference_check == "pass");
}

TEST_CASE("tuned cuBLASLt algorithms: candidates per GEMM role, correct results, refused under another version") {
  ValidationCase vc;
  Problem& p = vc.problem;
  p.family = Family::flce, p.tokens = 300, p.hidden = 256, p.vocab = 32003, p.dtype = DType::bf16, p.bias = true;
  vc.config = default_config(p);
  vc.config.v_chunk = 4096, vc.config.row_chunk = 128;  // full chunks take the tuned algorithms, ragged ones fall back
  const auto cands = gpu()->gemm_candidates(p, vc.config, 4);
  REQUIRE(cands.size() == 3);
  for (const auto& role : cands) {
    REQUIRE(!role.empty());
    CHECK(role.front().size() == 128);
  }
  // The last candidate of every role (the heuristic's least preferred): still right.
  vc.config.gemm_algos_cublaslt = gpu()->device().cublaslt_version;
  for (const auto& role : cands) vc.config.gemm_algos.push_back(role.back());
  vc.spec.seed = next_seed();
  vc.name = "tuned algos";
  expect_pass(vc);

  p.mode = Mode::forward;  // forward runs only the logits GEMM
  const auto fwd = gpu()->gemm_candidates(p, default_config(p), 4);
  REQUIRE(fwd.size() == 3);
  CHECK(!fwd[0].empty());
  CHECK(fwd[1].empty());
  p.mode = Mode::forward_backward;

  KernelConfig other = vc.config;
  other.gemm_algos_cublaslt += 1;
  CHECK_THROWS_AS(gpu()->check(p, other), Error);
  KernelConfig bad = vc.config;
  bad.gemm_algos[1] = "not-an-algorithm";
  CHECK_THROWS_AS(gpu()->check(p, bad), Error);
}

// Every row of a variant table (variants.hpp) as a config names it: row 0 is
// the unnamed default.
template <size_t N>
std::vector<std::string> table_rows(const char* const (&names)[N]) {
  std::vector<std::string> out{""};
  out.insert(out.end(), names + 1, names + N);
  return out;
}
// The logits GEMM's rows: the cooperative row 0, and the ping-pong row 1 of the
// fused defaults from H = 2048, whose epilogue has its own register budget.
std::vector<std::string> logits_rows() { return table_rows(kSm90LogitsVariantNames); }
// Every dW choice of impl fused: each CUTLASS row, then cuBLASLt.
std::vector<std::string> dw_choices() {
  std::vector<std::string> out = table_rows(kSm90DwVariantNames);
  out.push_back(kDwOnCublaslt);
  return out;
}

TEST_CASE("impl fused: every option of the default matrix in bf16 and fp16, one pass and two, row chunks") {
  int n = 0;
  for (const auto& vc : default_matrix(next_seed(), true)) {
    if (vc.config.impl != KernelConfig::Impl::fused) continue;
    if (!fused_runs(vc.problem, vc.config)) return;
    expect_pass(vc);
    ++n;
  }
  CHECK(n == 2 * 14 * 2);  // dtypes × option sets × (one pass, chunked)
}

TEST_CASE("impl fused at an odd vocabulary: many tiles and chunks, both dW accumulators, each logits row") {
  ValidationCase vc;
  Problem& p = vc.problem;
  p.family = Family::flce, p.tokens = 1000, p.hidden = 264, p.vocab = 50257, p.dtype = DType::bf16, p.bias = true;
  p.loss.label_smoothing = 0.1, p.loss.softcap = 30.0, p.loss.z_loss = 1e-4;
  vc.config.impl = KernelConfig::Impl::fused;
  vc.config.block_size = 2048, vc.config.threads = 256;
  if (!fused_runs(p, vc.config)) return;
  for (const std::string& row : logits_rows())
    for (DType dt : {DType::bf16, DType::fp16})
      for (int64_t v_chunk : {int64_t{0}, int64_t{16384}})
        for (bool acc32 : {true, false}) {
          vc.config.logits_kernel = row;
          p.dtype = dt;
          vc.config.v_chunk = v_chunk, vc.config.row_chunk = 384;  // 384, 384, 232 rows
          vc.config.dw_acc_fp32 = vc.config.dx_acc_fp32 = acc32;
          for (const std::string& dw : dw_choices()) {  // each CUTLASS dW row, and cuBLASLt
            vc.config.dw_kernel = dw;
            vc.spec.seed = next_seed();
            vc.name = "fused odd V " + row + (dw.empty() ? "" : ", dW " + dw);
            expect_pass(vc);
          }
          vc.config.dw_kernel.clear();
          p.mode = Mode::forward;  // forward: the statistics GEMM alone, no tile
          vc.spec.seed = next_seed();
          expect_pass(vc);
          p.mode = Mode::forward_backward;
        }
}

TEST_CASE("impl fused with the CUTLASS dX GEMM: stream-K and data-parallel, with and without a dZ pass, odd V") {
  // DxGemm (gemm_sm90.cuh): 6 output tiles of 128×256 over 786 K iterations, so
  // stream-K splits every tile among many SMs and merges their partial sums
  // through the workspace; with none it runs data-parallel. bf16 without
  // smoothing runs without a dZ pass (dX then takes its row factor and target
  // term after the GEMM); fp16, and bf16 with smoothing, form dZ first.
  for (const std::string& dx : table_rows(kSm90DxVariantNames))
    for (int ws : {KernelConfig::kDefaultWorkspaceMib, 0})
      for (DType dt : {DType::bf16, DType::fp16})
        for (double smoothing : {0.0, 0.1}) {
          ValidationCase vc;
          Problem& p = vc.problem;
          p.family = Family::flce, p.tokens = 1000, p.hidden = 264, p.vocab = 50257, p.dtype = dt, p.bias = true;
          p.loss.label_smoothing = smoothing, p.loss.softcap = smoothing > 0 ? 0.0 : 30.0;
          vc.spec.ignore_fraction = 0.2;
          vc.config.impl = KernelConfig::Impl::fused, vc.config.dx_kernel = dx, vc.config.workspace_mib = ws;
          vc.config.block_size = 2048, vc.config.threads = 256, vc.config.row_chunk = 384;  // 384, 384, 232 rows
          if (!fused_runs(p, vc.config)) return;
          vc.spec.seed = next_seed();
          vc.name = "fused, dX " + dx + ", workspace " + std::to_string(ws) + " MiB, " + std::string(to_string(dt)) +
                    ", smoothing " + std::to_string(smoothing);
          CAPTURE(vc.name);
          expect_pass(vc);
        }
}

TEST_CASE("impl fused: softcaps on both sides of the epilogue's fixed reference, none, large logits, each logits row") {
  // Up to kSm90FixedReferenceMaxSoftcap the epilogue sums exp(ẑ − s) in one pass;
  // above it, exp(ẑ − m) over the row's max in two. Logits far past the cap put
  // ẑ at ±s, where exp(ẑ − s) is smallest (e^(−80) at s = 40) and the scaled
  // store's 1 − tanh² is tiny.
  for (const std::string& row : logits_rows())
    for (double cap : {static_cast<double>(kSm90FixedReferenceMaxSoftcap), 41.0, 4.0, 0.0})
      for (DType dt : {DType::bf16, DType::fp16})
        for (Mode mode : {Mode::forward_backward, Mode::forward}) {
          ValidationCase vc;
          Problem& p = vc.problem;
          p.family = Family::flce, p.tokens = 700, p.hidden = 136, p.vocab = 20011, p.dtype = dt, p.mode = mode;
          p.loss.softcap = cap, p.bias = true;
          vc.spec.logit_scale = cap > 0 ? 4.0 * cap : 40.0;
          vc.config.impl = KernelConfig::Impl::fused, vc.config.logits_kernel = row;
          vc.config.block_size = 2048, vc.config.threads = 256, vc.config.row_chunk = 256;
          if (!fused_runs(p, vc.config)) return;
          vc.spec.seed = next_seed();
          vc.name = "fused " + row + ", softcap " + std::to_string(cap) + " " + std::string(to_string(dt)) + " " +
                    std::string(to_string(mode));
          CAPTURE(vc.name);
          expect_pass(vc);
        }
}

// An option set of the no-dZ-pass cases below, and one such case: an
// odd vocabulary (an unaligned piece in every cuBLASLt GEMM), row chunks that do
// not divide N, the given softcap (0: the sampled references) and GEMM rows.
struct ScaledOpt {
  const char* name;
  void (*apply)(Problem&, CaseSpec&);
};
ValidationCase no_dz_pass_case(double softcap, const ScaledOpt& o, const std::string& row, const std::string& dw) {
  ValidationCase vc;
  Problem& p = vc.problem;
  p.family = Family::flce, p.tokens = 1000, p.hidden = 264, p.vocab = 50257, p.dtype = DType::bf16;
  p.loss.softcap = softcap;
  o.apply(p, vc.spec);
  vc.config.impl = KernelConfig::Impl::fused;
  vc.config.block_size = 2048, vc.config.threads = 256, vc.config.row_chunk = 384;
  vc.config.dw_kernel = dw, vc.config.logits_kernel = row;
  return vc;
}

TEST_CASE("impl fused without a dZ pass (softcap, bf16, no smoothing): every option it keeps, odd V, each logits row") {
  // sm90_scaled_dz (variants.hpp): the logits GEMM stores q, scaled_dz_rows writes
  // the row factors, patches the target and scales X; dX takes its factor after
  // the GEMM. Each option that keeps this path, at an odd vocabulary (an
  // unaligned piece in every cuBLASLt GEMM) and row chunks that do not divide N.
  const ScaledOpt opts[] = {
      {"mean, ignored, bias", [](Problem& p, CaseSpec& c) { p.bias = true, c.ignore_fraction = 0.3; }},
      {"sum, z-loss", [](Problem& p, CaseSpec&) { p.loss.reduction = Reduction::sum, p.loss.z_loss = 1e-3; }},
      {"none", [](Problem& p, CaseSpec&) { p.loss.reduction = Reduction::none; }},
      {"large logits", [](Problem&, CaseSpec& c) { c.logit_scale = 150.0; }},
      {"all ignored", [](Problem&, CaseSpec& c) { c.ignore_fraction = 1.0; }},
      {"int32, softcap 8", [](Problem& p, CaseSpec&) {
         p.target_type = TargetType::i32, p.loss.ignore_index = -1, p.loss.softcap = 8.0;
       }},
  };
  for (const std::string& row : logits_rows())
    for (const ScaledOpt& o : opts)
      for (const std::string& dw : dw_choices()) {
        ValidationCase vc = no_dz_pass_case(30.0, o, row, dw);
        if (!fused_runs(vc.problem, vc.config)) return;
        vc.spec.seed = next_seed();
        vc.name = "fused " + row + ", no dZ pass: " + o.name + (dw.empty() ? "" : ", dW " + dw);
        CAPTURE(vc.name);
        expect_pass(vc);
      }
  // Confident rows: the target's element is patched from its fp32 logit, so its
  // dZ keeps 1 − p (validate's "confident" case). The host bisects each row's
  // margin over all of V: a smaller shape.
  ValidationCase vc;
  Problem& p = vc.problem;
  p.family = Family::flce, p.tokens = 300, p.hidden = 64, p.vocab = 5003, p.dtype = DType::bf16, p.loss.softcap = 30.0;
  vc.spec.confident_margin = 5.0, vc.spec.edge_targets = false;
  vc.config.impl = KernelConfig::Impl::fused, vc.config.row_chunk = 256;
  vc.spec.seed = next_seed();
  vc.name = "fused, no dZ pass: confident";
  expect_pass(vc);
}

TEST_CASE("impl fused without a dZ pass or a softcap (bf16, no smoothing, no z-loss): every option, each logits row") {
  // sm90_scaled_dz without a softcap: each row's reference comes from the
  // logits of kSm90RefSamples sampled columns (sample_ref), the GEMM stores
  // q = exp(ẑ − m_i), and the rest is the softcapped path's. "large logits"
  // (|z| ~ 150) puts every row's max far past its reference + kSm90RefSpan, so
  // every row is rescaled (scaled_dz_rows); the next test mixes both kinds.
  const ScaledOpt opts[] = {
      {"mean, ignored, bias", [](Problem& p, CaseSpec& c) { p.bias = true, c.ignore_fraction = 0.3; }},
      {"sum", [](Problem& p, CaseSpec&) { p.loss.reduction = Reduction::sum; }},
      {"none", [](Problem& p, CaseSpec&) { p.loss.reduction = Reduction::none; }},
      {"large logits", [](Problem&, CaseSpec& c) { c.logit_scale = 150.0; }},
      {"all ignored", [](Problem&, CaseSpec& c) { c.ignore_fraction = 1.0; }},
      {"int32", [](Problem& p, CaseSpec&) { p.target_type = TargetType::i32, p.loss.ignore_index = -1; }},
  };
  for (const std::string& row : logits_rows())
    for (const ScaledOpt& o : opts) {
      ValidationCase vc = no_dz_pass_case(0.0, o, row, kSm90DwVariantNames[kSm90PingpongDwVariant]);
      REQUIRE(sm90_scaled_dz(vc.problem, vc.config));
      if (!fused_runs(vc.problem, vc.config)) return;
      vc.spec.seed = next_seed();
      vc.name = "fused " + row + ", no dZ pass, no softcap: " + o.name;
      CAPTURE(vc.name);
      expect_pass(vc);
    }
}

TEST_CASE("impl fused without a dZ pass or a softcap: rows past their sampled reference and rows within it, together") {
  // Logits of scale 37 at V = 20011: a row's max lies ~1.4σ ≈ 52 nats above the
  // max of its 128 samples, so about half the rows have a tile whose max is
  // past m_i + kSm90RefSpan (m_i = the samples' max + kSm90RefLift) and are
  // rescaled; the host counts them on the same inputs, so the case cannot
  // quietly test only one kind.
  ValidationCase vc;
  Problem& p = vc.problem;
  p.family = Family::flce, p.tokens = 300, p.hidden = 64, p.vocab = 20011, p.dtype = DType::bf16, p.bias = true;
  vc.spec.logit_scale = 37.0, vc.spec.seed = next_seed();
  const HostCase in = make_case(p, vc.spec);
  const int64_t samples = kSm90RefSamples, stride = p.vocab / samples;
  int past = 0;
  for (int64_t i = 0; i < p.tokens; ++i) {
    double top = -INFINITY, sampled = -INFINITY;
    for (int64_t j = 0; j < p.vocab; ++j) {
      double z = in.b[static_cast<size_t>(j)];
      for (int64_t k = 0; k < p.hidden; ++k)
        z += double{in.x[static_cast<size_t>(i * p.hidden + k)]} * in.w[static_cast<size_t>(j * p.hidden + k)];
      top = std::max(top, z);
      if (j % stride == 0 && j / stride < samples) sampled = std::max(sampled, z);
    }
    past += top > sampled + kSm90RefLift + kSm90RefSpan;
  }
  MESSAGE(past << " of " << p.tokens << " rows past their reference");
  REQUIRE(past > p.tokens / 10);
  REQUIRE(past < p.tokens * 9 / 10);
  vc.config.impl = KernelConfig::Impl::fused, vc.config.row_chunk = 256;
  if (!fused_runs(p, vc.config)) return;
  for (const std::string& row : logits_rows())
    for (const std::string& dw : dw_choices()) {
      vc.config.logits_kernel = row, vc.config.dw_kernel = dw;
      vc.name = "fused " + row + ", rows past and within their reference" + (dw.empty() ? "" : ", dW " + dw);
      CAPTURE(vc.name);
      expect_pass(vc);
    }
}

TEST_CASE("impl fused without a dZ pass: dX, dW and db as accurate as the plain path's bf16 dZ") {
  // The target's element of dZ dominates dX and dW's target rows where p_y is
  // small (random inputs, early training). Through the bf16 tile as c·dZ/a and
  // then the rounded a·X it carried two roundings where the plain path's bf16 dZ
  // carries one: 1.7× the plain path's dX error and 4.5× its dW error at
  // Llama-3-8B (docs/results.md, fifty-sixth session), within validate's margin
  // but not its factor. target_term keeps it in fp32 to the one rounding, so
  // these are judged by the factor alone. The plain path's target term is
  // exact where c is a power of two and p_y < 2^-9, as at Llama-3-8B's mean
  // over N = 4096 tokens: so at V = 8192 every token counts (c = 1/1024), and
  // there the kernels before target_term fail the factor. Elsewhere ignored
  // tokens; row chunks that do not divide N, a bias, both dW accumulators, and
  // targets repeated within target_rows_add's pieces of 128 sorted tokens (V =
  // 61) and across several (V = 3). Logits of scale 0.5 (p_y ~ 1/V, as at
  // Llama-3-8B's random inputs; at validate's 4 the logits' own rounding hides
  // the target's term). The factor is a statistic of many elements: db at V =
  // 61 and 3 and dW at V = 3 hold a few hundred or fewer, where one element's
  // rounding to the next bf16 moves the ratio by half (checked by validate
  // alone).
  const double factor = tolerance_for(DType::bf16).baseline_factor;
  for (const double softcap : {30.0, 0.0})
    for (const int64_t vocab : {int64_t{8192}, int64_t{61}, int64_t{3}})
      for (const std::string& dw : dw_choices()) {
        ValidationCase vc;
        Problem& p = vc.problem;
        // N = 1000 where no power of two is needed: the last of target_rows_add's
        // pieces partial. Softcap 30 also takes reduction none with a z-loss (V =
        // 61) and sum with int32 targets (V = 3).
        p.family = Family::flce, p.tokens = vocab == 8192 ? 1024 : 1000, p.hidden = 256, p.vocab = vocab;
        p.dtype = DType::bf16, p.bias = true, p.loss.softcap = softcap;
        if (softcap > 0 && vocab == 61) p.loss.reduction = Reduction::none, p.loss.z_loss = 1e-3;
        if (softcap > 0 && vocab == 3) p.loss.reduction = Reduction::sum, p.target_type = TargetType::i32;
        vc.spec.ignore_fraction = vocab == 8192 ? 0.0 : 0.1, vc.spec.logit_scale = 0.5, vc.spec.seed = next_seed();
        vc.config.impl = KernelConfig::Impl::fused, vc.config.row_chunk = 384, vc.config.dw_kernel = dw;
        vc.config.dw_acc_fp32 = dw == kDwOnCublaslt;
        REQUIRE(sm90_scaled_dz(p, vc.config));
        if (!fused_runs(p, vc.config)) return;
        vc.name = "fused, no dZ pass, accuracy: softcap " + std::to_string(static_cast<int>(softcap)) + ", V " +
                  std::to_string(vocab) + (dw.empty() ? "" : ", dW " + dw);
        CAPTURE(vc.name);
        const CaseResult r = expect_pass(vc);
        REQUIRE(r.truth == "fp64");
        for (const auto& o : r.outputs) {
          if (o.name != "dx" && o.name != "dw" && o.name != "db") continue;
          if (o.kernel.count < 4096) continue;
          CAPTURE(o.name);
          CAPTURE(o.baseline_path);
          CAPTURE(o.kernel.rel_l2);
          CAPTURE(o.baseline.rel_l2);
          MESSAGE(vc.name << " " << o.name << ": rel L2 " << o.kernel.rel_l2 << ", plain path " << o.baseline.rel_l2);
          CHECK(!o.beyond_lse_reach);
          CHECK(o.kernel.rel_l2 <= factor * o.baseline.rel_l2);
        }
      }
}

TEST_CASE("impl fused without a dZ pass or a softcap: vocabularies under the sample count") {
  // V < kSm90RefSamples: every column is a sample, and the sample GEMM's output
  // rows lie kSm90RefSamples apart, since V elements is not 16-byte aligned at
  // V = 100 or 7 (cuBLASLt then may have no algorithm). Bias, so sample_ref
  // reads it at stride 1.
  const ScaledOpt bias{"bias", [](Problem& p, CaseSpec&) { p.bias = true; }};
  for (int64_t v : {int64_t{100}, int64_t{7}})
    for (const std::string& row : logits_rows())
      for (const std::string& dw : dw_choices()) {
        ValidationCase vc = no_dz_pass_case(0.0, bias, row, dw);
        vc.problem.vocab = v;
        REQUIRE(sm90_scaled_dz(vc.problem, vc.config));
        REQUIRE(sm90_sampled_ref(vc.problem.loss.softcap));
        if (!fused_runs(vc.problem, vc.config)) return;
        vc.spec.seed = next_seed();
        vc.name = "fused " + row + ", no dZ pass, V = " + std::to_string(v) + (dw.empty() ? "" : ", dW " + dw);
        CAPTURE(vc.name);
        expect_pass(vc);
      }
}

TEST_CASE("[large] impl fused at Llama-3-8B N=1024, judged by the GPU reference") {
  ValidationCase vc;
  Problem& p = vc.problem;
  p.family = Family::flce, p.tokens = 1024, p.hidden = 4096, p.vocab = 128256, p.dtype = DType::bf16;
  p.loss.label_smoothing = 0.1;
  vc.config = default_config(p);
  vc.config.impl = KernelConfig::Impl::fused;
  vc.config.row_chunk = 384;
  vc.config.dw_acc_fp32 = false;
  if (!fused_runs(p, vc.config)) return;
  vc.spec.seed = next_seed();
  vc.name = "llama3-8b N=1024 fused";
  const CaseResult r = expect_pass(vc);
  CHECK(r.truth == "gpu-fp32");
}

TEST_CASE("impl fused: a NaN in X gives a NaN loss and a NaN LSE in that row only") {
  Problem p;
  p.family = Family::flce, p.tokens = 5, p.hidden = 64, p.vocab = 3000, p.dtype = DType::bf16;
  KernelConfig c;
  c.impl = KernelConfig::Impl::fused;
  if (!fused_runs(p, c)) return;
  for (Mode m : {Mode::forward, Mode::forward_backward}) {
    p.mode = m;
    HostCase in = make_case(p, CaseSpec{.seed = next_seed(), .ignore_fraction = 0.0});
    in.x[2 * 64 + 7] = NAN;
    const HostOutputs out = gpu()->run(p, c, in);
    CHECK(std::isnan(out.loss));
    CHECK(std::isnan(out.lse[2]));
    CHECK(std::isfinite(out.lse[0]));
  }
}

TEST_CASE("impl fused is refused with a reason for fp32 and the ce family") {
  Problem p;
  p.family = Family::flce, p.tokens = 8, p.hidden = 64, p.vocab = 100, p.dtype = DType::fp32;
  KernelConfig c;
  c.impl = KernelConfig::Impl::fused;
  std::string why;
  CHECK(!gpu()->supports(p, c, &why));
  CHECK(why.find("fp32") != std::string::npos);
  p.family = Family::ce, p.hidden = 0, p.dtype = DType::bf16;
  CHECK(!gpu()->supports(p, c, &why));
}

// The ce paths at 5000 columns, each reducing a row its own way (a block's max
// and scaled sum, a segment's partials merged max first, a cluster's, a spread
// row's through global memory).
struct CePath {
  const char* name;
  int block_size, threads;
  int64_t v_chunk;
  bool fused;
};
constexpr CePath kCePaths[] = {{"whole rows", 1024, 256, 0, false},
                               {"split statistics", 1024, 256, 1024, false},
                               {"cluster", 1024, 256, 1024, true},
                               {"spread", 256, 32, 256, true}};  // 20 segments: more than a cluster holds
KernelConfig ce_path_config(const CePath& path) {
  KernelConfig c;
  c.block_size = path.block_size, c.threads = path.threads, c.v_chunk = path.v_chunk, c.fused = path.fused;
  return c;
}

TEST_CASE("NaN and Inf in the inputs give a NaN loss, no hang, on every ce path and in both modes") {
  // A NaN must reach the row's LSE and the loss on each path, and a row without
  // one must stay finite. Row 3's +inf makes its LSE non-finite.
  // Row 4's NaN has its sign bit set (a warp's max orders such a key below
  // −inf's) and lies past the first segment on every path, past warp 0 where a
  // block has more than one; row
  // 5 holds a whole segment of −inf (a block whose max is −inf), which must
  // leave its LSE that of the other columns. Forward+backward: a NaN row's dZ is
  // NaN throughout (its L is), the finite rows' finite.
  for (const CePath& path : kCePaths)
    for (Mode mode : {Mode::forward, Mode::forward_backward}) {
      CAPTURE(path.name);
      CAPTURE(static_cast<int>(mode));
      Problem p;
      p.family = Family::ce, p.tokens = 6, p.hidden = 0, p.vocab = 5000, p.dtype = DType::bf16, p.mode = mode;
      HostCase in = make_case(p, CaseSpec{.seed = next_seed(), .ignore_fraction = 0.0});
      in.logits[5000 + 17] = NAN;
      in.logits[3 * 5000 + 4] = INFINITY;
      in.logits[4 * 5000 + 4321] = std::copysign(NAN, -1.0f);
      std::fill(in.logits.begin() + 5 * 5000 + 1024, in.logits.begin() + 5 * 5000 + 2048, -INFINITY);
      if (in.targets[5] >= 1024 && in.targets[5] < 2048) in.targets[5] = 7;
      const KernelConfig c = ce_path_config(path);
      std::string why;
      REQUIRE_MESSAGE(gpu()->supports(p, c, &why), why);
      const HostOutputs out = gpu()->run(p, c, in);
      CHECK(std::isnan(out.loss));
      CHECK(std::isnan(out.lse[1]));
      CHECK_FALSE(std::isfinite(out.lse[3]));
      CHECK(std::isnan(out.lse[4]));
      for (int64_t r : {0, 2, 5}) CHECK(std::isfinite(out.lse[static_cast<size_t>(r)]));
      const RefOutputs ref = reference::run(p, in);
      CHECK(out.lse[5] == doctest::Approx(ref.lse[5]).epsilon(1e-4));
      if (mode == Mode::forward) continue;
      bool nan_rows = true, finite_rows = true;
      for (int64_t j = 0; j < p.vocab; ++j) {
        const auto at = [&](int64_t r) { return out.grad_logits[static_cast<size_t>(r * p.vocab + j)]; };
        nan_rows = nan_rows && std::isnan(at(1)) && std::isnan(at(4));
        finite_rows = finite_rows && std::isfinite(at(0)) && std::isfinite(at(2)) && std::isfinite(at(5));
      }
      CHECK(nan_rows);
      CHECK(finite_rows);
    }
}

TEST_CASE("an ignored row adds no loss and no gradient on every ce path, whatever its logits hold") {
  // flce-math.md: ignored tokens contribute no gradient. Row 1 (ignored) holds a
  // NaN, row 2 (ignored) is all −inf (a padding row masked out): their L is NaN
  // and −inf, where c·(1 + 2λL) with c = 0 was NaN, not 0. Smoothing and z-loss
  // on, so every term of dZ is in play (a valid row's −inf would make its
  // smoothed loss +inf: the test above has one, without smoothing).
  for (DType dt : {DType::bf16, DType::fp32})
    for (const CePath& path : kCePaths)
      for (Mode mode : {Mode::forward, Mode::forward_backward}) {
        CAPTURE(path.name);
        CAPTURE(static_cast<int>(mode));
        CAPTURE(to_string(dt));
        Problem p;
        p.family = Family::ce, p.tokens = 4, p.hidden = 0, p.vocab = 5000, p.dtype = dt, p.mode = mode;
        p.loss.label_smoothing = 0.1, p.loss.z_loss = 1e-4;
        HostCase in = make_case(p, CaseSpec{.seed = next_seed(), .ignore_fraction = 0.0});
        const int64_t ig = p.loss.ignore_index;
        in.targets = {3, ig, ig, 4999};
        in.n_valid = 2;
        in.logits[5000 + 4321] = std::copysign(NAN, -1.0f);
        std::fill(in.logits.begin() + 2 * 5000, in.logits.begin() + 3 * 5000, -INFINITY);
        const KernelConfig c = ce_path_config(path);
        std::string why;
        if (!gpu()->supports(p, c, &why)) {
          CHECK_MESSAGE(dt == DType::fp32, why);  // 16-bit logits run on every path
          continue;
        }
        const HostOutputs out = gpu()->run(p, c, in);
        const RefOutputs ref = reference::run(p, in);
        CHECK(std::isfinite(out.loss));
        CHECK(out.loss == doctest::Approx(ref.loss).epsilon(1e-3));
        CHECK(out.token_loss[1] == 0.0f);
        CHECK(out.token_loss[2] == 0.0f);
        if (mode == Mode::forward) continue;
        bool zero_rows = true, finite_rows = true;
        for (int64_t j = 0; j < p.vocab; ++j) {
          const auto at = [&](int64_t r) { return out.grad_logits[static_cast<size_t>(r * p.vocab + j)]; };
          zero_rows = zero_rows && at(1) == 0.0f && at(2) == 0.0f;
          finite_rows = finite_rows && std::isfinite(at(0)) && std::isfinite(at(3));
        }
        CHECK(zero_rows);
        CHECK(finite_rows);
      }
}

TEST_CASE("a saturated softcap's gradient on every ce path and the default, fp32 and bf16, judged by validate") {
  // s = 0.05 or 0.02 on unit logits: most ẑ/s round to ±1 in fp32, where 1 −
  // (ẑ/s)², the kernels' chain factor until 2026-11-28, was 0 or a few ulps
  // against sech²(z/s) of 1e-9 to 1e-30 (a relative error of 1: validate failed
  // fp32's dZ at some seeds). The factor is now 4e/(1 + e)² from the softcap's
  // own exponential; each case twice, with smoothing and z-loss the second time.
  std::vector<KernelConfig> configs;
  for (const CePath& path : kCePaths) configs.push_back(ce_path_config(path));
  for (DType dt : {DType::fp32, DType::bf16})
    for (double cap : {0.05, 0.02})
      for (int opts = 0; opts < 2; ++opts) {
        Problem p;
        p.family = Family::ce, p.tokens = 4, p.hidden = 0, p.vocab = 5000, p.dtype = dt;
        p.loss.softcap = cap;
        if (opts) p.loss.label_smoothing = 0.1, p.loss.z_loss = 1e-4, p.loss.reduction = Reduction::sum;
        std::vector<KernelConfig> cs = configs;
        cs.push_back(default_config(p));
        for (const KernelConfig& c : cs) {
          if (!gpu()->supports(p, c)) continue;
          ValidationCase vc;
          vc.problem = p, vc.config = c, vc.spec.seed = next_seed();
          vc.name = "saturated softcap " + std::to_string(cap) + " " + std::string(to_string(dt));
          expect_pass(vc);
          Problem q = p;  // more rows, each config's other schedules
          q.tokens = 64, q.vocab = 1000;
          if (!gpu()->supports(q, c)) continue;
          vc.problem = q, vc.spec.seed = next_seed();
          expect_pass(vc);
        }
      }
}

TEST_CASE("a confident token's loss and gradient beyond the rounding of L, at large logits, on every ce path") {
  // The target's logit is the row's max, 200–340; one other logit 12 below it
  // and the rest 40 below: log d = e^−12 ≈ 6.1e-6, the loss, and the target's
  // gradient c·(p − 1) as small. Formed from L rounded to fp32 (half an ulp is
  // 7.6e-6 to 1.5e-5 there; L rounds to the max) both were off by all of that.
  // From L as hi + lo (ce.cu's Lse), as PyTorch's log-softmax keeps m and log d
  // apart, what is left is d's fp32 sum near 1 (a few 1e-8 here, one term).
  // Logits are even integers, exact in bf16. z-loss adds λL² = 4–12 to the loss
  // (its fp32 rounding up to 5e-7) and 2λL = 0.04–0.07 to the target's gradient
  // (bf16's rounding of it up to 1.3e-4).
  std::vector<KernelConfig> configs;
  for (const CePath& path : kCePaths) configs.push_back(ce_path_config(path));
  for (DType dt : {DType::fp32, DType::bf16})
    for (double z_loss : {0.0, 1e-4}) {
      Problem p;
      p.family = Family::ce, p.tokens = 8, p.hidden = 0, p.vocab = 5000, p.dtype = dt;
      p.loss.reduction = Reduction::sum, p.loss.z_loss = z_loss;
      HostCase in = make_case(p, CaseSpec{.seed = next_seed(), .ignore_fraction = 0.0});
      for (int64_t i = 0; i < p.tokens; ++i) {
        const float top = 200.0f + 20.0f * static_cast<float>(i);
        const int64_t y = (i * 617) % p.vocab, near = (y + 1 + i * 389) % p.vocab;
        in.targets[static_cast<size_t>(i)] = y;
        for (int64_t j = 0; j < p.vocab; ++j)
          in.logits[static_cast<size_t>(i * p.vocab + j)] = j == y ? top : j == near ? top - 12.0f : top - 40.0f;
      }
      in.n_valid = p.tokens;
      const RefOutputs ref = reference::run(p, in);
      double l_rounding = 1;  // what L rounded to fp32 alone puts into a row's loss, least over the rows
      for (int64_t i = 0; i < p.tokens; ++i) {
        const double L = ref.lse[static_cast<size_t>(i)];
        l_rounding = std::min(l_rounding, std::fabs(static_cast<double>(static_cast<float>(L)) - L));
      }
      REQUIRE(l_rounding > 5e-6);
      std::vector<KernelConfig> cs = configs;
      cs.push_back(default_config(p));
      for (const KernelConfig& c : cs) {
        if (!gpu()->supports(p, c)) continue;
        CAPTURE(to_string(dt));
        CAPTURE(z_loss);
        CAPTURE(to_string(c));
        const HostOutputs out = gpu()->run(p, c, in);
        double loss_err = 0, grad_err = 0;
        for (int64_t i = 0; i < p.tokens; ++i) {
          const size_t t = static_cast<size_t>(i), y = static_cast<size_t>(i * p.vocab + in.targets[t]);
          loss_err = std::max(loss_err, std::fabs(out.token_loss[t] - ref.token_loss[t]));
          const double slack = dt == DType::bf16 ? std::ldexp(std::fabs(ref.grad_logits[y]), -8) : 0.0;
          grad_err = std::max(grad_err, std::fabs(out.grad_logits[y] - ref.grad_logits[y]) - slack);
        }
        CHECK(loss_err <= (z_loss > 0 ? 1.5e-6 : 2e-7));
        CHECK(grad_err <= 4e-7);  // p near 1 from one exp2 of −lo: a few ulps of 1
      }
    }
}

TEST_CASE("unsupported configs and shapes are refused with a clear message") {
  Problem p;
  p.family = Family::flce, p.tokens = 8, p.hidden = 20, p.vocab = 100, p.dtype = DType::bf16;  // H % 8 != 0
  CHECK_THROWS_AS(gpu()->check(p, default_config(p)), Error);
  p.hidden = 24;
  KernelConfig c = default_config(p);
  c.block_size = 8192, c.threads = 128;  // 64 elements per thread: not in the table
  CHECK_THROWS_AS(gpu()->check(p, c), Error);
}

// The compiled table has (threads, elements) pairs whose registers do not fit in
// one block: check() must refuse exactly those, with the reason, and every pair it
// accepts must launch and pass. Without the register check, the fp32 fold at 16
// elements a thread and 1024 threads failed at launch.
TEST_CASE("every (threads, block size) that check() accepts launches; the rest are refused for their registers") {
  int refused = 0, accepted = 0;
  for (DType dt : {DType::bf16, DType::fp16, DType::fp32})
    for (Mode m : {Mode::forward, Mode::forward_backward})
      for (int threads = 32; threads <= 1024; threads *= 2)
        for (int elems : {1, 2, 4, 8, 16, 32}) {
          ValidationCase vc;
          Problem& p = vc.problem;
          p.family = Family::ce, p.tokens = 5, p.vocab = 3001, p.dtype = dt, p.mode = m;
          vc.config.threads = threads, vc.config.block_size = threads * elems;
          vc.spec.seed = next_seed();
          vc.name = "launch-limits";
          std::string why;
          if (!gpu()->supports(p, vc.config, &why)) {
            CAPTURE(why);
            CHECK(why.find("registers a thread") != std::string::npos);
            ++refused;
          } else {
            expect_pass(vc);
            ++accepted;
          }
        }
  MESSAGE("accepted " << accepted << ", refused for registers " << refused);
  CHECK(accepted > 0);
}

int main(int argc, char** argv) {
  // Scratch is poisoned too: a tile element the GEMM did not write, or a row
  // state never initialised, reaches the outputs as NaN and fails.
  setenv("CELTUNE_POISON_SCRATCH", "1", 1);
  if (cuda_device_count() == 0) {
    std::printf("no CUDA device: skipping the gpu suite\n");
    return 77;
  }
  std::printf("gpu suite on %s\n", gpu()->device().name.c_str());
  doctest::Context ctx;
  ctx.applyCommandLine(argc, argv);
  const int rc = ctx.run();
  gpu().reset();
  return rc;
}
