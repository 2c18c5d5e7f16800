// celtune db: list, export, import and merge tuning databases.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>

#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "db/store.hpp"
#include "model/error.hpp"
#include "output.hpp"

namespace celtune::cli {

std::string default_db_path() {
  if (const char* e = std::getenv("CELTUNE_DB"); e && *e) return e;
  if (const char* x = std::getenv("XDG_DATA_HOME"); x && *x) return std::string(x) + "/celtune/celtune.sqlite";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.local/share/celtune/celtune.sqlite";
  return "celtune.sqlite";
}

namespace {

struct DbArgs {
  std::string db;
  bool json = false;
  std::string out;            // export -o, merge -o
  std::string input;          // import FILE
  std::vector<std::string> merge_inputs;
};

std::string db_path(const DbArgs& a) { return a.db.empty() ? default_db_path() : a.db; }

void require_exists(const std::string& path) {
  if (!std::filesystem::exists(path)) fail_env("database " + path + " does not exist");
}

int do_list(const DbArgs& a) {
  require_exists(db_path(a));
  db::Store s(db_path(a), db::Access::read_only);
  const auto best = s.best_entries();
  if (a.json) {
    std::cout << nlohmann::json(best).dump(2) << '\n';
    return 0;
  }
  Table t({"device", "problem", "config", "median ms", "p20–p80 ms", "speedup", "kernel hash", "when"});
  for (const auto& b : best)
    t.add({b.device.name, b.problem.key(), to_string(b.config), fmt("%.4f", b.stats.median_ms),
           fmt("%.4f", b.stats.p20_ms) + "–" + fmt("%.4f", b.stats.p80_ms), fmt("%.2fx", b.speedup),
           b.kernel_hash.substr(0, 12), b.created_at});
  t.print(std::cout);
  std::cout << best.size() << " best configs, " << s.measurements().size() << " measurements in " << s.path()
            << '\n';
  return 0;
}

int do_export(const DbArgs& a) {
  require_exists(db_path(a));
  db::Store s(db_path(a), db::Access::read_only);
  if (a.out.empty() || a.out == "-") {
    db::export_jsonl(s, std::cout);
    return 0;
  }
  // Write beside the target and rename, so a failed export never leaves half a file.
  const std::string tmp = a.out + ".tmp";
  {
    std::ofstream f(tmp);
    if (!f) fail_env("cannot write " + tmp);
    db::export_jsonl(s, f);
    if (!f.flush()) fail_env("error writing " + tmp);
  }
  std::filesystem::rename(tmp, a.out);
  return 0;
}

int do_import(const DbArgs& a) {
  std::ifstream in(a.input);
  if (!in) fail_env("cannot read " + a.input);
  db::Store s(db_path(a), db::Access::read_write);
  const auto n = db::import_jsonl(s, in);
  std::cout << "imported " << n.measurements << " measurements and " << n.best_offered << " best configs ("
            << n.best_kept << " kept as fastest) into " << s.path() << '\n';
  return 0;
}

int do_merge(const DbArgs& a) {
  if (a.merge_inputs.size() != 2) fail_usage("db merge takes two input databases: A B -o OUT");
  for (const auto& in : a.merge_inputs) require_exists(in);
  // OUT may already exist (even be A or B): its rows take part in the merge and
  // none is lost; per (device, problem) the fastest best entry wins.
  db::Store out(a.out, db::Access::read_write);
  db::ImportCounts total;
  for (const auto& in : a.merge_inputs) {
    if (std::filesystem::exists(a.out) && std::filesystem::equivalent(in, a.out)) continue;
    db::Store src(in, db::Access::read_only);
    const auto n = db::merge_into(out, src);
    total.measurements += n.measurements, total.best_offered += n.best_offered, total.best_kept += n.best_kept;
  }
  std::cout << "merged " << total.measurements << " measurements and " << total.best_offered << " best configs ("
            << total.best_kept << " won) into " << a.out << '\n';
  return 0;
}

}  // namespace

Action register_db(CLI::App& app) {
  auto a = std::make_shared<DbArgs>();
  auto* sub = app.add_subcommand("db", "Manage tuning databases: list, export, import, merge");
  sub->require_subcommand(1);
  sub->add_option("--db", a->db, "Database file (default: $CELTUNE_DB, else $XDG_DATA_HOME/celtune/celtune.sqlite, "
                                 "else ~/.local/share/celtune/celtune.sqlite)");
  auto* list = sub->add_subcommand("list", "List the best config stored per device and problem");
  list->add_flag("--json", a->json, "Print JSON");
  auto* exp = sub->add_subcommand("export", "Write every best config and measurement as JSON lines (sorted)");
  exp->add_flag("--jsonl")->description("JSON lines (the only format; accepted for clarity)");
  exp->add_option("-o,--output", a->out, "Output file (default: standard output)");
  auto* imp = sub->add_subcommand("import", "Read JSON lines into the database (all or nothing; faster best wins)");
  imp->add_option("file", a->input, "JSON-lines file from 'celtune db export'")->required();
  auto* mrg = sub->add_subcommand("merge", "Merge two databases into OUT; per device and problem the faster best "
                                           "config wins; OUT's own rows are kept");
  mrg->add_option("inputs", a->merge_inputs, "The two databases A B")->required()->expected(2);
  mrg->add_option("-o,--output", a->out, "Output database")->required();
  return [a, list, exp, imp, mrg] {
    if (list->parsed()) return do_list(*a);
    if (exp->parsed()) return do_export(*a);
    if (imp->parsed()) return do_import(*a);
    if (mrg->parsed()) return do_merge(*a);
    fail_usage("db needs a subcommand: list, export, import or merge");
  };
}

}  // namespace celtune::cli
