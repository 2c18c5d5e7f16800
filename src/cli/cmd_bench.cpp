// celtune bench: celtune's kernels against the unfused path and the floors, all
// measured in one process on one device.
//
// Rows per problem (flce):
//   floor        each GEMM the algorithm needs, full size at V padded to a multiple
//                of 128 (Floors::gemm_vocab says why), one after another
//   celtune      flce with --config or the built-in default
//   celtune-tuned  with --tuned: the config the runtime would use (its tuned
//                database entry, as `celtune lookup` resolves it), where one
//                exists and differs from the rows above
//   unfused      the full [N,V] logits by cuBLASLt, the CE kernel, the two gradient
//                GEMMs: what a PyTorch eager step does (our flce with v_chunk = V and
//                row_chunk = N, which materialises the logits)
// and for the ce family on the same N×V logits: forward against the one-read
// floor and forward+backward against the one-read-plus-one-write floor, both at
// the copy bandwidth measured in the same run, or one copy of the same bytes where
// that takes longer (a few rows: launch and latency, not bandwidth); either the
// fastest of its measurements before and after the rows.
//
// Units: effective TFLOP/s is the flop count of the unfused GEMMs at the real V
// over the time, 6·N·H·V for forward+backward and 2·N·H·V for forward, the unit
// published FLCE results use, so a number here compares with theirs whatever the
// schedule (two passes do 8·N·H·V of work and still count 6).
//
// A problem's flce rows, the floor included, are timed in rounds, one run of each
// a round (time_interleaved): both GPUs run these GEMMs at their power limit, the
// clock drifts over a run, and a floor timed apart from what it is held against
// drifted apart from it.
#include <algorithm>
#include <iostream>
#include <map>
#include <optional>

#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "kernels/backend.hpp"
#include "kernels/space.hpp"
#include "model/error.hpp"
#include "output.hpp"
#include "problem_args.hpp"
#include "runtime/resolve.hpp"
#include "tuners/measure.hpp"

