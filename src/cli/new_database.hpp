// Databases this process creates: nobody sees one until it is whole, and an
// interrupt before anything is stored in it leaves no file behind.
#pragma once

#include <string>

#include "model/error.hpp"

namespace celtune::cli {

// A new database written under a temporary name beside `final_path` and
// linked into place once committed and closed (place). Until then its files
// are removed on exceptions (the destructor) and on SIGINT, SIGTERM and SIGHUP,
// so a failure, a full disk or Ctrl-C leaves no file at `final_path`.
class NewDatabase {
 public:
  explicit NewDatabase(const std::string& final_path);
  ~NewDatabase();
  NewDatabase(const NewDatabase&) = delete;
  NewDatabase& operator=(const NewDatabase&) = delete;
  const std::string& path() const { return path_; }
  // Puts the closed database at `final_path`, never over a file that appeared
  // there meanwhile (link fails on an existing name, where rename replaces it):
  // an error, or with `exists_ok` a false return (and ours is removed).
  bool place(const std::string& final_path, bool exists_ok = false);
  // `e`, from writing the temporary database, said of `final_path`: a full disk
  // read "database new.sqlite.7vY5lI: database or disk is full", a file the
  // user never saw.
  [[noreturn]] void rethrow_as(const Error& e, const std::string& final_path) const;

 private:
  std::string path_;
  bool released_ = false;
};

// Creators of new databases in one folder (import, merge, tune) take turns: an
// exclusive flock on the folder, held by the object, so any two of them wait
// for each other, whatever the names. Two imports started together into one
// new database each wrote it under a temporary name, and the one that lost the
// race to place it had already printed a summary of its own copy, then
// discarded it. With turns, the second finds the first's database and writes
// into it. Advisory and best effort: the wait is CELTUNE_BUSY_TIMEOUT_MS, and
// where the folder cannot be opened or locked in time, none is taken (place
// still never overwrites, so nothing is lost; the summary says its first line
// did not happen).
class FolderTurn {
 public:
  explicit FolderTurn(const std::string& final_path);
  ~FolderTurn();
  FolderTurn(const FolderTurn&) = delete;
  FolderTurn& operator=(const FolderTurn&) = delete;

 private:
  int fd_ = -1;
};

// Creates the (empty) celtune database `path` whole, through NewDatabase: a
// full disk while the schema is written left a 4 KiB file without one, which
// every later command then refused as "not a celtune database". False where
// another process created `path` meanwhile (tunes started together into one
// new database): theirs is whole too, and is used.
bool create_database(const std::string& path);

// For a writer that stores into a database it created, row by row (tune): until
// the object goes, SIGINT, SIGTERM and SIGHUP remove `path`'s files if nothing
// has been committed to it yet (a connection open, its write-ahead log still
// empty), then take their course. Ctrl-C in a tune's first problem left an empty database, its
// -wal and its -shm. An empty `path` installs nothing.
class RemoveIfUnwrittenOnSignal {
 public:
  explicit RemoveIfUnwrittenOnSignal(const std::string& path);
  ~RemoveIfUnwrittenOnSignal();
  RemoveIfUnwrittenOnSignal(const RemoveIfUnwrittenOnSignal&) = delete;
  RemoveIfUnwrittenOnSignal& operator=(const RemoveIfUnwrittenOnSignal&) = delete;

 private:
  bool armed_ = false;
};

}  // namespace celtune::cli
