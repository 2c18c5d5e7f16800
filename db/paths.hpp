// Where databases live by default. One definition, so the tuner writes where the
// runtime reads: a user's tuning is found without further configuration.
#pragma once

#include <string>

namespace celtune::db {

// The user's own database: $XDG_DATA_HOME/celtune/celtune.sqlite, else
// ~/.local/share/celtune/celtune.sqlite; "" when neither variable is set.
std::string user_database_path();

// The files SQLite keeps beside a database: -wal and -shm in WAL mode,
// -journal in rollback mode.
inline constexpr const char* kJournalSuffixes[] = {"-wal", "-shm", "-journal"};
// The database whose journal file `path` would be by its name ("" when it ends
// in no journal suffix): a database written under such a name is deleted or
// replayed by that database's next reader.
std::string journal_owner(const std::string& path);
// Removes the database at `path` and its journal files, ignoring errors: for a
// database that was only just created and must not stay.
void remove_database_files(const std::string& path);

}  // namespace celtune::db