namespace celtune::cli {
namespace {

struct BenchArgs {
  std::string device, db;
  std::vector<std::string> configs;
  int runs = 20;
  bool json = false, csv = false, no_ce = false, no_unfused = false, tuned = false;
  ProblemArgs problem;
};

struct Row {
  std::string kernel, provider, mode;
  Problem p;
  std::string config;
  db::Stats stats;
  double floor_ms = 0;  // 0: no floor for this row
  double tflops = 0, gbps = 0;
  double extra_bytes = 0;
};

// Effective TFLOP/s as published FLCE results count them (see the top comment).
double effective_tflops(const Problem& p, double ms) {
  const double flops = (p.mode == Mode::forward_backward ? 6.0 : 2.0) * static_cast<double>(p.tokens) *
                       static_cast<double>(p.hidden) * static_cast<double>(p.vocab);
  return flops / (ms * 1e-3) / 1e12;
}

// Three significant digits below 100, whole numbers above: a CPU's 0.0042
// TFLOP/s must not print as 0.
std::string rate(double v) { return v >= 100 ? fmt("%.0f", v) : fmt("%.3g", v); }

}  // namespace

Action register_bench(CLI::App& app) {
  auto a = std::make_shared<BenchArgs>();
  auto* sub = app.add_subcommand("bench", "Time celtune's kernels against the unfused path and the GEMM and "
                                          "bandwidth floors (CUDA events, L2 flushed, median/p20/p80)");
  sub->add_option("--device", a->device, "cpu or a CUDA ordinal (default: the first CUDA GPU, else cpu)");
  // One JSON object a --config (repeat it for several): as a list option it took
  // more values after one flag, and CLI11 split a value in brackets at its
  // commas, so '[{"block_size":1024,"v_chunk":8192}]' reached the parser cut.
  sub->add_option("--config", a->configs, "Kernel config as JSON to time; repeat for several (default: the built-in default)")
      ->allow_extra_args(false);
  sub->add_option("--runs", a->runs, "Timed runs per measurement, after warm-up (at least 20)")
      ->transform(whole_number("", 20, 10000))
      ->check(CLI::Range(20, 10000))
      ->capture_default_str();
  sub->add_flag("--json", a->json, "Liger-Kernel benchmark-data schema (one record per kernel and metric)");
  sub->add_flag("--csv", a->csv, "CSV with the table's columns");
  sub->add_flag("--no-ce", a->no_ce, "Skip the ce-family rows");
  sub->add_flag("--no-unfused", a->no_unfused, "Skip the unfused reference path");
  sub->add_flag("--tuned", a->tuned,
                "Also time the config the runtime would use for each problem (its tuned database entry, as "
                "`celtune lookup` resolves it) as a celtune-tuned row, timed in rounds with the floor and the default");
  sub->add_option("--db", a->db,
                  "With --tuned: a database file read first; then $CELTUNE_DB, the user's database, celtune.sqlite "
                  "beside libceltune (as the runtime reads them); opened read-only");
  add_problem_options(sub, a->problem);
  return [a] {
    if (a->json && a->csv) fail_usage("--json and --csv are exclusive");
    if (!a->db.empty() && !a->tuned) fail_usage("--db names the database --tuned reads: give --tuned with it");
    ProblemArgs pa = a->problem;
    if (!names_problem(pa)) pa.model = "llama3-8b", pa.tokens = "4096,8192,16384";  // the Llama-3-8B classifier
    if (pa.tokens.empty() && pa.shape.empty()) pa.tokens = "4096,8192,16384";
    const auto problems = build_problems(pa);
    // Configs are read before anything is timed or printed, and each is timed
    // once however often it was given.
    std::vector<KernelConfig> given;
    for (const auto& js : a->configs) {
      const KernelConfig c = parse_config_json(js);
      if (std::find(given.begin(), given.end(), c) == given.end()) given.push_back(c);
    }
    for (const Problem& p : problems)
      for (const KernelConfig& c : given) validate_config(p, c);
    // The flce problems also time ce on their logits; a ce problem has nothing else.
    if (a->no_ce && std::none_of(problems.begin(), problems.end(), [](const Problem& p) { return p.family == Family::flce; }))
      fail_usage("--no-ce with --family ce leaves nothing to time");
    std::shared_ptr<Backend> backend = open_backend(a->device);  // shared with --tuned's resolver
    const auto& dev = backend->device();
    // ce on an flce problem's logits (or a ce problem in another mode).
    auto ce_problem = [](Problem p, Mode m) {
      p.family = Family::ce, p.hidden = 0, p.bias = false, p.mode = m;
      return p;
    };
    auto ce_modes = [](const Problem& p0) {
      return p0.family == Family::flce ? std::vector<Mode>{Mode::forward, Mode::forward_backward}
                                       : std::vector<Mode>{p0.mode};
    };
    // --tuned: what the runtime would run for every problem bench times, resolved
    // before anything is timed, so that a --db found damaged only when its rows
    // are read (exit 3), or a CELTUNE_CONFIG the device cannot run (exit 2, named
    // as lookup names it), stops bench before its first row, not after.
    std::map<std::string, runtime::Resolved> tuned;
    if (a->tuned) {
      const auto resolver = open_resolver(a->db, backend);
      auto resolve = [&](const Problem& p) {
        runtime::Resolved r = resolver->resolve(p, nullptr);
        resolver->check_given(p, r, "--config");
        tuned.emplace(p.key(), std::move(r));
      };
      for (const Problem& p0 : problems) {
        if (p0.family == Family::flce) resolve(p0);
        if (!a->no_ce)
          for (Mode m : ce_modes(p0)) resolve(ce_problem(p0, m));
      }
      require_named_database_used(*resolver, a->db, "bench");
    }
    // The tuned config for p and its row's label (the config and its source tag:
    // exact, nearest, …, default where nothing tuned applies), or none where it
    // is one of `shown`: said on stderr, so the table is not read as missing it.
    struct Tuned {
      KernelConfig config;
      std::string label;
    };
    auto tuned_for = [&](const Problem& p, const std::vector<KernelConfig>& shown) -> std::optional<Tuned> {
      const auto it = tuned.find(p.key());
      if (it == tuned.end()) return std::nullopt;
      const runtime::Resolved& r = it->second;
      const std::string tag = runtime::to_string(r.source);
      if (std::find(shown.begin(), shown.end(), r.config) != shown.end()) {
        if (r.source == runtime::Source::default_config)
          std::cerr << "bench: no tuned entry for " << p.key() << ": the runtime would run the default, a row above\n";
        else
          std::cerr << "bench: the tuned config for " << p.key() << " (" << tag << ") is a row above: " << to_string(r.config)
                    << '\n';
        return std::nullopt;
      }
      return Tuned{r.config, to_string(r.config) + " [" + tag + "]"};
    };
    // The CPU backend at a model's shape takes hours: `celtune bench` with no GPU
    // found timed Llama-3-8B at N = 4096 on the CPU without a word. Each timed
    // row (warm-ups included) costs 2·N·H·V multiply-adds forward, 6·N·H·V with
    // the backward (ce: ~20 an element); past ten minutes it is refused unless
    // --device cpu asked for the CPU, and noted when it did.
    if (dev.id == "cpu") {
      double ops = 0.0;
      for (const Problem& p : problems) {
        const double run = call_ops(p);
        const double rows = static_cast<double>(std::max<size_t>(1, given.size())) +
                            (p.family == Family::flce && !a->no_unfused ? 1.0 : 0.0) + (a->tuned ? 1.0 : 0.0);
        ops += run * rows * static_cast<double>(a->runs + 3);
      }
      limit_cpu_work(ops, !a->device.empty(), "timing these problems", "time", "", false);
    }
    TimingPlan plan;
    plan.min_runs = a->runs;
    plan.max_runs = a->runs;
    plan.ci_target = 0;
    std::vector<Row> rows;
    auto time = [&](const Problem& p, const KernelConfig& c, uint64_t seed) {
      backend->check(p, c);
      auto w = backend->prepare(p, seed);
      return summarize(time_runs(*w, c, plan));
    };
    uint64_t seed = 1;
    bool ce_skip_said = false;
    double best_copy_gb_per_s = 0;  // the fastest copy this process measured: see the ce rows
    const std::optional<size_t> env_budget = env_max_scratch();  // before any timing: a refusal wastes none
    const size_t budget = env_budget.value_or(kDefaultScratchBudget);
    for (const Problem& p0 : problems) {
      if (!a->json && !a->csv) std::cerr << "bench: " << p0.key() << '\n';
      const Floors f = backend->measure_floors(p0);
      std::vector<KernelConfig> configs = given;
      if (configs.empty()) {  // what the runtime runs: within CELTUNE_MAX_SCRATCH where set
        configs.push_back(device_default(p0, [&](const KernelConfig& c) { return backend->supports(p0, c); }, budget));
        // Where the rule cannot keep to it (the CPU backend's fp32 tile), as the runtime warns.
        if (const size_t need = backend->scratch_bytes(p0, configs.back()); env_budget && need > *env_budget)
          std::cerr << "bench: warning: the built-in default for " << p0.key() << " ("
                    << to_string(configs.back()) << ") " << scratch_over_budget(need, *env_budget)
                    << " here; timing it\n";
      }
      if (p0.family == Family::flce) {
        // The rows and what times them, in one order; the floor first where there is one.
        std::vector<Row> timed;
        std::vector<TimedItem> items;
        const std::string mode(to_string(p0.mode));
        const std::unique_ptr<Workload> floor_w = f.available ? backend->prepare_floor(p0) : nullptr;
        if (floor_w) {
          std::string what = std::to_string(f.gemms) + " GEMMs";
          if (f.gemm_vocab != p0.vocab) what += " at V padded to " + std::to_string(f.gemm_vocab);
          timed.push_back(Row{"gemm-floor", "cublaslt", mode, p0, what, {}, 0, 0, 0, 0});
          items.push_back({floor_w.get(), KernelConfig{}});
        }
        const std::unique_ptr<Workload> w = backend->prepare(p0, seed++);
        for (const KernelConfig& c : configs) {
          if (c.v_chunk_for(p0) < p0.vocab && c.block_size > c.v_chunk_for(p0)) continue;
          backend->check(p0, c);
          timed.push_back(Row{"flce", "celtune", mode, p0, to_string(c), {}, 0, 0, 0,
                              static_cast<double>(backend->scratch_bytes(p0, c))});
          items.push_back({w.get(), c});
        }
        if (const auto t = tuned_for(p0, configs)) {
          backend->check(p0, t->config);
          timed.push_back(Row{"flce", "celtune-tuned", mode, p0, t->label, {}, 0, 0, 0,
                              static_cast<double>(backend->scratch_bytes(p0, t->config))});
          items.push_back({w.get(), t->config});
        }
        if (!a->no_unfused) {
          KernelConfig u = default_config(p0);
          u.v_chunk = 0, u.row_chunk = 0;
          try {  // its [N, V] logits may not fit: one run says so before the rounds start
            backend->check(p0, u);
            w->run_timed(u);
            timed.push_back(Row{"flce", "unfused", mode, p0, "logits materialised", {}, 0, 0, 0,
                                static_cast<double>(backend->scratch_bytes(p0, u))});
            items.push_back({w.get(), u});
          } catch (const Error& e) {
            std::cerr << "bench: unfused path skipped for " << p0.key() << ": " << e.what() << '\n';
          }
        }
        const auto samples = time_interleaved(items, plan);
        for (size_t i = 0; i < timed.size(); ++i) {
          timed[i].stats = summarize(samples[i]);
          timed[i].tflops = effective_tflops(p0, timed[i].stats.median_ms);
          timed[i].floor_ms = floor_w ? timed[0].stats.median_ms : 0;
          rows.push_back(timed[i]);
        }
      }
      if (!a->no_ce && f.copy_gb_per_s <= 0 && !ce_skip_said) {
        // Without a measured copy bandwidth there is no floor to hold ce against,
        // and on the CPU backend a bandwidth ratio would mean nothing anyway.
        std::cerr << "bench: ce rows skipped: " << dev.id
                  << " has no measured copy bandwidth to compare them with (GPU backends only)\n";
        ce_skip_said = true;
      }
      // An flce problem's rows allocate and free gigabytes. After them, on an
      // H100 and an H200, the same copies ran up to 14% slower, and the ce kernels
      // 0-30% slower than in a fresh process, from one run to the next, and the
      // state lasted into the next problem (gpu-pack/r15-r17.sh). And a few rows'
      // floor is one small copy, which timed at the start of a fresh process took
      // up to 5x the ce row timed after it (V = 50257, N = 64 on an H100: 0.19x
      // the floor, 74c67c2). So the copies are measured again after the flce rows
      // and after the ce rows, and each floor is the fastest copy this process has
      // measured: its state never flatters a ce row.
      Floors fce = f;
      auto fastest = [&](const Floors& again) {
        best_copy_gb_per_s = std::max(best_copy_gb_per_s, again.copy_gb_per_s);
        for (int i = 0; i < 2; ++i)
          if (again.ce_copy_ms[i] > 0)
            fce.ce_copy_ms[i] = fce.ce_copy_ms[i] > 0 ? std::min(fce.ce_copy_ms[i], again.ce_copy_ms[i]) : again.ce_copy_ms[i];
        fce.copy_gb_per_s = best_copy_gb_per_s;
      };
      if (f.copy_gb_per_s > 0) {
        fastest(f);
        if (p0.family == Family::flce && !a->no_ce) {
          const Floors again = backend->measure_floors(p0);
          fastest(again);
          if (!a->json && !a->csv)
            std::cerr << "bench: copy bandwidth " << fmt("%.0f", f.copy_gb_per_s) << " GB/s before the flce rows, "
                      << fmt("%.0f", again.copy_gb_per_s) << " after\n";
        }
      }
      if (!a->no_ce && fce.copy_gb_per_s > 0) {
        // ce on the N×V logits (for an flce problem: the logits it would have
        // materialised), forward against one read, forward+backward against one
        // read plus one write, at the copy bandwidth above.
        const size_t first = rows.size();
        auto bytes_of = [](const Problem& p) {
          return static_cast<double>(p.tokens) * static_cast<double>(p.vocab) * dtype_bytes(p.dtype) *
                 (p.mode == Mode::forward ? 1 : 2);
        };
        for (Mode m : ce_modes(p0)) {
          const Problem p = ce_problem(p0, m);
          auto dflt = [&] {
            return device_default(p, [&](const KernelConfig& c) { return backend->supports(p, c); }, budget);
          };
          // A ce problem's given configs, else (and for an flce problem's logits) the default.
          std::vector<KernelConfig> ce_configs =
              p0.family == Family::ce && !given.empty() ? given : std::vector<KernelConfig>{dflt()};
          const size_t shown = ce_configs.size();
          const auto t = tuned_for(p, ce_configs);
          if (t) ce_configs.push_back(t->config);
          for (size_t k = 0; k < ce_configs.size(); ++k) {
            const KernelConfig& c = ce_configs[k];
            const bool is_tuned = k >= shown;
            Row r{"ce", is_tuned ? "celtune-tuned" : "celtune", std::string(to_string(m)), p,
                  is_tuned ? t->label : to_string(c), {}, 0, 0, 0, static_cast<double>(backend->scratch_bytes(p, c))};
            try {
              r.stats = time(p, c, seed++);
              r.gbps = bytes_of(p) / (r.stats.median_ms * 1e-3) / 1e9;
              rows.push_back(r);
            } catch (const Error& e) {
              std::cerr << "bench: ce " << to_string(c) << " skipped for " << p.key() << ": " << e.what() << '\n';
            }
          }
        }
        if (rows.size() > first) fastest(backend->measure_floors(p0));
        for (size_t i = first; i < rows.size(); ++i) {
          const Problem& p = rows[i].p;
          rows[i].floor_ms = std::max(bytes_of(p) / (fce.copy_gb_per_s * 1e9) * 1e3,
                                      fce.ce_copy_ms[p.mode == Mode::forward ? 0 : 1]);
        }
      }
      if (!a->json && !a->csv && fce.copy_gb_per_s > 0)
        std::cerr << "bench: copy bandwidth " << fmt("%.0f", fce.copy_gb_per_s) << " GB/s (read + write; the fastest measured)\n";
    }

    // Every row skipped (ce on the CPU backend, say): an empty table is not a
    // benchmark, and exit 0 told a script it was.
    if (rows.empty()) fail_env("nothing was benchmarked on " + dev.id + " (the reasons are above)");
    if (a->json) {
      // Liger-Kernel's benchmark-data schema: one record per (kernel, provider, mode, shape family).
      nlohmann::json out = nlohmann::json::array();
      for (const Row& r : rows) {
        nlohmann::json extra{{"H", r.p.hidden}, {"V", r.p.vocab}, {"dtype", to_string(r.p.dtype)},
                             {"config", r.config}, {"device", dev.name}};
        // Beside the times, the comparable units: effective TFLOP/s (6·N·H·V or
        // 2·N·H·V over the median), GB/s for ce, and the floor and the ratio to
        // it where there is one (none on the CPU: a 0 read as a floor of 0 ms).
        if (r.floor_ms > 0) extra["floor_ms"] = r.floor_ms, extra["x_floor"] = r.stats.median_ms / r.floor_ms;
        if (r.tflops > 0) extra["tflops_effective"] = r.tflops;
        if (r.gbps > 0) extra["gb_per_s"] = r.gbps;
        if (r.kernel == "gemm-floor") extra["floor_vocab_padded_to"] = (r.p.vocab + 127) / 128 * 128;
        for (const char* metric : {"speed", "memory"}) {
          const bool speed = std::string(metric) == "speed";
          out.push_back({{"kernel_name", r.kernel == "flce" || r.kernel == "gemm-floor" ? "fused_linear_cross_entropy"
                                                                                        : "cross_entropy"},
                         {"kernel_provider", r.kernel == "gemm-floor" ? "gemm-floor" : r.provider},
                         {"metric_name", metric},
                         {"metric_unit", speed ? "ms" : "MB"},
                         {"gpu_name", dev.name},
                         {"x_name", "BT"},
                         {"x_label", "B x T"},
                         {"x_values", {r.p.tokens}},
                         {"y_values_50", {speed ? r.stats.median_ms : r.extra_bytes / 1048576.0}},
                         {"y_values_20", {speed ? r.stats.p20_ms : r.extra_bytes / 1048576.0}},
                         {"y_values_80", {speed ? r.stats.p80_ms : r.extra_bytes / 1048576.0}},
                         {"kernel_operation_mode", r.mode == "fwd" ? "forward" : "full"},
                         {"extra_benchmark_config_str", extra.dump()}});
        }
      }
      std::cout << out.dump(2) << '\n';
      return 0;
    }
    // CSV carries numbers a spreadsheet reads: the extra memory in bytes, and
    // times to 0.1 µs (a few rows' ce call is 5–20 µs, which three decimals of
    // a millisecond rounded by up to 10%).
    const char* ms_format = a->csv ? "%.4f" : "%.3f";
    Table t({"kernel", "provider", "mode", "N", "H", "V", "dtype", "config", "median ms", "p20 ms", "p80 ms",
             "x floor", "eff TFLOP/s", "GB/s", a->csv ? "extra bytes" : "extra mem"});
    for (const Row& r : rows)
      t.add({r.kernel, r.provider, r.mode, std::to_string(r.p.tokens), std::to_string(r.p.hidden),
             std::to_string(r.p.vocab), std::string(to_string(r.p.dtype)), r.config, fmt(ms_format, r.stats.median_ms),
             fmt(ms_format, r.stats.p20_ms), fmt(ms_format, r.stats.p80_ms),
             r.floor_ms > 0 ? fmt("%.3f", r.stats.median_ms / r.floor_ms) : "-", r.tflops > 0 ? rate(r.tflops) : "-",
             r.gbps > 0 ? rate(r.gbps) : "-",
             a->csv ? fmt("%.0f", r.extra_bytes) : r.extra_bytes > 0 ? human_bytes(r.extra_bytes) : "-"});
    if (a->csv) {
      t.print_csv(std::cout);
    } else {
      // Only the CUDA backend flushes a cache between runs (Workload::flush_caches).
      const bool flushed = dev.id.rfind("cuda", 0) == 0;
      std::cout << "device: " << dev.id << " — " << dev.name << " (" << a->runs << " timed runs each"
                << (flushed ? ", L2 flushed" : "") << ")\n";
      t.print(std::cout);
      std::cout << "eff TFLOP/s: 6·N·H·V / time for fwdbwd, 2·N·H·V / time for fwd (real V); x floor: time over the "
                   "floor row (the GEMMs alone, at V padded to a multiple of 128, timed in rounds with the flce rows) or, for ce, over bytes moved at "
                   "the fastest copy bandwidth this run measured (or one copy of those bytes, where that takes longer)\n";
    }
    return 0;
  };
}

}  // namespace celtune::cli
