// celtune lookup: the config the runtime would use for a problem, where it came
// from (its tag), and the database entry behind it. Uses the runtime's own
// resolver; opens the database read-only and never creates or changes a file.
// With a missing or damaged database it found it still answers (tag default,
// exit 0), as the runtime does; one named with --db must be usable (exit 3).
#include <iostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "db/store.hpp"
#include "kernels/backend.hpp"
#include "kernels/kernel_hash.hpp"
#include "model/error.hpp"
#include "output.hpp"
#include "problem_args.hpp"
#include "runtime/resolve.hpp"

namespace celtune::cli {

std::unique_ptr<runtime::Resolver> open_resolver(const std::string& named, std::shared_ptr<const Backend> backend) {
  // The runtime warns and waits the default on a malformed CELTUNE_BUSY_TIMEOUT_MS
  // (a training job must not stop for it); the CLI refuses it, exit 2.
  db::busy_timeout_ms();
  // So does a --db it names that is missing or damaged (a typo answered with the
  // built-in default and exit 0); the databases it only finds stay warnings.
  if (!named.empty()) {
    require_database(named);
    db::Store(named, db::Access::read_only).check_sound();
  }
  const DeviceInfo dev = backend->device();
  return std::make_unique<runtime::Resolver>(runtime::find_databases(named), dev, kKernelSourceHash, std::cerr,
                                             runtime::backend_checks(std::move(backend)));
}

void require_named_database_used(runtime::Resolver& resolver, const std::string& named, const std::string& command) {
  if (named.empty()) return;
  for (const auto& [path, ok] : resolver.databases())
    if (!ok && path == named)
      fail_env("database " + named + " is unusable (the warning above says why); " + command + " --db needs one it can read");
}

Action register_lookup(CLI::App& app) {
  struct Args {
    std::string device, db, config;
    bool json = false;
    ProblemArgs problem;
  };
  auto a = std::make_shared<Args>();
  auto* sub = app.add_subcommand("lookup",
                                 "Print the config the runtime would use for a problem, its source tag (explicit, env, "
                                 "exact, nearest, same-arch, default) and the database entry it came from");
  sub->add_option("--device", a->device, "cpu or a CUDA ordinal (default: the first CUDA GPU, else cpu)");
  sub->add_option("--db", a->db,
                  "Database file read first; then $CELTUNE_DB, the user's database, celtune.sqlite beside libceltune "
                  "(as the runtime reads them); opened read-only");
  sub->add_option("--config", a->config, "An explicit config (JSON), as a call would pass it");
  sub->add_flag("--json", a->json, "Print JSON");
  add_problem_options(sub, a->problem);
  return [a] {
    if (!names_problem(a->problem)) fail_usage("lookup needs a problem: --tokens N --hidden H --vocab V, or --shape");
    const auto problems = build_problems(a->problem);
    std::shared_ptr<const Backend> backend = open_backend(a->device);
    const DeviceInfo dev = backend->device();
    const auto resolver_owner = open_resolver(a->db, backend);
    runtime::Resolver& resolver = *resolver_owner;
    std::vector<runtime::Resolved> resolved;
    for (const Problem& p : problems) resolved.push_back(resolver.resolve(p, a->config.empty() ? nullptr : a->config.c_str()));
    // Damage that shows only when rows are read (a page past the header, a
    // schema that lies about itself), or a lock held past the busy timeout,
    // makes the resolver drop the database: asked after resolving, so the
    // "searched" line says it, and a --db dropped is exit 3 too.
    require_named_database_used(resolver, a->db, "lookup");
    std::string dbs;
    for (const auto& [path, ok] : resolver.databases()) dbs += (dbs.empty() ? "" : ", ") + path + (ok ? "" : " (unusable)");
    nlohmann::json out = nlohmann::json::array();
    for (size_t k = 0; k < problems.size(); ++k) {
      const Problem& p = problems[k];
      const runtime::Resolved& r = resolved[k];
      resolver.check_given(p, r, "--config");  // a fused config on the CPU printed as if it would run
      nlohmann::json j{{"problem", p.key()}, {"config", r.config}, {"tag", runtime::to_string(r.source)},
                       {"database", r.database}, {"skipped", r.skipped}};
      if (r.entry) j["entry"] = *r.entry;
      out.push_back(j);
      if (a->json) continue;
      // Names and versions come from the database's rows: printed escaped, as
      // db list prints them (an escape sequence in a device name reached the terminal).
      std::ostringstream text;
      text << "problem   " << p.key() << "\ndevice    " << dev.id << " (" << dev.name << ", " << dev.arch
           << ")\nconfig    " << to_string(r.config) << "\n          " << nlohmann::json(r.config).dump()
           << "\ntag       " << runtime::to_string(r.source) << "\ndatabase  "
           << (r.database.empty() ? "(no entry)" : r.database) << "\nsearched  " << (dbs.empty() ? "(none found)" : dbs)
           << '\n';
      if (r.entry)
        text << "entry     " << r.entry->device.name << ", N=" << r.entry->problem.tokens << ", median "
             << fmt("%.3f", r.entry->stats.median_ms) << " ms, " << fmt("%.2fx", r.entry->speedup)
             << " over default, kernel " << r.entry->kernel_hash << ", celtune " << r.entry->celtune_version << ", "
             << r.entry->created_at << '\n';
      for (const auto& s : r.skipped) text << "skipped   " << s << '\n';
      std::cout << printable_message(text.str());
      std::cout << '\n';
    }
    if (a->json) std::cout << db::dump_text(out, 2) << '\n';
    return 0;
  };
}

}  // namespace celtune::cli
