// Build step: turns the reviewed JSON-lines files in db/tuned/ into the shipped
// celtune.sqlite (the same import code as `celtune db import`), then switches it
// from WAL to a rollback journal, so read-only readers need no side files.
#include <sqlite3.h>

#include <filesystem>
#include <fstream>
#include <iostream>

#include "db/paths.hpp"
#include "db/store.hpp"
#include "kernels/kernel_hash.hpp"
#include "model/error.hpp"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: celtune-build-db OUT.sqlite IN.jsonl...\n";
    return 2;
  }
  const std::string out = argv[1];
  celtune::db::remove_database_files(out);
  try {
    {
      celtune::db::Store s(out, celtune::db::Access::read_write);
      for (int i = 2; i < argc; ++i) {
        std::ifstream in(argv[i]);
        if (!in) throw celtune::Error(celtune::Status::environment, std::string("cannot read ") + argv[i]);
        const auto n = celtune::db::import_jsonl(s, in, kKernelSourceHash);
        std::cout << argv[i] << ": " << n.best_added + n.best_replaced << " best configs, " << n.measurements_added
                  << " measurements\n";
      }
    }
    sqlite3* db = nullptr;
    if (sqlite3_open(out.c_str(), &db) != SQLITE_OK ||
        sqlite3_exec(db, "PRAGMA journal_mode = DELETE", nullptr, nullptr, nullptr) != SQLITE_OK) {
      std::cerr << "celtune-build-db: " << sqlite3_errmsg(db) << '\n';
      sqlite3_close(db);
      return 3;
    }
    sqlite3_close(db);
  } catch (const celtune::Error& e) {
    std::cerr << "celtune-build-db: " << e.what() << '\n';
    return static_cast<int>(e.status());
  }
  return 0;
}
