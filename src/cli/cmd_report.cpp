// celtune report: SVG plots of a tuning database.
//   vchunk-<n>.svg   time against v_chunk, one line per block_size, for a problem
//                    (each point: the fastest measured config with that pair)
//   speedup-<n>.svg  tuned-over-default speedup per problem
// One plot per device and kernel build (kernel_hash): the tuner and the runtime
// never compare times across either, so neither does a plot.
#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "commands.hpp"
#include "db/store.hpp"
#include "kernels/kernel_hash.hpp"
#include "model/error.hpp"
#include "output.hpp"
#include "svg.hpp"

namespace celtune::cli {
namespace {

struct ReportArgs {
  std::string db, out = "celtune-report", problem, device;
};

// The shape, and each option where it is not the plain default: two problems
// that differed only in softcap were drawn under one title.
std::string short_key(const Problem& p) {
  const LossOptions plain;
  std::string k = std::string(to_string(p.family)) + " N" + std::to_string(p.tokens) + " H" +
                  std::to_string(p.hidden) + " V" + std::to_string(p.vocab) + " " + std::string(to_string(p.dtype));
  if (p.target_type != Problem{}.target_type) k += " " + std::string(to_string(p.target_type));
  if (p.loss.ignore_index != plain.ignore_index) k += " ign" + std::to_string(p.loss.ignore_index);
  if (p.loss.reduction != plain.reduction) k += " " + std::string(to_string(p.loss.reduction));
  if (p.loss.label_smoothing != plain.label_smoothing) k += " ls" + format_double(p.loss.label_smoothing);
  if (p.loss.softcap != plain.softcap) k += " cap" + format_double(p.loss.softcap);
  if (p.loss.z_loss != plain.z_loss) k += " z" + format_double(p.loss.z_loss);
  if (p.bias) k += " bias";
  return k + " " + std::string(to_string(p.mode));
}

// Whose times a plot holds: a device, and the kernel build that ran there.
using Group = std::pair<std::string, std::string>;  // device name, kernel hash
std::string group_title(const Group& g) {
  return g.first + " (kernels " + g.second.substr(0, 8) + (g.second == kKernelSourceHash ? ", this build's)" : ")");
}

}  // namespace

Action register_report(CLI::App& app) {
  auto a = std::make_shared<ReportArgs>();
  auto* sub = app.add_subcommand("report", "Draw SVG plots of a tuning database: time against v_chunk per block_size "
                                           "for each problem, and the tuned-over-default speedup per shape");
  sub->add_option("--db", a->db, "Database file (default: as for tune)");
  sub->add_option("-o,--output", a->out, "Output folder")->capture_default_str();
  sub->add_option("--problem", a->problem, "Only this problem key for the v_chunk plot (default: every problem)");
  sub->add_option("--device", a->device, "Only this device name (default: every device)");
  return [a] {
    const std::string path = a->db.empty() ? default_db_path() : a->db;
    require_database(path);
    db::Store s(path, db::Access::read_only);
    s.check_sound();
    std::error_code ec;
    const bool out_existed = std::filesystem::exists(a->out, ec);
    std::filesystem::create_directories(a->out, ec);
    if (ec || !std::filesystem::is_directory(a->out))
      fail_env("cannot use " + a->out + " as the output folder" + (ec ? ": " + ec.message() : ": not a directory"));
    // A report refused after this point (no such problem, an empty database)
    // takes away the folder it made, if it is still empty.
    struct MadeFolder {
      std::filesystem::path path;
      bool armed;
      ~MadeFolder() {
        std::error_code e;
        if (armed && std::filesystem::is_empty(path, e) && !e) std::filesystem::remove(path, e);
      }
    } made{a->out, !out_existed};
    const auto meas = s.measurements();
    const auto best = s.best_entries();
    // Time against v_chunk: per (device, kernel build, problem), min over the
    // other parameters.
    using PlotKey = std::pair<Group, std::string>;
    std::map<PlotKey, std::map<int, std::map<int64_t, double>>> grid;
    std::map<PlotKey, Problem> problems;
    // A row the rules refuse (damage: import never stores one; a config they
    // refuse, a status neither ok nor failed, a missing median, once plotted at
    // 0 ms) is not plotted as a point of the search, and a best entry holding
    // one is marked.
    size_t broken_points = 0;
    std::string first_broken;
    for (const auto& m : meas) {
      if (!a->problem.empty() && m.problem.key() != a->problem) continue;
      if (!a->device.empty() && m.device.name != a->device) continue;
      if (const std::string rule = db::broken_record(m); !rule.empty()) {
        if (!broken_points++) first_broken = m.problem.key() + " (" + to_string(m.config) + "): " + rule;
        continue;
      }
      if (m.status != "ok") continue;
      const PlotKey key{{m.device.name, m.kernel_hash}, m.problem.key()};
      problems[key] = m.problem;
      double& t = grid[key][m.config.block_size].try_emplace(m.config.v_chunk_for(m.problem), INFINITY).first->second;
      t = std::min(t, m.stats.median_ms);
    }
    if (!a->problem.empty()) {
      (void)Problem::from_key(a->problem);  // a malformed key is a usage error naming what is wrong
      if (grid.empty()) fail_usage("--problem " + a->problem + ": no measurements of that problem in " + path);
    }
    if (broken_points)
      write_warning(std::cerr, "database " + path + ": " + std::to_string(broken_points) +
                                   " measurement rows are damaged, left out of the v_chunk plots (the "
                                   "first: " + first_broken + ")");
    // Every plot is drawn before anything is written (see the summary below).
    std::vector<std::pair<std::filesystem::path, std::string>> plots;
    int n = 0;
    for (const auto& [key, by_block] : grid) {
      std::set<int64_t> vcs;
      for (const auto& [bs, by_vc] : by_block)
        for (const auto& [vc, t] : by_vc) vcs.insert(vc);
      const Problem& p = problems[key];
      std::vector<std::string> xs;
      for (int64_t v : vcs) xs.push_back(v >= p.vocab ? "V (" + std::to_string(v) + ")" : std::to_string(v));
      std::vector<Series> series;
      for (const auto& [bs, by_vc] : by_block) {
        Series sr{"block_size " + std::to_string(bs), {}};
        for (int64_t v : vcs) sr.y.push_back(by_vc.count(v) ? by_vc.at(v) : NAN);
        series.push_back(sr);
      }
      plots.emplace_back(std::filesystem::path(a->out) / ("vchunk-" + std::to_string(++n) + ".svg"),
            line_chart(short_key(p) + " — " + group_title(key.first), "v_chunk (vocabulary columns per chunk)",
                       "median time, ms (fastest config per point)", xs, series));
    }
    std::map<Group, std::pair<std::vector<std::string>, std::vector<double>>> bars;  // labels, speedups
    for (const auto& b : best) {
      if (!a->device.empty() && b.device.name != a->device) continue;
      const std::string note = db::broken_best_note(path, b);
      if (!note.empty()) write_warning(std::cerr, note + "; its bar is marked \"invalid config\"");
      auto& [labels, speedups] = bars[{b.device.name, b.kernel_hash}];
      labels.push_back(short_key(b.problem) + (note.empty() ? "" : " (invalid config)"));
      speedups.push_back(b.speedup);
    }
    int n_speedup = 0;
    for (const auto& [g, bar] : bars)
      plots.emplace_back(std::filesystem::path(a->out) / ("speedup-" + std::to_string(++n_speedup) + ".svg"),
            bar_chart("Tuned over built-in default — " + group_title(g), "speedup (default time / tuned time)",
                      bar.first, bar.second, 1.0));
    // The folder shows this database only: plots of an earlier report that this
    // one did not rewrite (more problems or devices then) would pass for this
    // database's. speedup.svg is the one chart of reports before 2026-11-30.
    std::vector<std::filesystem::path> stale;
    if (!plots.empty())
      for (const auto& e : std::filesystem::directory_iterator(a->out, ec)) {
        // Only regular files: a report writes nothing else, and a directory (or
        // link) of such a name is the user's (one was removed, an empty one, and
        // a full one failed the report after its plots were written).
        std::error_code st;
        if (!std::filesystem::is_regular_file(e.symlink_status(st)) || st) continue;
        const std::string name = e.path().filename().string();
        // <prefix><k>.svg with k past this report's last of that kind (the
        // prefix and ".svg" cannot overlap: such a name is longer than both).
        auto numbered_past = [&](std::string_view prefix, int last) {
          if (!name.starts_with(prefix) || !name.ends_with(".svg") || name.size() <= prefix.size() + 4) return false;
          const char *digits = name.data() + prefix.size(), *end = name.data() + name.size() - 4;
          int k = 0;
          return std::from_chars(digits, end, k).ptr == end && k > last;
        };
        if (numbered_past("vchunk-", n) || numbered_past("speedup-", n_speedup) || name == "speedup.svg")
          stale.push_back(e.path());
      }
    // A filter that matches nothing is the caller's (as an unparsable --problem
    // is); an empty database is the environment's.
    if (plots.empty()) {
      if (!a->problem.empty() || !a->device.empty())
        fail_usage("database " + path + " holds no measurements to plot for the --problem/--device given");
      fail_env("database " + path + " holds no measurements to plot");
    }
    // Every plot is staged beside its target first, then the summary is printed
    // and flushed, then the plots are renamed into place: a plot that cannot be
    // written (a directory or a device where it goes, a folder not writable, a
    // full disk) or a summary that cannot be (`> /dev/full`) exits having
    // changed nothing in the folder, where writing plot by plot left it half
    // the new report and half the old one, after printing "wrote" for both.
    std::vector<std::string> staged;
    try {
      for (const auto& [f, text] : plots) {
        const std::string dest = f.string();
        namespace fs = std::filesystem;
        const auto st = fs::symlink_status(dest, ec);
        if (!ec && fs::exists(st) && !fs::is_regular_file(st))
          fail_env("cannot write " + dest + ": it exists and is not a regular file; the folder is unchanged");
        staged.push_back(stage_file(dest, [&](std::ostream& o) { o << text; }));
      }
      for (const auto& [f, text] : plots) std::cout << printable_message("wrote " + f.string()) << '\n';
      for (const auto& f : stale) std::cout << printable_message("removed " + f.string() + " (an earlier report's)") << '\n';
      flush_stdout();
      for (size_t i = 0; i < plots.size(); ++i) commit_file(staged[i], plots[i].first.string());
    } catch (...) {
      // A renamed temporary is gone already; what a failed rename left is not.
      for (const auto& t : staged) discard_staged(t);
      throw;
    }
    for (const auto& f : stale)
      if (!std::filesystem::remove(f, ec) && ec)
        fail_env("cannot remove " + f.string() + " (an earlier report's plot): " + ec.message());
    return 0;
  };
}

}  // namespace celtune::cli
