// One function per subcommand. Each registers its flags on the app and returns
// the action main() runs after parsing; actions throw celtune::Error and return
// the exit status for verdicts (0 pass, 1 fail).
#pragma once

#include <functional>
#include <string>

#include <CLI/CLI.hpp>

namespace celtune::cli {

using Action = std::function<int()>;

Action register_devices(CLI::App& app);
Action register_validate(CLI::App& app);
Action register_db(CLI::App& app);
Action register_bench(CLI::App& app);
Action register_tune(CLI::App& app);
Action register_report(CLI::App& app);
Action register_lookup(CLI::App& app);

// The database a command uses when --db is not given: $CELTUNE_DB, else
// $XDG_DATA_HOME/celtune/celtune.sqlite, else ~/.local/share/celtune/celtune.sqlite;
// Error(environment) when none of the three is set.
std::string default_db_path();
// Fails (exit 3) unless the database file at `path` exists and can be reached;
// for readers, which must not create one.
void require_database(const std::string& path);

}  // namespace celtune::cli
