// celtune tune: search the config space per device and problem, store the best.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <limits>
#include <mutex>
#include <thread>

#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "db/paths.hpp"
#include "kernels/backend.hpp"
#include "model/config.hpp"
#include "model/error.hpp"
#include "new_database.hpp"
#include "output.hpp"
#include "problem_args.hpp"
#include "tuners/tune.hpp"

namespace celtune::cli {
namespace {

struct TuneArgs {
  // --max-scratch's default is the built-in defaults' own budget, so that tuning
  // can keep the default config: CELTUNE_MAX_SCRATCH where set, as the runtime
  // reads it (read when the command runs: empty here), else kDefaultScratchBudget
  // (one constant, in model/config.hpp).
  std::string device, devices, shard, db, strategy = "guided", max_scratch;
  size_t budget = 0;
  bool force = false, json = false;
  uint64_t seed = 1;
  int min_runs = 5, max_runs = 40;
  int gemm_algos = 4;
  std::vector<std::string> priors;
  ProblemArgs problem;
};

std::pair<int, int> parse_shard(const std::string& s) {
  const auto slash = s.find('/');
  int k = -1, n = -1;
  if (slash != std::string::npos) {
    const char* end = s.data() + s.size();
    auto rk = std::from_chars(s.data(), s.data() + slash, k);
    auto rn = std::from_chars(s.data() + slash + 1, end, n);
    if (rk.ec != std::errc() || rk.ptr != s.data() + slash || rn.ec != std::errc() || rn.ptr != end) k = n = -1;
  }
  if (n <= 0 || k < 0 || k >= n)
    fail_usage("malformed --shard '" + s + "': expected K/N, whole numbers with 0 ≤ K < N ≤ " +
               std::to_string(std::numeric_limits<int>::max()));
  return {k, n};
}

std::string eta(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const int s = static_cast<int>(seconds);
  return s >= 60 ? std::to_string(s / 60) + "m" + std::to_string(s % 60) + "s" : std::to_string(s) + "s";
}

}  // namespace

Action register_tune(CLI::App& app) {
  auto a = std::make_shared<TuneArgs>();
  auto* sub = app.add_subcommand(
      "tune",
      "Search BLOCK_SIZE, the V-chunk, the row chunk and the rest of the config per device and problem; gate every "
      "candidate on correctness; store every measurement and the best config in SQLite");
  auto* device = sub->add_option("--device", a->device, "cpu or a CUDA ordinal (default: the first CUDA GPU, else cpu)");
  sub->add_option("--devices", a->devices, "CUDA ordinals to use at once, one worker each, e.g. 0,1,2,3")
      ->excludes(device);
  sub->add_option("--shard", a->shard, "K/N: tune only problems whose index mod N is K (for scheduler job arrays)");
  sub->add_option("--db", a->db,
                  "Database file (default: $CELTUNE_DB, else $XDG_DATA_HOME/celtune/celtune.sqlite, else "
                  "~/.local/share/celtune/celtune.sqlite)");
  sub->add_option("--prior", a->priors,
                  "Database (read only, any celtune version) whose best configs for this GPU and problem guided "
                  "search measures first, as it does the --db database's own: e.g. the shipped celtune.sqlite, "
                  "to re-tune after an upgrade with a small --budget. Repeatable");
  sub->add_option("--strategy", a->strategy, "exhaustive, random (with --budget) or guided (coordinate descent)")
      ->check(CLI::IsMember({"exhaustive", "random", "guided"}))
      ->capture_default_str();
  auto* budget = sub->add_option("--budget", a->budget, "Evaluations for random; cap for guided (default: 30% of the candidates, at least 12)")
                     ->transform(whole_number("COUNT", 1));
  sub->add_option("--max-scratch", a->max_scratch,
                  "Device scratch a config may use, e.g. 256MiB, 1GiB (default: $CELTUNE_MAX_SCRATCH, else " +
                      std::to_string(kDefaultScratchBudget >> 20) + "MiB)");
  sub->add_flag("--force", a->force, "Re-measure configs the database already holds for this kernel build");
  sub->add_flag("--json", a->json, "One JSON line per finished problem instead of the table");
  sub->add_option("--seed", a->seed, "Seed of the random inputs and of the search")
      ->transform(whole_number("SEED"))
      ->capture_default_str();
  sub->add_option("--min-runs", a->min_runs, "Timed runs per candidate before the CI test")
      ->transform(whole_number("", 3, 1000))
      ->check(CLI::Range(3, 1000))
      ->capture_default_str();
  sub->add_option("--max-runs", a->max_runs,
                  "Cap on timed runs per candidate during the search (the finalists' interleaved round always takes "
                  "max(15, --min-runs))")
      ->transform(whole_number("", 3, 10000))
      ->check(CLI::Range(3, 10000))
      ->capture_default_str();
  sub->add_option("--gemm-algos", a->gemm_algos,
                  "cuBLASLt algorithms tried per flce GEMM (the heuristic's first K) after the search; a tuned "
                  "algorithm is stored with the cuBLASLt version and used only under it. 0 or 1: keep the heuristic's")
      ->transform(whole_number("", 0, 32))
      ->check(CLI::Range(0, 32))
      ->capture_default_str();
  add_problem_options(sub, a->problem, "both (fwd and fwdbwd)");
  return [a, budget] {
    if (a->min_runs > a->max_runs)
      fail_usage("--min-runs " + std::to_string(a->min_runs) + " exceeds --max-runs " + std::to_string(a->max_runs));
    TuneOptions o;
    o.gemm_algos = a->gemm_algos;
    o.strategy = a->strategy == "exhaustive" ? Strategy::exhaustive
                 : a->strategy == "random"   ? Strategy::random
                                             : Strategy::guided;
    if (o.strategy == Strategy::random && a->budget == 0) fail_usage("--strategy random needs --budget K");
    if (o.strategy == Strategy::exhaustive && budget->count())
      fail_usage("--strategy exhaustive measures every candidate: --budget applies to random and guided");
    o.budget = a->budget;
    // Read (and refused when malformed) with --max-scratch given too: it also
    // sets the default the tuner measures first, the one the runtime runs here.
    o.default_budget = defaults_scratch_budget();
    o.max_scratch = a->max_scratch.empty() ? o.default_budget : parse_bytes(a->max_scratch, "--max-scratch");
    // Every config takes some scratch (the chunk state at least): a zero budget
    // fits none, which tune found only after opening the database.
    if (o.max_scratch == 0) fail_usage("--max-scratch 0 fits no config; give a budget such as 256MiB");
    o.force = a->force;
    o.seed = a->seed;
    o.plan.warmup = 2;
    o.plan.min_runs = a->min_runs;
    o.plan.max_runs = std::max(a->min_runs, a->max_runs);
    o.plan.ci_target = 0.01;

    ProblemArgs pa = a->problem;
    if (pa.modes.empty()) pa.modes = {"fwd", "fwdbwd"};  // both, unless told
    if (!names_problem(pa)) fail_usage("tune needs a problem: --model PRESET --tokens LIST, or --shape N,H,V");
    auto problems = build_problems(pa);
    if (!a->shard.empty()) {
      const auto [k, n] = parse_shard(a->shard);
      std::vector<Problem> mine;
      for (size_t i = 0; i < problems.size(); ++i)
        if (static_cast<int>(i % static_cast<size_t>(n)) == k) mine.push_back(problems[i]);
      problems = mine;
    }
    std::vector<std::string> devices;
    if (!a->devices.empty()) {
      std::stringstream ss(a->devices + ",");
      for (std::string d; std::getline(ss, d, ',');) {
        if (d.empty()) fail_usage("--devices '" + a->devices + "' has an empty entry");
        // Workers on one device time each other's kernels, and the CPU guard
        // below looks at one backend: "cpu,cpu" started days of CPU work.
        if (d == "cpu") fail_usage("--devices takes CUDA ordinals; tune on the CPU with --device cpu");
        if (std::find(devices.begin(), devices.end(), d) != devices.end())
          fail_usage("--devices '" + a->devices + "' names device " + d + " twice");
        devices.push_back(d);
      }
    } else {
      devices.push_back(a->device);
    }
    // The devices first: a bad one (exit 2 or 3) must not leave a new, empty
    // database behind.
    std::vector<std::unique_ptr<Backend>> backends;
    for (const auto& d : devices) backends.push_back(open_backend(d));
    // Nor days of CPU work by surprise: with no GPU found, tune at Llama-3-8B
    // shapes timed the CPU backend without a word. At least 12 evaluations a
    // problem (guided's floor; --budget where given; every candidate when
    // exhaustive), but no more than the space has candidates (--budget 10^19 at
    // 16 candidates was estimated at 5·10^13 minutes and refused), each
    // --min-runs timed runs and 3 warm-ups; past ten minutes refused unless
    // --device cpu asked for it.
    if (backends.size() == 1 && backends.front()->device().id == "cpu") {
      const SpaceLimits limits = backend_limits(*backends.front(), o.max_scratch);
      double ops = 0.0;
      for (const Problem& p : problems) {
        const double cands = static_cast<double>(enumerate(space_for(p), p, limits).size());
        const double asked =
            o.strategy == Strategy::exhaustive ? cands : static_cast<double>(a->budget ? a->budget : 12);
        const double evals = std::min(asked, cands);
        ops += call_ops(p) * evals * static_cast<double>(a->min_runs + 3);
      }
      limit_cpu_work(ops, !a->device.empty(), "tuning these problems", "tune", "at least ", a->json);
    }
    const std::string db_path = writable_db_path(a->db);
    // Fail early (exit 3) on an unusable database; the priors first, so that a
    // mistyped --prior leaves no new database behind.
    for (const auto& prior : a->priors) {
      require_database(prior);
      db::Store(prior, db::Access::read_only).check_sound();
    }
    // A database this run creates and leaves empty (every problem refused: no
    // candidate within --max-scratch) is removed again, on failure as on an
    // error: the probe's tune with --max-scratch 1KiB left an empty new.sqlite.
    std::error_code exists_ec;
    struct DropIfEmpty {
      std::string path;
      bool armed;
      ~DropIfEmpty() {
        if (!armed) return;
        try {
          bool empty = false;
          {
            db::Store s(path, db::Access::read_only);
            empty = s.best_entries().empty() && s.measurements().empty();
          }
          if (empty) db::remove_database_files(path);
        } catch (...) {  // a destructor reports nothing; the file stays
        }
      }
    } drop_if_empty{db_path, !std::filesystem::exists(db_path, exists_ec)};
    // A new database is made whole before it appears (a full disk left one
    // without its schema, refused by every command after), and until a row is
    // stored an interrupt takes it away again.
    if (drop_if_empty.armed) drop_if_empty.armed = create_database(db_path);
    if (!drop_if_empty.armed) {
      db::Store check(db_path, db::Access::read_write);
    }
    const RemoveIfUnwrittenOnSignal drop_on_signal(drop_if_empty.armed ? db_path : std::string());

    const bool bar = !a->json && isatty(2);
    // Piped (a batch job's log), the table comes at the end: say what runs, and
    // one line on stderr per finished problem, flushed, so a job killed at its
    // time limit leaves a log of what it stored (it printed nothing before).
    const bool lines = !a->json && !bar;
    if (!a->json) {
      std::cout << "devices: ";
      for (auto& b : backends) std::cout << b->device().id << " (" << b->device().name << ") ";
      std::cout << "\ndatabase: " << printable_message(db_path) << "\nstrategy: " << a->strategy << ", max scratch "
                << human_bytes(static_cast<double>(o.max_scratch))  // as parsed, flag or variable alike
                << "\n\n"
                << std::flush;
    }
    std::mutex out_mu;
    std::atomic<size_t> next{0}, finished{0};
    std::vector<TuneResult> results;
    std::vector<std::string> failures;
    const auto t0 = std::chrono::steady_clock::now();
    auto worker = [&](Backend* backend) {
      db::Store store(db_path, db::Access::read_write);
      // Each worker its own connections, as for the tuned database.
      std::vector<std::unique_ptr<db::Store>> priors;
      TuneOptions mine = o;
      mine.warn = [&](const std::string& note) {
        std::lock_guard lk(out_mu);
        if (bar) std::cerr << "\r" << std::string(120, ' ') << "\r";  // not glued to the progress bar
        write_warning(std::cerr, note);
      };
      for (const auto& prior : a->priors) {
        priors.push_back(std::make_unique<db::Store>(prior, db::Access::read_only));
        mine.priors.push_back(priors.back().get());
      }
      for (size_t i; (i = next++) < problems.size();) {
        const Problem& p = problems[i];
        try {
          auto progress = [&](const TuneProgress& pr) {
            if (!bar) return;
            const double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            const double frac = (static_cast<double>(finished) + static_cast<double>(pr.done) / pr.total) / problems.size();
            const int w = 24, fill = static_cast<int>(frac * w);
            std::lock_guard lk(out_mu);
            std::cerr << "\r[" << std::string(fill, '=') << std::string(w - fill, ' ') << "] " << finished << "/"
                      << problems.size() << " problems, " << pr.done << "/" << pr.total << " evals, ETA "
                      << eta(frac > 0 ? el / frac - el : NAN) << ", best " << fmt("%.3f", pr.best_ms) << " ms ("
                      << pr.best << ")   " << std::flush;
          };
          TuneResult r = tune_problem(*backend, store, p, mine, progress);
          ++finished;
          std::lock_guard lk(out_mu);
          if (bar) std::cerr << "\r" << std::string(120, ' ') << "\r";
          if (lines)
            std::cerr << "[" << finished << "/" << problems.size() << "] " << p.key() << "  " << to_string(r.best) << "  "
                      << fmt("%.3f", r.stats.median_ms) << " ms  " << fmt("%.3fx", r.speedup) << "  "
                      << fmt("%.1f", r.seconds) << " s" << std::endl;
          if (a->json) {
            std::cout << nlohmann::json{{"device", backend->device().name},
                                        {"problem", p.key()},
                                        {"config", r.best},
                                        {"stats", r.stats},
                                        {"default_ms", r.default_ms},
                                        {"speedup", r.speedup},
                                        {"candidates", r.candidates},
                                        {"evaluated", r.evaluated},
                                        {"gemm_algos_evaluated", r.algo_evaluated},
                                        {"prior", r.prior},
                                        {"reused", r.reused},
                                        {"failed", r.failed},
                                        {"seconds", r.seconds}}
                             .dump()
                      << std::endl;
          }
          results.push_back(r);
        } catch (const Error& e) {
          if (e.status() == Status::environment) throw;
          ++finished;
          std::lock_guard lk(out_mu);
          failures.push_back(p.key() + ": " + e.what());
          if (lines) std::cerr << "[" << finished << "/" << problems.size() << "] " << p.key() << "  FAILED" << std::endl;
          if (a->json) std::cout << nlohmann::json{{"problem", p.key()}, {"error", e.what()}}.dump() << std::endl;
        }
      }
    };
    std::vector<std::thread> pool;
    std::exception_ptr err;
    std::mutex err_mu;
    for (auto& b : backends)
      pool.emplace_back([&, b = b.get()] {
        try {
          worker(b);
        } catch (...) {
          std::lock_guard lk(err_mu);
          if (!err) err = std::current_exception();
          next = problems.size();  // stop the others at their next problem
        }
      });
    for (auto& t : pool) t.join();
    if (err) std::rethrow_exception(err);
    if (!a->json) {
      Table t({"problem", "best config", "median ms", "p20–p80", "default ms", "speedup", "evals", "reused", "failed",
               "s"});
      for (const auto& r : results)
        t.add({r.problem.key(), to_string(r.best), fmt("%.3f", r.stats.median_ms),
               fmt("%.3f", r.stats.p20_ms) + "–" + fmt("%.3f", r.stats.p80_ms), fmt("%.3f", r.default_ms),
               fmt("%.3fx", r.speedup),
               std::to_string(r.evaluated) + "/" + std::to_string(r.candidates) +
                   (r.algo_evaluated ? " +" + std::to_string(r.algo_evaluated) + " algos" : "") +
                   (r.prior ? ", " + std::to_string(r.prior) + " prior" : ""),
               std::to_string(r.reused), std::to_string(r.failed), fmt("%.1f", r.seconds)});
      t.print(std::cout);
      for (const auto& f : failures) std::cout << "FAILED " << f << '\n';
      std::cout << counted(results.size(), "problem", "problems") << " tuned, " << failures.size() << " failed in "
                << fmt("%.1f", std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()) << " s\n";
    }
    return failures.empty() ? 0 : static_cast<int>(Status::failure);
  };
}

}  // namespace celtune::cli
