// celtune validate: run kernels against the references (fp64 on the CPU, or the
// cuBLAS+softmax GPU reference for large shapes) and judge each output.
#include <algorithm>
#include <charconv>
#include <chrono>
#include <filesystem>
#include <iostream>
#include <optional>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "kernels/backend.hpp"
#include "model/error.hpp"
#include "output.hpp"
#include "problem_args.hpp"
#include "db/store.hpp"
#include "kernels/space.hpp"
#include "validate/validate.hpp"

namespace celtune::cli {
namespace {

struct ValidateArgs {
  std::string device, from_db;
  bool all_configs = false;
  bool json = false;
  std::optional<uint64_t> seed;  // unset: a random seed, printed
  std::string config;
  std::string reference = "auto";
  bool verbose = false;
  ProblemArgs problem;
};

std::string worst_summary(const CaseResult& r) {
  if (!r.error.empty()) return "error";
  const OutputVerdict* worst = nullptr;
  double ratio = -1;
  // The error itself, also where the verdict judged what was left of it beyond an fp32 LSE's reach.
  auto error = [](const OutputVerdict& o) { return o.beyond_lse_reach ? o.kernel_raw.rel_l2 : o.kernel.rel_l2; };
  for (const auto& o : r.outputs) {
    const double q = error(o) / (o.baseline.rel_l2 + 1e-12);
    if (!o.pass) return o.name + ": " + o.why;
    if (q > ratio) ratio = q, worst = &o;
  }
  if (!worst) return "-";
  return worst->name + " " + fmt("%.2e", error(*worst)) + " (base " + fmt("%.2e", worst->baseline.rel_l2) + ")" +
         (worst->beyond_lse_reach ? " within an fp32 LSE's reach" : "");
}

void print_details(const CaseResult& r, bool all_outputs) {
  std::cout << (r.pass ? "\npass " : "\nFAIL ") << r.vcase.name << "  seed " << r.vcase.spec.seed << "\n  problem " << r.vcase.problem.key()
            << "\n  config  " << to_string(r.vcase.config) << '\n';
  if (!r.truth.empty()) std::cout << "  truth   " << r.truth << (r.reference_check.empty() ? "" : " (its check against fp64: " + r.reference_check + ")") << '\n';
  if (!r.error.empty()) std::cout << "  error: " << r.error << '\n';
  if (!r.deterministic) std::cout << "  two runs on the same inputs differ bitwise\n";
  for (const auto& o : r.outputs) {
    if (o.pass && !all_outputs) continue;
    const auto& k = o.kernel;
    std::cout << "  " << o.name << ": " << (o.pass ? "pass" : o.why);
    if (o.beyond_lse_reach)
      std::cout << "\n    error " << fmt("%.3e", o.kernel_raw.max_abs) << " max abs, " << fmt("%.3e", o.kernel_raw.rel_l2)
                << " rel L2; beyond an fp32 LSE's reach:";
    std::cout << "\n    max abs " << fmt("%.3e", k.max_abs) << ", max rel "
              << fmt("%.3e", k.max_rel) << ", rel L2 " << fmt("%.3e", k.rel_l2) << ", mismatches " << k.mismatches
              << "/" << k.count << ", non-finite " << k.nonfinite << "\n    baseline (" << o.baseline_path
              << " low precision): max abs "
              << fmt("%.3e", o.baseline.max_abs) << ", rel L2 " << fmt("%.3e", o.baseline.rel_l2) << '\n';
    for (const auto& m : k.first)
      std::cout << "    [" << m.index << "] got " << fmt("%.8g", m.got) << "  ref " << fmt("%.8g", m.ref) << '\n';
  }
}

}  // namespace

Action register_validate(CLI::App& app) {
  auto a = std::make_shared<ValidateArgs>();
  auto* sub = app.add_subcommand(
      "validate",
      "Check kernels against the fp64 reference (or, for large shapes, the cuBLAS+softmax GPU reference): each output (loss, per-token loss, LSE, dZ/dX/dW/db) must be no "
      "worse than the unfused low-precision path plus a stated margin. With no problem flags, runs the default case "
      "matrix (every option and dtype, odd shapes, one and two passes, edge targets, large logits).");
  sub->add_option("--device", a->device, "cpu or a CUDA ordinal (default: the first CUDA GPU, else cpu)");
  sub->add_flag("--json", a->json, "Print the full results as JSON");
  // Checked as text: CLI11 clamped 99999999999999999999 to the largest value, and
  // a negative seed meant "random", so neither replayed what the user typed.
  sub->add_option("--seed", a->seed, "Seed of the random inputs (printed on every run; replays a failure)")
      ->transform(whole_number("SEED"));
  sub->add_option("--config", a->config,
                  "Explicit kernel config as JSON, e.g. '{\"block_size\":512,\"v_chunk\":8192}' (without it, a named "
                  "problem runs the built-in default this device runs, within CELTUNE_MAX_SCRATCH)");
  sub->add_flag("--verbose", a->verbose, "Print per-output details for passing cases too");
  sub->add_option("--reference", a->reference,
                  "The truth: fp64 (CPU, exact, N·V·H work), gpu (cuBLASLt fp32 GEMMs + a plain three-pass fp32 "
                  "softmax, itself first checked against fp64 at a small shape), or auto: gpu when a GPU is present "
                  "and fp64 would exceed ~8.6e9 operations")
      ->check(CLI::IsMember({"auto", "fp64", "gpu"}));
  sub->add_flag("--all-configs", a->all_configs,
                "Every config of the family's search space for the problem, each checked at a reduced shape that "
                "keeps its code paths (one or two passes, one or several row chunks)");
  sub->add_option("--from-db", a->from_db,
                  "Every best config stored for this device in FILE (the deployment check after shipping a database "
                  "or upgrading a driver), each at a reduced shape that keeps its code paths");
  add_problem_options(sub, a->problem);
  return [a, sub] {
    // The default matrix and --from-db choose their own problems: a dtype, mode
    // or loss option given with neither a problem was ignored without a word
    // (validate --dtype fp32 ran every dtype and exited 0).
    if (!names_problem(a->problem) || !a->from_db.empty())
      for (const char* opt : {"--family", "--dtype", "--target-dtype", "--ignore-index", "--reduction",
                              "--label-smoothing", "--softcap", "--z-loss", "--bias", "--mode"})
        if (sub->count(opt) > 0)
          fail_usage(std::string(opt) + " describes a problem, and " +
                     (a->from_db.empty() ? "none is given (--shape, --model with --tokens, …): the default matrix"
                                         : "--from-db") +
                     " chooses its own; give a problem to validate with it");
    auto backend = open_backend(a->device);
    const auto& dev = backend->device();
    const uint64_t seed = a->seed ? *a->seed
                                       : static_cast<uint64_t>(std::chrono::system_clock::now().time_since_epoch().count()) % 1000000007ull;
    std::vector<ValidationCase> cases;
    // Read, and refused when malformed, whichever cases run: the default matrix,
    // --all-configs and --from-db ran with CELTUNE_MAX_SCRATCH=garbage and
    // passed, where every other command refuses it (a helper's probe).
    const size_t budget = defaults_scratch_budget();
    if (!a->from_db.empty() && (a->all_configs || names_problem(a->problem) || !a->config.empty()))
      fail_usage("--from-db validates the database's own problems and configs: not with --all-configs, a problem or "
                 "--config");
    if (a->all_configs && !a->config.empty()) fail_usage("--all-configs and --config both choose the configs; use one");
    if (!a->from_db.empty()) {
      require_database(a->from_db);
      db::Store store(a->from_db, db::Access::read_only);
      store.check_sound();
      uint64_t s = seed;
      for (const auto& b : store.best_entries()) {
        if (b.device.name != dev.name || b.device.arch != dev.arch) continue;
        // A stored row the shared rules refuse is damage (import never stores
        // one), not a kernel that failed validation: exit 3 naming the row. The
        // record's rules (its device's too: impl fused on a cpu row), as db list
        // marks INVALID and the runtime skips, not the config's alone.
        if (const std::string rule = db::broken_record(b); !rule.empty())
          fail_env("database " + a->from_db + ": the best config stored for " + b.problem.key() + " is invalid (" +
                   rule + "): the database is damaged");
        ValidationCase vc = reduced_case(b.problem, b.config, s++);
        vc.name = "db " + b.problem.key();
        cases.push_back(vc);
      }
      if (cases.empty()) fail_env("database " + a->from_db + " holds no best config for " + dev.name);
    } else if (a->all_configs) {
      if (!names_problem(a->problem)) fail_usage("--all-configs needs a problem (--shape, --model with --tokens, …)");
      uint64_t s = seed;
      for (const Problem& p : build_problems(a->problem)) {
        SpaceLimits limits;
        limits.supported = [&](const Problem& q, const KernelConfig& c, std::string* why) {
          return backend->supports(q, c, why);
        };
        for (const auto& cand : enumerate(space_for(p), p, limits)) {
          ValidationCase vc = reduced_case(p, cand.config, s++);
          vc.name = p.key() + " " + to_string(cand.config);
          cases.push_back(vc);
        }
      }
    } else if (names_problem(a->problem)) {
      uint64_t s = seed;
      // With no --config, the built-in default this device runs (the fused
      // path on sm_90, as bench times): default_config alone was the cuBLASLt
      // path's, so the default a Hopper user runs went unchecked here.
      for (const Problem& p : build_problems(a->problem)) {
        ValidationCase vc;
        vc.problem = p;
        vc.config = a->config.empty()
                        ? device_default(p, [&](const KernelConfig& c) { return backend->supports(p, c); }, budget)
                        : parse_config_json(a->config);
        validate_config(p, vc.config);
        // A config this backend cannot run is no verdict on the kernels (it was
        // reported as a failed case, exit 1): check() says why, as bench does.
        if (!a->config.empty()) backend->check(p, vc.config);
        vc.spec.seed = s++;
        vc.name = p.key();
        cases.push_back(vc);
      }
    } else {
      if (!a->config.empty()) fail_usage("--config needs a problem (--shape, --tokens/--hidden/--vocab or --model)");
      cases = default_matrix(seed, dev.id != "cpu");
      // The fused sm_90 cases need a Hopper GPU and a build with CUTLASS: say
      // once why they are left out rather than failing each.
      std::string why;
      const auto fused = [](const ValidationCase& vc) { return vc.config.impl == KernelConfig::Impl::fused; };
      const auto first = std::find_if(cases.begin(), cases.end(), fused);
      if (first != cases.end() && !backend->supports(first->problem, first->config, &why)) {
        const auto n = std::count_if(cases.begin(), cases.end(), fused);
        std::erase_if(cases, fused);
        if (!a->json) std::cerr << "note: " << n << " fused sm_90 cases left out: " << why << "\n";
      }
    }
    std::string why_device = a->device.empty()
                                 ? (dev.id == "cpu" ? " (default: no CUDA GPU found, using the CPU backend)"
                                                    : " (default: first CUDA GPU)")
                                 : "";
    // Refused before the header below: stdout got a run's first lines and then
    // nothing, where every other refusal leaves it empty.
    const Truth truth = parse_truth(a->reference);
    if (truth == Truth::gpu && cuda_device_count() == 0)
      fail_env("--reference gpu needs a CUDA GPU and a build with CUDA; use fp64 or auto");
    // Flushed: the seed replays a run, and a run killed before its report (a
    // timeout, a full-size shape on the CPU) left a redirected file empty.
    if (!a->json)
      std::cout << "device: " << dev.id << " — " << dev.name << why_device << "\nseed: " << seed << "\n\n"
                << std::flush;

    std::vector<CaseResult> results;
    int failed = 0;
    Table t({"case", "config", "result", "det", "truth", "worst output (rel L2 vs truth)", "s"});
    // A case at a full-size shape can take minutes on the CPU: say which case
    // runs, on stderr so stdout stays the table or JSON. On a terminal one line
    // is rewritten in place; piped, one line per finished case, flushed as it
    // ends, so a log shows progress while the run goes on.
    const bool tty = isatty(2);
    for (const auto& vc : cases) require_host_memory(vc.problem);  // exit 3 before any case runs
    // Nor hours of CPU work by surprise (Llama-3-8B at N = 4096 with no GPU: the
    // kernels twice, the fp64 truth and the unfused baseline, ~2.6e13 operations).
    // Past ten minutes it runs only when --reference fp64 names the CPU truth.
    {
      const bool cpu_kernels = dev.id == "cpu", have_gpu = cuda_device_count() > 0;
      double ops = 0.0;
      for (const auto& vc : cases) {
        const double c = fp64_cost(vc.problem);
        ops += (cpu_kernels ? 2.0 * c : 0.0) + (gpu_truth(vc.problem, truth, have_gpu) ? 0.0 : 2.0 * c);
      }
      const CpuWork work = cpu_work(ops);
      if (work.minutes > 10.0) {
        const std::string what = "these cases need " + work.what;
        if (truth != Truth::fp64)
          fail_usage(what + "; validate them on a CUDA GPU (its reference judges large shapes), or pass --reference "
                            "fp64 to run them here anyway");
        if (!a->json) std::cerr << "note: " << what << "\n";
      }
    }
    for (const auto& vc : cases) {
      const std::string at = "[" + std::to_string(results.size() + 1) + "/" + std::to_string(cases.size()) + "] ";
      if (tty) std::cerr << "\r\033[K" << at << vc.name << " …" << std::flush;
      results.push_back(validate_case(*backend, vc, truth));
      const auto& r = results.back();
      if (!tty) std::cerr << at << vc.name << "  " << (r.pass ? "pass" : "FAIL") << "  " << fmt("%.2f", r.seconds) << " s"
                          << std::endl;
      failed += !r.pass;
      t.add({vc.name, to_string(vc.config), r.pass ? "pass" : "FAIL", r.deterministic ? "yes" : "NO",
             r.truth.empty() ? "-" : r.truth, worst_summary(r), fmt("%.2f", r.seconds)});
    }
    if (tty) std::cerr << "\r\033[K" << std::flush;
    if (a->json) {
      nlohmann::json j{{"device", dev},
                       {"seed", seed},
                       {"cases", results},
                       {"passed", static_cast<int>(results.size()) - failed},
                       {"failed", failed}};
      std::cout << j.dump(2) << '\n';
    } else {
      t.print(std::cout);
      for (const auto& r : results)
        if (!r.pass || a->verbose) print_details(r, a->verbose);
      std::cout << '\n' << (results.size() - static_cast<size_t>(failed)) << " passed, " << failed << " failed\n";
    }
    return failed ? static_cast<int>(Status::failure) : 0;
  };
}

}  // namespace celtune::cli
