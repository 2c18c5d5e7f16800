#include "paths.hpp"

#include <cstdlib>

namespace celtune::db {

std::string user_database_path() {
  if (const char* x = std::getenv("XDG_DATA_HOME"); x && *x) return std::string(x) + "/celtune/celtune.sqlite";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.local/share/celtune/celtune.sqlite";
  return "";
}

}  // namespace celtune::db
