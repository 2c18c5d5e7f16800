// celtune: validate, tune and look up fused cross-entropy kernel configs.
//
// Exit codes (one place, here): 0 ok; 1 a validation or tuning verdict failed;
// 2 usage error (bad flags, malformed shapes, out-of-range options); 3 environment
// error (no such device, CUDA error, unusable or locked database, output that
// could not be written).
#include <algorithm>
#include <csignal>
#include <filesystem>
#include <iostream>
#include <map>
#include <new>
#include <string_view>

#include <CLI/CLI.hpp>

#include "commands.hpp"
#include "output.hpp"
#include "model/error.hpp"

#ifndef CELTUNE_VERSION
#define CELTUNE_VERSION "unknown"
#endif

namespace {
// The first word of argv that is neither an option, an option's value, nor a
// command of the (sub)command before it: "unknown command 'X' (commands: …)";
// an option the (sub)command before it lacks: "unknown option '--X'";
// or, where a command that needs one was given none (`celtune db`), "X needs a
// command: …"; or "" when there is none.
// only_commands: say only a word that is no command (for --help, whose text
// would otherwise describe the level above it with exit 0).
std::string unknown_command(CLI::App& app, int argc, char** argv, bool only_commands = false) {
  CLI::App* level = &app;
  auto names_of = [](CLI::App* at) {
    std::string names;
    for (const CLI::App* a : at->get_subcommands({})) names += (names.empty() ? "" : ", ") + a->get_name();
    return names;
  };
  for (int i = 1; i < argc; ++i) {
    const std::string tok = argv[i];
    if (tok.rfind("-", 0) == 0) {
      const CLI::Option* opt = level->get_option_no_throw(tok.substr(0, tok.find('=')));
      // `celtune --bogus` said only "A subcommand is required".
      if (!opt) {
        if (only_commands) continue;
        return "unknown option '" + celtune::printable_message(tok, false) + "'" +
               (level == &app ? "" : " for " + level->get_name());
      }
      if (opt->get_type_size() != 0 && tok.find('=') == std::string::npos) ++i;  // its value
      continue;
    }
    const auto subs = level->get_subcommands({});
    // A command without subcommands takes its words as arguments (db merge A B):
    // CLI11's own message (e.g. "--output is required") is the one to show.
    if (subs.empty()) return "";
    const auto sub = std::find_if(subs.begin(), subs.end(), [&](CLI::App* a) { return a->check_name(tok); });
    if (sub != subs.end()) {
      level = *sub;
      continue;
    }
    const std::string names = names_of(level);
    return "unknown command '" + celtune::printable_message(tok, false) + "'" +
           (names.empty() ? "" : " (commands: " + names + ")");
  }
  if (!only_commands && level != &app && level->get_require_subcommand_min() > 0)
    return level->get_name() + " needs a command: " + names_of(level);
  return "";
}
}  // namespace

