#include "paths.hpp"

#include <cstdlib>
#include <filesystem>
#include <string_view>

namespace celtune::db {

std::string user_database_path() {
  // A relative XDG_DATA_HOME is invalid and ignored (XDG Base Directory spec):
  // taken as given, tune wrote under the current folder and lookup found it
  // only from there. A relative HOME did the same (HOME=relhome: a database
  // under ./relhome, a different one from every folder), so it is ignored too.
  if (const char* x = std::getenv("XDG_DATA_HOME"); x && x[0] == '/') return std::string(x) + "/celtune/celtune.sqlite";
  if (const char* h = std::getenv("HOME"); h && h[0] == '/') return std::string(h) + "/.local/share/celtune/celtune.sqlite";
  return "";
}

std::string journal_owner(const std::string& path) {
  for (const std::string_view suffix : kJournalSuffixes)
    if (path.ends_with(suffix)) return path.substr(0, path.size() - suffix.size());
  return "";
}

void remove_database_files(const std::string& path) {
  std::error_code ec;
  std::filesystem::remove(path, ec);
  for (const char* suffix : kJournalSuffixes) std::filesystem::remove(path + suffix, ec);
}

}  // namespace celtune::db
