// celtune db: list, export, import and merge tuning databases.

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>

#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "db/paths.hpp"
#include "db/store.hpp"
#include "kernels/kernel_hash.hpp"
#include "model/error.hpp"
#include "new_database.hpp"
#include "output.hpp"

namespace celtune::cli {

std::string default_db_path() {
  if (const char* e = std::getenv("CELTUNE_DB"); e && *e) return e;
  const std::string user = db::user_database_path();
  // A ./celtune.sqlite fallback was a file the runtime never reads (and, run
  // from beside libceltune, the shipped database): say what to set instead.
  if (user.empty())
    fail_env("no database given, and neither an absolute HOME nor an absolute XDG_DATA_HOME is set to place the user's database; pass "
             "--db FILE or set CELTUNE_DB");
  return user;
}

void require_database(const std::string& path) {
  std::error_code ec;
  const bool there = std::filesystem::exists(path, ec);
  if (ec) fail_env("cannot reach database " + path + ": " + ec.message());
  if (!there) fail_env("database " + path + " does not exist");
}

void require_db_folder(const std::string& path) {
  const auto parent = std::filesystem::path(path).parent_path();
  std::error_code ec;
  if (!parent.empty() && !std::filesystem::is_directory(parent, ec))
    fail_env("cannot create database " + path + ": its folder " + parent.string() + " does not exist");
}

// Names a writer must not create or open a database under.
void refuse_unsafe_db_name(const std::string& path) {
  namespace fs = std::filesystem;
  const std::string base = db::journal_owner(path);
  std::error_code ec;
  if (!base.empty() && fs::is_regular_file(base, ec))
    fail_usage("refusing to write a database as " + path + ": it is a journal file of database " + base +
               ", which SQLite would delete or replay");
  // SQLite keeps "-journal" beside a new database while it writes the schema: a
  // longer name fails there.
  if (const size_t limit = name_max(path);
      fs::path(path).filename().string().size() + 8 > limit && !fs::exists(path, ec))
    fail_usage("a database's file name must be at most " + std::to_string(limit - 8) +
               " bytes here, room for SQLite's \"-journal\" beside it: " + path);
  // A link to a file not there yet: the new database was made beside it (its
  // summary printed), then its placing failed or went through the link as if
  // another process had made it meanwhile.
  if (fs::is_symlink(fs::symlink_status(path, ec)) && !fs::exists(path, ec))
    fail_env("refusing to create database " + path + " through a symbolic link to " +
             fs::read_symlink(path, ec).string() + ", which does not exist: create it there, or name it directly");
}

std::string writable_db_path(const std::string& named) {
  const char* env_db = std::getenv("CELTUNE_DB");
  const std::string path = named.empty() ? default_db_path() : named;
  refuse_unsafe_db_name(path);
  if (!named.empty() || (env_db && *env_db)) {
    require_db_folder(path);
    return path;
  }
  // A bare file name has no folder to make (create_directories("") threw).
  const auto parent = std::filesystem::path(path).parent_path();
  std::error_code ec;
  if (!parent.empty() && !std::filesystem::create_directories(parent, ec) && ec)
    fail_env("cannot create the database folder " + parent.string() + ": " + ec.message());
  return path;
}

namespace {

struct DbArgs {
  std::string db, db_after;  // --db before the verb (db --db X list) or after it (db list --db X)
  bool json = false;
  std::string out;            // export -o, merge -o
  bool skip_damaged = false;  // export --skip-damaged
  std::string input;          // import FILE
  std::vector<std::string> merge_inputs;
};

// The --db given, before or after the verb; "" when neither.
std::string named_db(const DbArgs& a) {
  if (!a.db.empty() && !a.db_after.empty() && a.db != a.db_after)
    fail_usage("--db given twice with different files: " + a.db + " and " + a.db_after);
  return a.db.empty() ? a.db_after : a.db;
}

std::string db_path(const DbArgs& a) {
  const std::string d = named_db(a);
  return d.empty() ? default_db_path() : d;
}


// "N records into PATH: …", each record counted once as what became of it
// (db::ImportCounts), the kinds that did not occur left out; `input` names
// where the records came from.
std::string outcome(const db::ImportCounts& n, const std::string& input, const std::string& path) {
  std::string parts;
  auto part = [&](int64_t k, const char* one, const char* many, const std::string& what) {
    if (k) parts += (parts.empty() ? "" : ", ") + std::to_string(k) + " " + (k == 1 ? one : many) + " " + what;
  };
  part(n.measurements_added, "measurement", "measurements", "added");
  part(n.measurements_stored, "measurement", "measurements", "stored already (the stored one kept)");
  part(n.measurements_repeated, "measurement", "measurements", "repeated in " + input + " (the first counted)");
  part(n.best_added, "best config", "best configs", "added");
  part(n.best_replaced, "best config", "best configs", "replaced the stored one");
  part(n.best_kept_stored, "best config", "best configs",
       "left out: the stored one is kept (as fast or faster, or tuned with this build's kernels where it was not)");
  part(n.best_beaten, "best config", "best configs", "left out for another in " + input + " (one a device and problem)");
  const int64_t total = n.records();
  return std::to_string(total) + (total == 1 ? " record" : " records") + " into " + path + ": " + parts;
}

int do_list(const DbArgs& a) {
  require_database(db_path(a));
  db::Store s(db_path(a), db::Access::read_only);
  s.check_sound();
  const auto best = s.best_entries();
  // A row the rules refuse (its config, or a time: damage, since import never
  // stores one) is shown marked, with a note naming it and the rule: the runtime
  // skips it, and a plain row passed for one it would serve.
  size_t broken = 0;
  std::vector<std::string> rules;
  for (const auto& b : best) {
    rules.push_back(db::broken_record(b));
    if (rules.back().empty()) continue;
    ++broken;
    write_warning(std::cerr, db::broken_best_note(s.path(), b) + "; the runtime skips it");
  }
  // Damaged measurement rows are not listed, but they are why export and merge
  // refuse the database: list said nothing of one, exit 0, where export then
  // failed. Counted, and the first named.
  const auto meas = s.measurements();
  size_t damaged = 0;
  for (const auto& m : meas) {
    const std::string rule = db::broken_record(m);
    if (rule.empty() || damaged++) continue;
    write_warning(std::cerr, "database " + s.path() + ": the measurement row for " + m.device.name + " " +
                                 m.problem.key() + " (" + to_string(m.config) + ") is damaged (" + rule +
                                 "); export and merge refuse the database while it holds one "
                                 "(export --skip-damaged saves the rest)");
  }
  if (damaged > 1) write_warning(std::cerr, std::to_string(damaged) + " damaged measurement rows in all");
  if (a.json) {
    nlohmann::json rows = best;
    for (size_t i = 0; i < best.size(); ++i)
      if (!rules[i].empty()) rows[i]["invalid"] = rules[i];
    std::cout << db::dump_text(rows, 2) << '\n';
    return 0;
  }
  Table t({"device", "problem", "config", "median ms", "p20–p80 ms", "speedup", "kernel hash", "when"});
  for (size_t i = 0; i < best.size(); ++i) {
    const auto& b = best[i];
    t.add({b.device.name, b.problem.key(), to_string(b.config) + (rules[i].empty() ? "" : " INVALID"),
           fmt("%.4f", b.stats.median_ms), fmt("%.4f", b.stats.p20_ms) + "–" + fmt("%.4f", b.stats.p80_ms),
           fmt("%.2fx", b.speedup), b.kernel_hash.substr(0, 12), b.created_at});
  }
  t.print(std::cout);
  std::cout << counted(best.size(), "best config", "best configs");
  if (broken) std::cout << " (" << broken << " INVALID: a row the rules refuse, which the runtime skips)";
  std::cout << ", " << counted(meas.size(), "measurement", "measurements");
  if (damaged) std::cout << " (" << damaged << " damaged)";
  std::cout << " in " << printable_message(s.path()) << '\n';
  return 0;
}

// An export that changed text says so (db list marks such rows; merge refuses
// them), and one that left damaged rows out names each.
void warn_exported(const db::ExportReport& r) {
  if (!r.replaced.empty())
    write_warning(std::cerr, std::to_string(r.replaced.size()) + " row(s) held text that is not UTF-8 or a control "
                                 "character, exported with '?' in place of each (the first: " + r.replaced.front() + ")");
  for (const auto& row : r.skipped) write_warning(std::cerr, "left out the damaged row " + row);
  if (!r.skipped.empty())
    write_warning(std::cerr, counted(r.skipped.size(), "damaged row", "damaged rows") + " left out of the export");
}

// Export never replaces what it should not: the database it reads or its
// journal files, a symlink, a FIFO, a device. It writes a temporary file beside
// OUT and renames it over OUT only once every byte is written, so a failure
// leaves OUT as it was.
int do_export(const DbArgs& a) {
  const std::string path = db_path(a);
  require_database(path);
  db::Store s(path, db::Access::read_only);
  s.check_sound();
  if (a.out.empty() || a.out == "-") {
    warn_exported(db::export_jsonl(s, std::cout, a.skip_damaged));  // main() checks standard output at the end
    return 0;
  }
  std::error_code ec;
  if (std::filesystem::exists(a.out, ec) && std::filesystem::equivalent(a.out, path, ec))
    fail_usage("refusing to write the export over the database it reads (" + path + ")");
  // Nor over its journal files: JSON written as db.sqlite-wal or -journal made
  // every later reader fail.
  if (const std::string base = db::journal_owner(a.out);
      !base.empty() && std::filesystem::exists(base, ec) && std::filesystem::equivalent(base, path, ec))
    fail_usage("refusing to write the export over a journal file of the database it reads (" + a.out + ")");
  // Nor over another database: `db export --db a.sqlite -o b.sqlite`, meant the
  // other way round or mistyped, replaced b's every row with JSON text.
  // (is_sqlite_file reads only a regular file; write_file_atomic refuses the rest.)
  if (db::is_sqlite_file(a.out))
    fail_usage("refusing to write the export over " + a.out + ", an SQLite database: remove it first, or name "
               "another output");
  db::ExportReport report;
  write_file_atomic(a.out, [&](std::ostream& f) { report = db::export_jsonl(s, f, a.skip_damaged); });
  warn_exported(report);
  return 0;
}

// Offers `records` to the database at `path` in one transaction and prints
// `summary` of the outcome before it commits, standard output checked: a
// summary that cannot be written (exit 3) rolls the write back. (Printed after
// the commit, a merge that exited 3 left its new OUT merged.) A commit that
// fails after the summary went out says that the line did not happen. A
// database that did not exist is written under a temporary name and linked into
// place once committed and closed, so a failure or an interrupt (Ctrl-C: a merge
// into a new OUT left an empty schema and an 11 MB -wal as OUT) leaves no OUT
// at all; its summary waits until it is in place (printed before, a full disk
// at the close or a signal left "imported …" on standard output and no
// database), and a summary that cannot be written then takes the new database
// away again. Where another process created `path` meanwhile (imports started
// together into one new database), the records go into that one too.
void offer_and_report(const std::string& path, const db::Records& records,
                      const std::function<std::string(const db::ImportCounts&)>& summary) {
  namespace fs = std::filesystem;
  std::error_code ec;
  // Into `file`; the summary printed before the commit, or, with `held`, kept there.
  auto offer = [&](const std::string& file, const std::string& lead, std::string* held) {
    db::Store s(file, db::Access::read_write);
    bool printed = false;
    try {
      s.write([&] {
        const std::string line = printable_message(lead + summary(db::offer_records(s, records, kKernelSourceHash)));
        if (held) {
          *held = line;
          return;
        }
        std::cout << line << '\n';
        flush_stdout();
        printed = true;
      });
    } catch (const Error& e) {
      if (!printed) throw;
      throw Error(e.status(), std::string(e.what()) + "; nothing was written to " + path +
                                  ", whatever the line above says");
    }
  };
  if (!fs::exists(path, ec)) {
    const FolderTurn turn(path);  // another celtune creating `path` finishes first
    if (!fs::exists(path, ec)) {
      NewDatabase fresh(path);
      std::string line;
      try {
        offer(fresh.path(), "", &line);  // closed at the end of the call: SQLite folds its WAL back in
      } catch (const Error& e) {
        fresh.rethrow_as(e, path);
      }
      if (fresh.place(path, true)) {
        try {
          std::cout << line << '\n';
          flush_stdout();
        } catch (const Error& e) {
          // Ours alone so far (placed a moment ago, in this folder's turn).
          db::remove_database_files(path);
          throw Error(e.status(), std::string(e.what()) + "; " + path + " was not created");
        }
        return;
      }
      // Another program took the name meanwhile (not a celtune in its turn, or
      // no turn was had in time): the records go into that database.
      offer(path, path + " was created by another process meanwhile; into it: ", nullptr);
      return;
    }
  }
  offer(path, "", nullptr);
}

int do_import(const DbArgs& a) {
  // A directory opens as an ifstream and reads as empty: say so instead of
  // importing nothing and exiting 0.
  // "-" is standard input, as for most tools that read a file (export's -o -
  // writes standard output); a file named "-" is ./-.
  const bool from_stdin = a.input == "-";
  std::error_code ec;
  if (!from_stdin && std::filesystem::is_directory(a.input, ec))
    fail_env("cannot import " + a.input + ": it is a directory");
  // A database where JSON lines belong read as "line 1: a NUL byte in JSON text".
  if (!from_stdin && db::is_sqlite_file(a.input))
    fail_usage("cannot import " + a.input + ": it is an SQLite database, not JSON lines; fold its rows in with "
               "`celtune db merge " + a.input + " YOURS.sqlite -o MERGED.sqlite`, or export them first with "
               "`celtune db --db " + a.input + " export -o ROWS.jsonl`");
  std::ifstream file;
  if (!from_stdin) {
    file.open(a.input);
    if (!file) fail_env("cannot read " + a.input + ": " + std::strerror(errno));
  }
  std::istream& in = from_stdin ? std::cin : file;
  const std::string named = named_db(a);  // --db given twice with different files is refused first
  // Every line read and checked before the database is opened: a bad line
  // leaves no new database behind.
  const db::Records records = db::read_jsonl(in);
  // std::cin reads through stdio and sees a read error as the end of its input
  // (standard input a directory or closed: "nothing imported", exit 0); stdio
  // keeps the error.
  if (in.bad() || (from_stdin && std::ferror(stdin)))
    fail_env("error reading " + (from_stdin ? std::string("standard input") : a.input) + "; nothing was imported");
  const std::string path = writable_db_path(named);
  const std::string source = from_stdin ? std::string("standard input") : a.input;
  // Nothing to import into a database that does not exist yet: create none
  // (an empty input left an empty new database that the user never asked for).
  std::error_code exists_ec;
  if (records.empty() && !std::filesystem::exists(path, exists_ec)) {
    std::cout << printable_message("nothing imported: " + source + " holds no records; " + path + " was not created")
              << '\n';
    flush_stdout();
    return 0;
  }
  offer_and_report(path, records, [&](const db::ImportCounts& n) {
    return n.records() == 0 ? "nothing imported into " + path + ": " + source + " holds no records"
                            : "imported " + outcome(n, "the input", path);
  });
  return 0;
}

int do_merge(const DbArgs& a) {
  if (a.merge_inputs.size() != 2) fail_usage("db merge takes two input databases: A B -o OUT");
  // merge reads A and B and writes OUT: a --db there (db --db X merge …) was
  // ignored without a word, and X was not merged.
  if (!a.db.empty()) fail_usage("db merge reads the two databases it names and writes -o OUT; --db does not apply");
  namespace fs = std::filesystem;
  for (const auto& in : a.merge_inputs) require_database(in);
  // All or nothing: open and read both inputs before OUT is touched, then write
  // everything in one transaction (offer_and_report).
  // OUT may already exist (even be A or B): its rows take part in the merge and
  // none is lost; per (device, problem) the fastest best entry wins.
  refuse_unsafe_db_name(a.out);
  std::error_code ec;
  const bool out_existed = fs::exists(a.out, ec);
  if (!out_existed) require_db_folder(a.out);
  std::vector<std::unique_ptr<db::Store>> sources;
  std::vector<const db::Store*> from;
  for (const auto& in : a.merge_inputs) {
    if (out_existed && fs::equivalent(in, a.out, ec)) continue;
    sources.push_back(std::make_unique<db::Store>(in, db::Access::read_only));
    sources.back()->check_sound();
    from.push_back(sources.back().get());
  }
  // Inputs that are OUT itself (by name, link or hard link) are OUT's rows,
  // kept as they are: say so rather than that the inputs are empty.
  const size_t self = a.merge_inputs.size() - from.size();
  offer_and_report(a.out, db::read_rows(from), [&](const db::ImportCounts& n) {
    if (n.records() != 0) return "merged " + outcome(n, "the inputs", a.out);
    return "nothing merged into " + a.out + ": " +
           (self == a.merge_inputs.size() ? std::string("both inputs are ") + a.out + " itself, whose rows stay as they are"
            : self ? "the input other than " + a.out + " holds no rows"
                   : std::string("the inputs hold no rows"));
  });
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
  auto after = [&](CLI::App* verb) { verb->add_option("--db", a->db_after, "Database file (as before the verb)"); };
  after(list);
  list->add_flag("--json", a->json, "Print JSON");
  auto* exp = sub->add_subcommand("export", "Write every best config and measurement as JSON lines (sorted)");
  exp->add_flag("--jsonl")->description("JSON lines (the only format; accepted for clarity)");
  exp->add_option("-o,--output", a->out, "Output file (default: standard output); never the database itself");
  exp->add_flag("--skip-damaged", a->skip_damaged,
                "Leave out, and name, the rows import would refuse (a damaged database's sound rows are saved so); "
                "without it such a row fails the export");
  after(exp);
  auto* imp = sub->add_subcommand("import", "Read JSON lines into the database (all or nothing; per device and "
                                            "problem a best config tuned with this build's kernels wins, else the faster)");
  imp->add_option("file", a->input, "JSON-lines file from 'celtune db export', or - for standard input")->required();
  after(imp);
  auto* mrg = sub->add_subcommand("merge", "Merge two databases into OUT; per device and problem a best config tuned "
                                           "with this build's kernels wins, else the faster; OUT's own rows are kept");
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
