#include "new_database.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>

#include "db/paths.hpp"
#include "db/store.hpp"
#include "model/error.hpp"
#include "output.hpp"

namespace celtune::cli {
namespace {

// The files a signal removes: the database, then its journal files in
// kJournalSuffixes' order ("-wal" first). Fixed before the handlers go in;
// the handler calls only stat, unlink, signal and raise (async-signal-safe).
constexpr int kMaxFiles = 4;
char g_files[kMaxFiles][4096];
volatile sig_atomic_t g_count = 0;
volatile sig_atomic_t g_only_if_unwritten = 0;
// What each of kCleanupSignals did before: restored by disarm.
SignalHandler g_previous[3] = {SIG_DFL, SIG_DFL, SIG_DFL};

extern "C" void remove_and_die(int sig) {
  // Nothing committed yet: a connection is open (its -wal exists) and no
  // transaction has written a frame to it. No -wal is not proof of that: the
  // last connection to close folds the log in and removes it.
  struct stat wal {};
  const bool unwritten = !g_only_if_unwritten || (::stat(g_files[1], &wal) == 0 && wal.st_size == 0);
  if (unwritten)
    for (int i = 0; i < g_count; ++i) ::unlink(g_files[i]);
  remove_staged_files();  // stage_file's temporaries: its handler is the one this replaced
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

// Returns whether the handlers went in (a path too long for the table: not).
bool arm(const std::string& path, bool only_if_unwritten) {
  static_assert(sizeof db::kJournalSuffixes / sizeof db::kJournalSuffixes[0] + 1 == kMaxFiles);
  if (path.size() + 16 >= sizeof g_files[0]) return false;
  g_count = 0;
  std::memcpy(g_files[0], path.c_str(), path.size() + 1);
  int n = 1;
  for (const char* suffix : db::kJournalSuffixes) {
    const std::string f = path + suffix;
    std::memcpy(g_files[n++], f.c_str(), f.size() + 1);
  }
  g_only_if_unwritten = only_if_unwritten;
  g_count = n;
  install_cleanup_handler(remove_and_die, &g_previous);
  return true;
}

void disarm() {
  for (int i = 0; i < 3; ++i) ::signal(kCleanupSignals[i], g_previous[i] == SIG_ERR ? SIG_DFL : g_previous[i]);
  g_count = 0;
}

}  // namespace

NewDatabase::NewDatabase(const std::string& final_path) {
  path_ = temp_template(final_path, 8);  // 8: SQLite's "-journal" beside it
  const int fd = ::mkstemp(path_.data());
  if (fd < 0) {
    const int err = errno;
    if (err == EACCES || err == EPERM || err == EROFS)  // said as Store says it of an existing database
      fail_env("the folder of database " + final_path + " is not writable: " + std::strerror(err));
    fail_env("cannot create a temporary database beside " + final_path + ": " + std::strerror(err));
  }
  ::close(fd);
  // mkstemp makes it 0600; a database created in place follows the umask.
  ::chmod(path_.c_str(), new_file_mode());
  arm(path_, false);
}

NewDatabase::~NewDatabase() {
  disarm();
  if (!released_) db::remove_database_files(path_);
}

bool NewDatabase::place(const std::string& final_path, bool exists_ok) {
  std::error_code ec;
  // The log (-wal, or a rollback -journal) beside database `base` that holds changes, else null.
  auto log_with_changes = [&ec](const std::string& base) -> const char* {
    for (const char* suffix : {"-wal", "-journal"})
      if (std::filesystem::file_size(base + suffix, ec) > 0 && !ec) return suffix;
    return nullptr;
  };
  if (const char* suffix = log_with_changes(path_))
    fail_env("the new database " + final_path + " was closed with its " + std::string(suffix + 1) +
             " file still holding changes; nothing was written to it");
  // A log left at the final name by an earlier database there (its writer
  // killed before it folded the log in, then the database deleted) is replayed
  // by SQLite into whatever file next takes the name: a merge into a new OUT
  // lost every measurement to the old log's DELETE, an import left a database
  // "malformed", and both had said they succeeded. Refused while the name is
  // free: nothing is placed.
  if (const char* suffix = log_with_changes(final_path); suffix && !std::filesystem::exists(final_path, ec))
    fail_env("cannot create database " + final_path + ": " + final_path + suffix + " is still there from an earlier " +
             "database of that name, and SQLite would replay it into the new one; remove it, or put back the " +
             "database it belongs to");
  if (::link(path_.c_str(), final_path.c_str()) != 0) {
    // A file system without hard links (vfat, some network mounts): rename,
    // after checking the name is still free (a narrower guard, the same end).
    const int err = errno;
    const bool no_links = err == EPERM || err == ENOTSUP || err == EOPNOTSUPP || err == EMLINK || err == ENOSYS;
    const bool taken = err == EEXIST || std::filesystem::exists(final_path, ec);
    if (taken && exists_ok) return false;  // the destructor removes ours
    if (!no_links || taken) fail_env("cannot create database " + final_path + ": " + std::strerror(err));
    std::filesystem::rename(path_, final_path, ec);
    if (ec) fail_env("cannot create database " + final_path + ": " + ec.message());
  }
  released_ = true;
  db::remove_database_files(path_);  // the name only: the database lives on at final_path
  return true;
}

void NewDatabase::rethrow_as(const Error& e, const std::string& final_path) const {
  std::string m = e.what();
  for (size_t at = m.find(path_); at != std::string::npos; at = m.find(path_, at + final_path.size()))
    m.replace(at, path_.size(), final_path);
  throw Error(e.status(), m);
}

FolderTurn::FolderTurn(const std::string& final_path) {
  const std::filesystem::path folder = std::filesystem::path(final_path).parent_path();
  fd_ = ::open(folder.empty() ? "." : folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd_ < 0) return;
  // Polled within the database wait (CELTUNE_BUSY_TIMEOUT_MS), never blocked on:
  // a writer stopped with Ctrl-Z while it held the turn would otherwise hold up
  // every new database in the folder. Past the wait, go on without a turn.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(db::busy_timeout_ms());
  while (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    if ((errno != EWOULDBLOCK && errno != EINTR) || std::chrono::steady_clock::now() >= deadline) {
      ::close(fd_), fd_ = -1;
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

FolderTurn::~FolderTurn() {
  if (fd_ >= 0) ::close(fd_);  // releases the lock
}

bool create_database(const std::string& path) {
  const FolderTurn turn(path);  // an import creating `path` meanwhile then finds it, as it would find any
  NewDatabase fresh(path);
  try {
    db::Store s(fresh.path(), db::Access::read_write);  // closed at once: SQLite folds its WAL back in
  } catch (const Error& e) {
    fresh.rethrow_as(e, path);
  }
  return fresh.place(path, true);
}

RemoveIfUnwrittenOnSignal::RemoveIfUnwrittenOnSignal(const std::string& path) {
  armed_ = !path.empty() && arm(path, true);
}

RemoveIfUnwrittenOnSignal::~RemoveIfUnwrittenOnSignal() {
  if (armed_) disarm();
}

}  // namespace celtune::cli
