// The tune loop's cuBLASLt-algorithm stage, on a backend whose timings are
// known: the CPU backend for the correctness gate, with synthetic GEMM
// candidates and a synthetic clock.
#include <doctest/doctest.h>

#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "kernels/cpu/cpu_backend.hpp"
#include "kernels/space.hpp"
#include "model/config.hpp"
#include "tuners/tune.hpp"

using namespace celtune;

namespace {

// A stand-in for a serialised cuBLASLt algorithm (128 lowercase hex digits, as
// validate_config asks): the tag's bytes in hex, padded with zeros.
std::string algo(const std::string& tag) {
  std::string hex;
  for (unsigned char ch : tag) hex += "0123456789abcdef"[ch >> 4], hex += "0123456789abcdef"[ch & 15];
  return hex + std::string(128 - hex.size(), '0');
}

// Role dX's third candidate is 10% faster; role dW's second is 0.5% faster,
// below the 1% that justifies pinning a cuBLASLt version.
double synthetic_ms(const KernelConfig& c) {
  double ms = 1.0 + 0.01 * c.block_size / 1024.0 + (c.fused ? 0.002 : 0.0);
  if (!c.gemm_algos.empty()) {
    if (c.gemm_algos[1] == algo("X2")) ms *= 0.90;
    if (c.gemm_algos[2] == algo("W1")) ms *= 0.995;
  }
  return ms;
}

class SyntheticWorkload : public Workload {
 public:
  explicit SyntheticWorkload(std::function<double(const KernelConfig&)> ms) : ms_(std::move(ms)) {}
  double run_timed(const KernelConfig& c) override { return ms_(c); }

 private:
  std::function<double(const KernelConfig&)> ms_;
};

class SyntheticGpu : public Backend {
 public:
  SyntheticGpu() : cpu_(cpu::make_backend()) {
    info_ = cpu_->device();
    info_.name = "synthetic GPU";
    info_.cublaslt = "13.1.0", info_.cublaslt_version = 130100;
  }
  const DeviceInfo& device() const override { return info_; }
  void check(const Problem& p, const KernelConfig& c) const override { cpu_->check(p, c); }
  size_t scratch_bytes(const Problem& p, const KernelConfig& c) const override { return cpu_->scratch_bytes(p, c); }
  HostOutputs run(const Problem& p, const KernelConfig& c, const HostCase& in) override { return cpu_->run(p, c, in); }
  std::unique_ptr<Workload> prepare(const Problem&, uint64_t) override { return std::make_unique<SyntheticWorkload>(ms); }
  std::vector<std::vector<std::string>> gemm_candidates(const Problem&, const KernelConfig&, int k) override {
    CHECK(k == 3);
    return {{algo("L0"), algo("L1"), algo("L2")},
            {algo("X0"), algo("X1"), algo("X2")},
            {algo("W0"), algo("W1"), algo("W2")}};
  }
  std::function<double(const KernelConfig&)> ms = synthetic_ms;

 private:
  std::unique_ptr<Backend> cpu_;
  DeviceInfo info_;
};

}  // namespace

TEST_CASE("the algorithm stage keeps a >1% faster cuBLASLt candidate per role, stored with the version") {
  const auto path = std::filesystem::temp_directory_path() / "celtune-test-tune-algos.sqlite";
  std::filesystem::remove(path);
  SyntheticGpu backend;
  Problem p;
  p.family = Family::flce, p.tokens = 24, p.hidden = 16, p.vocab = 300, p.dtype = DType::fp32;
  TuneOptions o;
  o.gemm_algos = 3;
  o.plan.warmup = 1, o.plan.min_runs = 3, o.plan.max_runs = 3, o.plan.ci_target = 0;
  TuneResult r;
  {
    db::Store store(path.string(), db::Access::read_write);
    r = tune_problem(backend, store, p, o);
    CHECK(r.algo_evaluated == 6);  // two other candidates for each of three roles
    REQUIRE(r.best.gemm_algos.size() == 3);
    CHECK(r.best.gemm_algos[0] == algo("L0"));  // no logits candidate was faster: the heuristic's
    CHECK(r.best.gemm_algos[1] == algo("X2"));  // 10% faster: kept
    CHECK(r.best.gemm_algos[2] == algo("W0"));  // 0.5% faster: not worth pinning a version
    CHECK(r.best.gemm_algos_cublaslt == 130100);
    CHECK(r.speedup > 1.05);
    const auto best = store.best_entries();
    REQUIRE(best.size() == 1);
    CHECK(best[0].config == r.best);
  }
  // Without the stage the config stays version-free.
  std::filesystem::remove(path);
  {
    db::Store store(path.string(), db::Access::read_write);
    o.gemm_algos = 0;
    r = tune_problem(backend, store, p, o);
    CHECK(r.algo_evaluated == 0);
    CHECK(r.best.gemm_algos.empty());
  }
  std::filesystem::remove(path);
}

