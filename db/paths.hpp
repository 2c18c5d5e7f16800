// Where databases live by default. One definition, so the tuner writes where the
// runtime reads: a user's tuning is found without further configuration.
#pragma once

#include <string>

namespace celtune::db {

// The user's own database: $XDG_DATA_HOME/celtune/celtune.sqlite, else
// ~/.local/share/celtune/celtune.sqlite; "" when neither variable is set.
std::string user_database_path();

}  // namespace celtune::db
