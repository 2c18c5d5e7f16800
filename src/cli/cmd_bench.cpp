// celtune bench: celtune's kernels against the unfused path and the floors, all
// measured in one process on one device.
//
// Rows per problem (flce):
//   floor        each GEMM the algorithm needs, full size, timed alone (sum shown)
//   celtune      flce with --config or the built-in default
//   unfused      the full [N,V] logits by cuBLASLt, the CE kernel, the two gradient
//                GEMMs: what a PyTorch eager step does (our flce with v_chunk = V and
//                row_chunk = N, which materialises the logits)
// and for the ce family on the same N×V logits: forward against the one-read
// floor and forward+backward against the one-read-plus-one-write floor, both at
// the copy bandwidth measured in the same run.
#include <iostream>

#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "kernels/backend.hpp"
#include "model/error.hpp"
#include "output.hpp"
#include "problem_args.hpp"
#include "tuners/measure.hpp"

namespace celtune::cli {
namespace {

struct BenchArgs {
  std::string device;
  std::vector<std::string> configs;
  int runs = 20;
  bool json = false, csv = false, no_ce = false, no_unfused = false;
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

}  // namespace

Action register_bench(CLI::App& app) {
  auto a = std::make_shared<BenchArgs>();
  auto* sub = app.add_subcommand("bench", "Time celtune's kernels against the unfused path and the GEMM and "
                                          "bandwidth floors (CUDA events, L2 flushed, median/p20/p80)");
  sub->add_option("--device", a->device, "CUDA ordinal (default: the first GPU); cpu times the CPU backend");
  sub->add_option("--config", a->configs, "Kernel config(s) as JSON to time (default: the built-in default)");
  sub->add_option("--runs", a->runs, "Timed runs per measurement, after warm-up (at least 20)")
      ->check(CLI::Range(20, 10000))
      ->capture_default_str();
  sub->add_flag("--json", a->json, "Liger-Kernel benchmark-data schema (one record per kernel and metric)");
  sub->add_flag("--csv", a->csv, "CSV with the table's columns");
  sub->add_flag("--no-ce", a->no_ce, "Skip the ce-family rows");
  sub->add_flag("--no-unfused", a->no_unfused, "Skip the unfused reference path");
  add_problem_options(sub, a->problem);
  return [a] {
    if (a->json && a->csv) fail_usage("--json and --csv are exclusive");
    ProblemArgs pa = a->problem;
    if (!names_problem(pa)) pa.model = "llama3-8b", pa.tokens = "4096,8192,16384";  // the Llama-3-8B classifier
    if (pa.tokens.empty() && pa.shape.empty()) pa.tokens = "4096,8192,16384";
    const auto problems = build_problems(pa);
    auto backend = open_backend(a->device);
    const auto& dev = backend->device();
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
    for (const Problem& p0 : problems) {
      if (!a->json && !a->csv) std::cerr << "bench: " << p0.key() << '\n';
      const Floors f = backend->measure_floors(p0);
      const double flops1 = 2.0 * static_cast<double>(p0.tokens) * static_cast<double>(p0.hidden) *
                            static_cast<double>(p0.vocab);
      const int gemms = p0.mode == Mode::forward_backward ? 3 : 1;
      double floor = 0;
      for (double g : f.gemm_ms) floor += g;
      if (p0.family == Family::flce && f.available) {
        Row r{"gemm-floor", "cublaslt", std::string(to_string(p0.mode)), p0, std::to_string(f.gemm_ms.size()) + " GEMMs", {}, floor, 0, 0, 0};
        r.stats.median_ms = r.stats.p20_ms = r.stats.p80_ms = floor;
        r.tflops = gemms * flops1 / (floor * 1e-3) / 1e12;
        rows.push_back(r);
      }
      std::vector<KernelConfig> configs;
      for (const auto& js : a->configs) configs.push_back(parse_config_json(js));
      if (configs.empty()) configs.push_back(default_config(p0));
      if (p0.family == Family::flce) {
        for (const KernelConfig& c : configs) {
          if (c.v_chunk_for(p0) < p0.vocab && c.block_size > c.v_chunk_for(p0)) continue;
          Row r{"flce", "celtune", std::string(to_string(p0.mode)), p0, to_string(c), time(p0, c, seed++), floor, 0, 0,
                static_cast<double>(backend->scratch_bytes(p0, c))};
          r.tflops = gemms * flops1 / (r.stats.median_ms * 1e-3) / 1e12;
          rows.push_back(r);
        }
        if (!a->no_unfused) {
          KernelConfig u = default_config(p0);
          u.v_chunk = 0, u.row_chunk = 0;
          Row r{"flce", "unfused", std::string(to_string(p0.mode)), p0, "logits materialised", {}, floor, 0, 0,
                static_cast<double>(backend->scratch_bytes(p0, u))};
          try {
            r.stats = time(p0, u, seed++);
            r.tflops = gemms * flops1 / (r.stats.median_ms * 1e-3) / 1e12;
            rows.push_back(r);
          } catch (const Error& e) {
            std::cerr << "bench: unfused path skipped for " << p0.key() << ": " << e.what() << '\n';
          }
        }
      }
      if (!a->no_ce && f.copy_gb_per_s <= 0)  // say so rather than drop the rows silently
        std::cerr << "bench: ce rows skipped for " << p0.key() << ": no copy-bandwidth floor on " << dev.id << '\n';
      if (!a->no_ce && f.copy_gb_per_s > 0) {
        // ce on the N×V logits (for an flce problem: the logits it would have
        // materialised), forward against one read, forward+backward against one
        // read plus one write, at the copy bandwidth measured above.
        std::vector<Mode> modes{p0.mode};
        if (p0.family == Family::flce) modes = {Mode::forward, Mode::forward_backward};
        for (Mode m : modes) {
          Problem p = p0;
          p.family = Family::ce, p.hidden = 0, p.bias = false, p.mode = m;
          std::vector<KernelConfig> ce_configs{default_config(p)};
          if (p0.family == Family::ce) ce_configs = configs;
          const double elems = static_cast<double>(p.tokens) * static_cast<double>(p.vocab);
          const double bytes = elems * dtype_bytes(p.dtype) * (m == Mode::forward ? 1 : 2);
          for (KernelConfig c : ce_configs) {
            if (p0.family == Family::ce && a->configs.empty()) c = default_config(p);
            Row r{"ce", "celtune", std::string(to_string(m)), p, to_string(c), {},
                  bytes / (f.copy_gb_per_s * 1e9) * 1e3, 0, 0, static_cast<double>(backend->scratch_bytes(p, c))};
            try {
              r.stats = time(p, c, seed++);
              r.gbps = bytes / (r.stats.median_ms * 1e-3) / 1e9;
              rows.push_back(r);
            } catch (const Error& e) {
              std::cerr << "bench: ce " << to_string(c) << " skipped for " << p.key() << ": " << e.what() << '\n';
            }
          }
        }
      }
      if (!a->json && !a->csv && f.copy_gb_per_s > 0)
        std::cerr << "bench: copy bandwidth " << fmt("%.0f", f.copy_gb_per_s) << " GB/s (read + write)\n";
    }

    if (a->json) {
      // Liger-Kernel's benchmark-data schema: one record per (kernel, provider, mode, shape family).
      nlohmann::json out = nlohmann::json::array();
      for (const Row& r : rows) {
        nlohmann::json extra{{"H", r.p.hidden}, {"V", r.p.vocab}, {"dtype", to_string(r.p.dtype)},
                             {"config", r.config}, {"floor_ms", r.floor_ms}, {"device", dev.name}};
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
    Table t({"kernel", "provider", "mode", "N", "H", "V", "dtype", "config", "median ms", "p20 ms", "p80 ms",
             "x floor", "TFLOP/s", "GB/s", "extra mem"});
    for (const Row& r : rows)
      t.add({r.kernel, r.provider, r.mode, std::to_string(r.p.tokens), std::to_string(r.p.hidden),
             std::to_string(r.p.vocab), std::string(to_string(r.p.dtype)), r.config, fmt("%.3f", r.stats.median_ms),
             fmt("%.3f", r.stats.p20_ms), fmt("%.3f", r.stats.p80_ms),
             r.floor_ms > 0 ? fmt("%.3f", r.stats.median_ms / r.floor_ms) : "-", r.tflops > 0 ? fmt(r.tflops < 10 ? "%.3g" : "%.0f", r.tflops) : "-",
             r.gbps > 0 ? fmt("%.0f", r.gbps) : "-", r.extra_bytes > 0 ? human_bytes(r.extra_bytes) : "-"});
    if (a->csv) {
      t.print_csv(std::cout);
    } else {
      std::cout << "device: " << dev.id << " — " << dev.name << " (" << a->runs << " timed runs each"
                << (dev.id == "cpu" ? "; CPU backend: no cache flush, no floors)\n" : ", L2 flushed)\n");
      t.print(std::cout);
    }
    return 0;
  };
}

}  // namespace celtune::cli