TEST_CASE("guided search measures an earlier winner for the same GPU and problem right after the default") {
  const auto dir = std::filesystem::temp_directory_path() / "celtune-test-tune-prior";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  SyntheticGpu backend;
  Problem p;
  p.family = Family::flce, p.tokens = 24, p.hidden = 16, p.vocab = 300, p.dtype = DType::fp32;
  // The winner: a grid point two or more parameters away from the default, so
  // that a budget of two (the default and one more) reaches it only as a prior.
  SpaceLimits limits;
  limits.scratch_bytes = [&](const Problem& q, const KernelConfig& c) { return backend.scratch_bytes(q, c); };
  limits.supported = [&](const Problem& q, const KernelConfig& c, std::string* why) {
    return backend.supports(q, c, why);
  };
  const SearchSpace space = space_for(p);
  const auto cands = enumerate(space, p, limits);
  const KernelConfig def = device_default(p, [&](const KernelConfig& c) { return backend.supports(p, c); });
  // Guided search starts at the default, or at the first candidate when the
  // default is off the grid.
  REQUIRE_FALSE(cands.empty());
  const Candidate* def_at = &cands.front();
  for (const auto& c : cands)
    if (c.config == def) def_at = &c;
  const Candidate* far = nullptr;
  for (const auto& c : cands) {
    size_t differ = 0;
    for (size_t k = 0; k < c.index.size(); ++k) differ += c.index[k] != def_at->index[k];
    if (differ >= 2) far = &c;
  }
  REQUIRE(far != nullptr);
  const KernelConfig winner = far->config;
  backend.ms = [&](const KernelConfig& c) { return c == winner ? 0.5 : synthetic_ms(c); };

  TuneOptions o;
  o.gemm_algos = 0, o.budget = 2;
  o.plan.warmup = 1, o.plan.min_runs = 3, o.plan.max_runs = 3, o.plan.ci_target = 0;
  auto entry = [&](const std::string& device) {
    db::BestEntry b;
    b.device = backend.device();
    b.device.name = device;
    // Tuned under an older cuBLASLt, as the row's device then reported it.
    b.device.cublaslt = "12.0.0", b.device.cublaslt_version = 120000;
    b.problem = p;
    b.config = winner;
    // Stripped: searched again.
    b.config.gemm_algos = {algo("L9"), algo("X9"), algo("W9")}, b.config.gemm_algos_cublaslt = 120000;
    b.stats.median_ms = b.stats.p20_ms = b.stats.p80_ms = 0.4, b.stats.samples = 3;
    b.default_ms = 1.0, b.speedup = 2.5;
    b.celtune_version = "0.0.1", b.kernel_hash = "0123456789abcdef", b.cublaslt = "12.0.0";
    b.created_at = "2026-01-01T00:00:00Z";
    return b;
  };
  auto tune = [&](const std::string& name, const std::vector<const db::Store*>& priors) {
    db::Store store((dir / name).string(), db::Access::read_write);
    TuneOptions with = o;
    with.priors = priors;
    return tune_problem(backend, store, p, with);
  };

  // Without an earlier winner the budget does not reach it: the premise.
  TuneResult r = tune("fresh.sqlite", {});
  CHECK(r.prior == 0);
  CHECK_FALSE(r.best == winner);

  db::Store prior((dir / "prior.sqlite").string(), db::Access::read_write);
  prior.put_best(entry(backend.device().name));
  db::Store other((dir / "other.sqlite").string(), db::Access::read_write);
  other.put_best(entry("another GPU"));
  SUBCASE("from a prior database, tuned with other kernels") {
    r = tune("a.sqlite", {&prior});
    CHECK(r.prior == 1);
    CHECK(r.best == winner);
    CHECK(r.best.gemm_algos.empty());
  }
  SUBCASE("from the tuned database's own stale entry") {
    {
      db::Store own((dir / "b.sqlite").string(), db::Access::read_write);
      own.put_best(entry(backend.device().name));
    }
    r = tune("b.sqlite", {});
    CHECK(r.prior == 1);
    CHECK(r.best == winner);
  }
  SUBCASE("not from another GPU's entry") {
    r = tune("c.sqlite", {&other});
    CHECK(r.prior == 0);
    CHECK_FALSE(r.best == winner);
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("guided search measures each seed grown to the scratch limit: the fewest row chunks that fit") {
  // A larger --max-scratch buys fewer row chunks first (tune.cpp,
  // with_grown_seeds). Synthetic times fall with the chunk count alone, so the
  // grown default is the best; a budget of two (the default, then one more)
  // finds it only because it is measured right after the default, ahead of an
  // earlier winner (1024-row chunks, as a tune within less scratch would have
  // stored) and the space's seeds. The limit leaves out the whole-N chunk.
  const auto path = std::filesystem::temp_directory_path() / "celtune-test-tune-grow.sqlite";
  std::filesystem::remove(path);
  SyntheticGpu backend;
  Problem p;
  p.family = Family::flce, p.tokens = 4096, p.hidden = 16, p.vocab = 65536, p.dtype = DType::fp32;
  p.mode = Mode::forward_backward;  // the default keeps its tile to the budget: 1792-row chunks
  auto chunks = [&](const KernelConfig& c) { return (p.tokens + c.row_chunk_for(p) - 1) / c.row_chunk_for(p); };
  backend.ms = [&](const KernelConfig& c) { return 1.0 + 0.1 * static_cast<double>(chunks(c)); };
  KernelConfig half;
  half.row_chunk = 2048, half.v_chunk = 0;
  TuneOptions o;
  o.budget = 2, o.gemm_algos = 0;
  o.max_scratch = backend.scratch_bytes(p, half) + 1024;  // 2048 rows fit, 4096 do not
  o.plan.warmup = 1, o.plan.min_runs = 3, o.plan.max_runs = 3, o.plan.ci_target = 0;
  const KernelConfig def = device_default(p, [&](const KernelConfig& c) { return backend.supports(p, c); });
  REQUIRE(chunks(def) == 3);
  {
    db::Store store(path.string(), db::Access::read_write);
    db::BestEntry earlier;
    earlier.device = backend.device();
    earlier.problem = p;
    earlier.config = def;
    earlier.config.row_chunk = 1024;
    earlier.stats.median_ms = earlier.stats.p20_ms = earlier.stats.p80_ms = 0.4, earlier.stats.samples = 3;
    earlier.default_ms = 1.0, earlier.speedup = 2.5;
    earlier.celtune_version = "0.0.1", earlier.kernel_hash = "0123456789abcdef";
    earlier.created_at = "2026-01-01T00:00:00Z";
    store.put_best(earlier);
    const TuneResult r = tune_problem(backend, store, p, o);
    CHECK(r.prior == 1);
    CHECK(chunks(r.best) == 2);
    CHECK(backend.scratch_bytes(p, r.best) <= o.max_scratch);
  }
  std::filesystem::remove(path);
}

TEST_CASE("a candidate faster at the median but slower at p80 than the default does not replace it") {
  // Every config but the default runs fast three times in five and slow the
  // other two (median 0.9, p80 1.5); the default takes 1.0 every time.
  const auto path = std::filesystem::temp_directory_path() / "celtune-test-tune-p80.sqlite";
  std::filesystem::remove(path);
  SyntheticGpu backend;
  Problem p;
  p.family = Family::flce, p.tokens = 24, p.hidden = 16, p.vocab = 300, p.dtype = DType::fp32;
  const KernelConfig def = device_default(p, [&](const KernelConfig& c) { return backend.supports(p, c); });
  std::map<std::string, int> runs;
  backend.ms = [&](const KernelConfig& c) { return c == def ? 1.0 : runs[to_string(c)]++ % 5 < 3 ? 0.9 : 1.5; };
  TuneOptions o;
  o.budget = 6, o.gemm_algos = 0;
  o.plan.warmup = 1, o.plan.min_runs = 5, o.plan.max_runs = 5, o.plan.ci_target = 0;
  {
    db::Store store(path.string(), db::Access::read_write);
    const TuneResult r = tune_problem(backend, store, p, o);
    CHECK(r.best == def);
    CHECK(r.speedup == doctest::Approx(1.0));
  }
  // Steady and faster: it wins.
  backend.ms = [&](const KernelConfig& c) { return c == def ? 1.0 : 0.9; };
  std::filesystem::remove(path);
  {
    db::Store store(path.string(), db::Access::read_write);
    const TuneResult r = tune_problem(backend, store, p, o);
    CHECK_FALSE(r.best == def);
    CHECK(r.speedup == doctest::Approx(1.0 / 0.9));
  }
  std::filesystem::remove(path);
}

// bench times a problem's rows in rounds (tuners/measure.hpp): every item's
// warm-ups first, then one run of each item a round in the items' order, each run
// after a flush, and rounds past min_runs only while an item's median is unsettled.
namespace {
class LoggedWorkload : public Workload {
 public:
  LoggedWorkload(std::string name, std::vector<std::string>* log, std::function<double(int)> ms)
      : name_(std::move(name)), log_(log), ms_(std::move(ms)) {}
  double run_timed(const KernelConfig&) override {
    log_->push_back(name_ + ":run");
    return ms_(runs_++);
  }
  void flush_caches() override { log_->push_back(name_ + ":flush"); }

 private:
  std::string name_;
  std::vector<std::string>* log_;
  std::function<double(int)> ms_;
  int runs_ = 0;
};
}  // namespace

TEST_CASE("time_interleaved warms each item up, then times one run of each a round, each after a flush") {
  std::vector<std::string> log;
  LoggedWorkload a("a", &log, [](int i) { return 1.0 + i; }), b("b", &log, [](int) { return 5.0; });
  TimingPlan plan;
  plan.warmup = 2, plan.min_runs = 3, plan.max_runs = 3, plan.ci_target = 0;
  const auto ms = time_interleaved({{&a, KernelConfig{}}, {&b, KernelConfig{}}}, plan);
  const std::vector<std::string> want{"a:flush", "a:run", "a:flush", "a:run", "b:flush", "b:run", "b:flush", "b:run",
                                      "a:flush", "a:run", "b:flush", "b:run", "a:flush", "a:run", "b:flush", "b:run",
                                      "a:flush", "a:run", "b:flush", "b:run"};
  CHECK(log == want);
  REQUIRE(ms.size() == 2);
  CHECK(ms[0] == std::vector<double>{3.0, 4.0, 5.0});  // after its two warm-ups
  CHECK(ms[1] == std::vector<double>{5.0, 5.0, 5.0});
  // One item: time_runs is the same timer.
  log.clear();
  CHECK(time_runs(b, KernelConfig{}, plan).size() == 3);
  CHECK(log.size() == 10);
}

TEST_CASE("time_interleaved keeps adding rounds while any item's median is unsettled, up to max_runs") {
  std::vector<std::string> log;
  // a alternates 1 and 3 ms: its median's confidence interval never narrows to 1%.
  LoggedWorkload a("a", &log, [](int i) { return i % 2 ? 3.0 : 1.0; }), b("b", &log, [](int) { return 2.0; });
  TimingPlan plan;
  plan.warmup = 0, plan.min_runs = 20, plan.max_runs = 50, plan.ci_target = 0.01;
  auto ms = time_interleaved({{&a, KernelConfig{}}, {&b, KernelConfig{}}}, plan);
  CHECK(ms[0].size() == 50);
  CHECK(ms[1].size() == 50);  // b is settled, but rounds time every item
  LoggedWorkload c("c", &log, [](int) { return 2.0; });
  ms = time_interleaved({{&b, KernelConfig{}}, {&c, KernelConfig{}}}, plan);
  CHECK(ms[0].size() == 20);  // both settled at min_runs
}
