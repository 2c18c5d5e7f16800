#include "paths.hpp"

#include <cstdlib>

namespace celtune::db {

std::string user_database_path() {
  // A relative XDG_DATA_HOME is invalid and ignored (XDG Base Directory spec):
  // taken as given, tune wrote under the current folder and lookup found it
  // only from there.
  if (const char* x = std::getenv("XDG_DATA_HOME"); x && x[0] == '/') return std::string(x) + "/celtune/celtune.sqlite";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.local/share/celtune/celtune.sqlite";
  return "";
}

}  // namespace celtune::db