namespace {
int run(int argc, char** argv) {
  using namespace celtune;
  // A reader that went away (`celtune report … | true`) killed the process by
  // SIGPIPE: exit 141, no word, a report's staged plots left behind and an
  // import's new database kept. Ignored, the write fails with EPIPE instead and
  // takes the path a full disk takes: exit 3, said, nothing half-written kept.
  std::signal(SIGPIPE, SIG_IGN);
  cli::install_stdout();
  CLI::App app{
      "celtune: fused cross-entropy kernels (ce, flce), validated against fp64 and cuBLAS references,\n"
      "tuned per GPU and problem shape, stored in SQLite and looked up at run time."};
  app.set_version_flag("--version", std::string("celtune ") + CELTUNE_VERSION);
  app.require_subcommand(1);
  app.footer("Exit codes: 0 ok, 1 validation/tuning failure, 2 usage error, 3 environment error.");
  // Messages echo what they were given: printed escaped (error.hpp), here and below;
  // and like every other error of ours they start "celtune: ".
  app.failure_message([](const CLI::App* a, const CLI::Error& e) {
    std::string text = CLI::FailureMessage::simple(a, e);
    // CLI11 lists unexpected arguments bare: `lookup ''` read "The following
    // argument was not expected: " and named nothing. Each is quoted here.
    if (dynamic_cast<const CLI::ExtrasError*>(&e) != nullptr) {
      const auto extras = a->remaining(true);
      std::string quoted;
      for (const auto& x : extras) quoted += (quoted.empty() ? "'" : " '") + printable_message(x, false) + "'";
      text = std::string(extras.size() == 1 ? "unexpected argument " : "unexpected arguments ") + quoted +
             text.substr(std::string_view(e.what()).size());  // CLI11's own lines after its message
    }
    return "celtune: " + printable_message(text);
  });

  std::map<CLI::App*, cli::Action> actions;
  auto add = [&](const char* name, cli::Action a) { actions[app.get_subcommand(name)] = std::move(a); };
  add("devices", cli::register_devices(app));
  add("validate", cli::register_validate(app));
  add("tune", cli::register_tune(app));
  add("bench", cli::register_bench(app));
  add("db", cli::register_db(app));
  add("report", cli::register_report(app));
  add("lookup", cli::register_lookup(app));
  // Help and version text go to standard output like any result: a write that
  // failed is an environment error there too.
  auto printed = [](int rc) {
    const std::string why = cli::stdout_error();
    if (why.empty()) return rc;
    std::cerr << "celtune: " << why << '\n';
    return static_cast<int>(Status::environment);
  };
  auto refused = [](const std::string& why) {
    std::cerr << "celtune: " << printable_message(why) << '\n';
    return static_cast<int>(Status::usage);
  };
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    // `celtune bogus --help` printed the top level's help and exited 0: a script
    // asking whether a command exists was told it does.
    if (const std::string why = unknown_command(app, argc, argv, true); !why.empty()) return refused(why);
    return printed(app.exit(e));
  } catch (const CLI::CallForAllHelp& e) {
    return printed(app.exit(e));
  } catch (const CLI::CallForVersion& e) {
    return printed(app.exit(e));
  } catch (const CLI::RequiredError& e) {
    // "A subcommand is required" for `celtune bogus` or `celtune db bogus`: name
    // the word that is not a command, and the commands there are.
    if (const std::string why = unknown_command(app, argc, argv); !why.empty()) return refused(why);
    app.exit(e);
    return static_cast<int>(Status::usage);
  } catch (const CLI::ParseError& e) {
    app.exit(e);  // prints the message
    return static_cast<int>(Status::usage);
  }
  // A flag given `=` and nothing (--json='', --skip-damaged=) was taken as set.
  for (int i = 1; i < argc; ++i)
    if (const std::string_view tok = argv[i]; tok.starts_with("--") && tok.size() > 3 && tok.back() == '=') {
      std::cerr << "celtune: " << printable_message(tok.substr(0, tok.size() - 1), false)
                << " was given an empty value\n";
      return static_cast<int>(Status::usage);
    }
  // An empty value (--db '', -o '', --shape '') must not pass for an option not
  // given: `db merge -o ''` reported success and wrote nothing, `tune --db ''`
  // tuned into the default database.
  for (CLI::App* sub = &app; sub;) {
    for (const CLI::Option* opt : sub->get_options())
      for (const std::string& v : opt->results())
        if (v.empty()) {
          std::cerr << "celtune: " << opt->get_name() << " was given an empty value\n";
          return static_cast<int>(Status::usage);
        }
    const auto subs = sub->get_subcommands();
    sub = subs.empty() ? nullptr : subs.front();
  }
  try {
    int rc = static_cast<int>(Status::usage);
    for (auto* sub : app.get_subcommands())
      if (auto it = actions.find(sub); it != actions.end()) {
        rc = it->second();
        break;
      }
    // Output that never arrived (a full disk, a closed pipe) is not success:
    // every command's standard output is checked here, once, after its last byte.
    cli::flush_stdout();
    return rc;
  } catch (const Error& e) {
    std::cerr << "celtune: " << printable_message(e.what()) << '\n';
    return static_cast<int>(e.status());
  } catch (const std::filesystem::filesystem_error& e) {
    // A path the operating system refused (no permission, a name too long): the
    // environment, said in its own words, not an internal error.
    std::cerr << "celtune: " << e.code().message() << ": " << printable_message(e.path1().string()) << '\n';
    return static_cast<int>(Status::environment);
  } catch (const std::bad_alloc&) {
    std::cerr << "celtune: out of host memory (the problem's host copies or results do not fit this machine)\n";
    return static_cast<int>(Status::environment);
  } catch (const std::exception& e) {
    // Not one of ours: a bug or resource exhaustion. Still an environment error
    // to the caller, never an abort.
    std::cerr << "celtune: internal error: " << printable_message(e.what()) << '\n';
    return static_cast<int>(Status::environment);
  }
}
}  // namespace

int main(int argc, char** argv) {
  const int rc = run(argc, argv);
  // A warning that never arrived (`2>/dev/full`) is not success either: a
  // damaged row skipped, a database that could not be read, said to no one.
  // Nothing can be said about it, so only the exit code tells (as gnulib's
  // close_stdout does with standard error).
  if (rc == 0 && (!std::cerr.flush() || std::ferror(stderr)))
    return static_cast<int>(celtune::Status::environment);
  return rc;
}
