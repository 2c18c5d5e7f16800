// One function per subcommand. Each registers its flags on the app and returns
// the action main() runs after parsing; actions throw celtune::Error and return
// the exit status for verdicts (0 pass, 1 fail).
#pragma once

#include <functional>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>

namespace celtune {
class Backend;
namespace runtime {
class Resolver;
}
}  // namespace celtune

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
// The database a writer opens (tune, db import): `named` (--db), else
// default_db_path(). The per-user default's folder is made on first use; a path
// the user named ($CELTUNE_DB as much as --db) must already have its folder, and
// Error(environment) says so when it has not.
std::string writable_db_path(const std::string& named);
// Error(environment) naming the folder when the folder `path` would be created in
// does not exist (SQLite only said "unable to open database file").
void require_db_folder(const std::string& path);

// The runtime's resolver over the databases it would read, `named` (--db) first,
// for the commands that show what a call would run (lookup, bench --tuned). The
// runtime only warns; these refuse a malformed CELTUNE_BUSY_TIMEOUT_MS (exit 2)
// and a named database that is missing or damaged (exit 3) up front.
std::unique_ptr<runtime::Resolver> open_resolver(const std::string& named, std::shared_ptr<const Backend> backend);
// Exit 3 when the resolver has dropped the named database since (damage that
// shows only when rows are read, a lock held past the busy timeout): asked after
// resolving. `command` names the caller in the message.
void require_named_database_used(runtime::Resolver& resolver, const std::string& named, const std::string& command);

}  // namespace celtune::cli
