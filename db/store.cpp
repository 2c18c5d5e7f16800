#include "store.hpp"

#include <sqlite3.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <istream>
#include <limits>
#include <map>
#include <ostream>
#include <set>
#include <thread>
#include <utility>

#include <nlohmann/json.hpp>

#include "db/schema_sql.hpp"
#include "model/error.hpp"
#include "model/json_get.hpp"

namespace celtune::db {
namespace {

// SQLite's error as a user can act on it. A file that is not a database at all
// (random bytes, a JSONL passed as --db) or a damaged one is said so first,
// SQLite's words after: "step: file is not a database" named an internal call.
[[noreturn]] void fail_sqlite(int rc, const std::string& path, const std::string& what, const std::string& message) {
  switch (rc & 0xff) {
    case SQLITE_NOTADB:
      fail_env("database " + path + " is not an SQLite database (SQLite: " + message +
               "); JSON lines go in with `celtune db --db DB import FILE`");
    case SQLITE_CORRUPT:
      fail_env("database " + path + " is damaged (SQLite: " + message + ")");
    default:
      fail_env("database " + path + ": " + (what.empty() ? "" : what + ": ") + message);
  }
}
[[noreturn]] void fail_db(sqlite3* db, const std::string& path, const std::string& what) {
  if (!db) fail_env("database " + path + ": " + what + ": out of memory");
  fail_sqlite(sqlite3_extended_errcode(db), path, what, sqlite3_errmsg(db));
}

// A prepared statement, finalized on scope exit. Bind by 1-based position.
class Stmt {
 public:
  Stmt(sqlite3* db, const std::string& path, const char* sql) : db_(db), path_(path) {
    if (sqlite3_prepare_v2(db, sql, -1, &st_, nullptr) != SQLITE_OK) fail_db(db, path, "prepare");
  }
  ~Stmt() { sqlite3_finalize(st_); }
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;

  Stmt& bind(int i, int64_t v) { return check(sqlite3_bind_int64(st_, i, v)); }
  Stmt& bind(int i, int v) { return bind(i, static_cast<int64_t>(v)); }
  Stmt& bind(int i, double v) { return check(sqlite3_bind_double(st_, i, v)); }
  Stmt& bind(int i, const std::string& v) {
    return check(sqlite3_bind_text(st_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT));
  }
  // Returns true while there is a row. Busy/locked surfaces as SQLITE_BUSY for the
  // transaction retry loop to handle.
  bool step() {
    const int rc = sqlite3_step(st_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    if (rc == SQLITE_BUSY || rc == SQLITE_LOCKED) throw Busy{};
    fail_db(db_, path_, "step");
  }
  // Numbers as numbers: SQLite keeps text it cannot convert in a REAL or
  // INTEGER column, and reads it back as 0 (a hand-edited median of 'fast' read
  // as 0 ms and won every comparison). NULL reads as 0, as the nullable columns
  // (a failed measurement's timings) expect.
  int64_t i64(int c) const { return numeric(c), sqlite3_column_int64(st_, c); }
  // A column read into an int: past its range is damage too (sm_count
  // 4294967297 was read as 1, passed the ≥ 1 check and was exported and merged).
  int i32(int c) const {
    const int64_t v = i64(c);
    if (v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max())
      fail_env("database " + path_ + ": column " + (sqlite3_column_name(st_, c) ? sqlite3_column_name(st_, c) : "?") +
               " holds " + std::to_string(v) + ", out of range: the database is damaged");
    return static_cast<int>(v);
  }
  double f64(int c) const { return numeric(c), sqlite3_column_double(st_, c); }
  std::string text(int c) const {
    const auto* t = sqlite3_column_text(st_, c);
    return t ? std::string(reinterpret_cast<const char*>(t), static_cast<size_t>(sqlite3_column_bytes(st_, c)))
             : std::string();
  }
  struct Busy {};

 private:
  Stmt& check(int rc) {
    if (rc != SQLITE_OK) fail_db(db_, path_, "bind");
    return *this;
  }
  void numeric(int c) const {
    const int t = sqlite3_column_type(st_, c);
    if (t == SQLITE_TEXT || t == SQLITE_BLOB)
      fail_env("database " + path_ + ": column " + (sqlite3_column_name(st_, c) ? sqlite3_column_name(st_, c) : "?") +
               " holds text where a number belongs: the database is damaged");
  }
  sqlite3* db_;
  const std::string& path_;
  sqlite3_stmt* st_ = nullptr;
};

void exec(sqlite3* db, const std::string& path, const char* sql) {
  char* err = nullptr;
  const int rc = sqlite3_exec(db, sql, nullptr, nullptr, &err);
  if (rc == SQLITE_BUSY || rc == SQLITE_LOCKED) {
    sqlite3_free(err);
    throw Stmt::Busy{};
  }
  if (rc != SQLITE_OK) {
    std::string m = err ? err : sqlite3_errmsg(db);
    sqlite3_free(err);
    fail_sqlite(rc, path, "", m);
  }
}

std::string canonical_json(const KernelConfig& c) { return nlohmann::json(c).dump(); }

// Column list shared by the readers, so both SELECTs decode the same way.
constexpr const char* kDeviceCols =
    "d.name, d.arch, d.sm_count, d.memory_bytes, d.driver, d.runtime, d.cublaslt, d.cublaslt_version";

DeviceInfo read_device(const Stmt& s, int c0) {
  DeviceInfo d;
  d.name = s.text(c0);
  d.arch = s.text(c0 + 1);
  d.sm_count = s.i32(c0 + 2);
  d.memory_bytes = s.i64(c0 + 3);
  d.driver = s.text(c0 + 4);
  d.runtime = s.text(c0 + 5);
  d.cublaslt = s.text(c0 + 6);
  d.cublaslt_version = s.i64(c0 + 7);
  return d;
}

Stats read_stats(const Stmt& s, int c0) {
  return Stats{s.f64(c0), s.f64(c0 + 1), s.f64(c0 + 2), s.i64(c0 + 3), s.f64(c0 + 4)};
}

}  // namespace

namespace {
// "file:" URI for sqlite3_open_v2 (with SQLITE_OPEN_URI), the path made
// absolute and the characters URIs reserve escaped, so that every name is the
// file it says: SQLite itself reads ":memory:" as a database in memory and, where
// it is built to take URIs (Debian's is), "file:x.sqlite" as x.sqlite, so a
// merge into ":memory:" reported rows stored that no file held.
std::string file_uri(const std::string& path, const char* query) {
  std::error_code ec;
  const std::filesystem::path abs = std::filesystem::absolute(path, ec);
  if (ec) fail_env("cannot resolve database path " + path + ": " + ec.message());
  // SQLite's unix VFS keeps a path in 512 bytes with room for "-journal": a
  // database's absolute path of 505 bytes or more failed as "unable to open
  // database file" (SQLite 3.40), in every command.
  constexpr size_t kMaxPath = 504;
  if (abs.string().size() > kMaxPath)
    fail_env("cannot open database " + path + ": its absolute path is " + std::to_string(abs.string().size()) +
             " bytes long, and SQLite opens databases of at most " + std::to_string(kMaxPath) +
             "; use a shorter path (a link, or a folder nearer the root)");
  std::string u = "file:";
  for (unsigned char c : abs.string()) {
    if (c == '%' || c == '?' || c == '#' || c < 0x20) {
      char b[4];
      std::snprintf(b, sizeof b, "%%%02X", c);
      u += b;
    } else {
      u += static_cast<char>(c);
    }
  }
  return u + query;
}

// The first bytes of a database file's header: its magic string, its page
// size (bytes 16–17, 1 meaning 65536) and its format versions (bytes 18–19: 2
// in WAL mode, 1 with a rollback journal). Unreadable or short: all zero.
struct FileHeader {
  bool sqlite = false;
  uintmax_t page = 0;
  bool wal = false;
};
FileHeader read_header(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return {};
  unsigned char h[20];
  const bool ok = std::fread(h, 1, sizeof h, f) == sizeof h;
  std::fclose(f);
  if (!ok) return {};
  const unsigned field = (unsigned{h[16]} << 8) | h[17];
  return {std::memcmp(h, "SQLite format 3", 16) == 0, field == 1 ? 65536u : field, h[18] == 2 && h[19] == 2};
}

}  // namespace

bool is_sqlite_file(const std::string& path) {
  std::error_code ec;
  return std::filesystem::is_regular_file(std::filesystem::symlink_status(path, ec)) && read_header(path).sqlite;
}

namespace {
// A reader's check of what SQLite does not check: a file cut inside a page (a
// copy short by its last bytes) reads the missing bytes as zeros, with no error
// and no warning (the forty-ninth session's docs probe: a copy 100 bytes short,
// lookup answered `exact` from it, exit 0). SQLite writes whole pages, so a
// size that is not a whole number of them is damage. Counted in units of at
// most 4 KiB: a writer extends the file a page at a time, and the page cache
// grows a file's size a memory page (4 KiB on x86) at a time, so a reader that
// looks while a writer extends the file never sees a size between those. A
// file that does not start as SQLite's does is left to SQLite to refuse.
void require_whole_pages(const std::string& path, const FileHeader& h) {
  const uintmax_t page = h.page;
  if (!h.sqlite || page < 512 || page > 65536 || (page & (page - 1))) return;
  std::error_code ec;
  const uintmax_t bytes = std::filesystem::file_size(path, ec);
  if (ec) return;
  const uintmax_t unit = std::min<uintmax_t>(page, 4096);
  if (bytes % unit != 0)
    fail_env("database " + path + " is damaged (truncated: its " + std::to_string(bytes) +
             " bytes are not a whole number of its " + std::to_string(page) +
             "-byte pages). Restore it from a copy or an export");
}

// A rollback-journal database whose writer died mid-transaction keeps a hot
// journal, which only a connection that may write rolls back; a read-only one
// fails with "attempt to write a readonly database". A reader rolls it back
// first, as any SQLite reader would (the committed state, nothing lost), or says
// why it cannot. A live writer's journal is not hot: SQLite leaves it alone, and
// its lock is waited for up to busy_ms like any other (false: still held then).
// Without the wait, a reader that met a writer's exclusive lock (a commit, or
// a transaction larger than the page cache) failed at once as "an interrupted
// write" that needed rolling back, and the runtime fell back to its defaults:
// 116 of 190 lookups during one import (a helper's probe, sixty-third session).
bool recover_hot_journal(const std::string& path, int busy_ms) {
  std::error_code ec;
  if (!std::filesystem::exists(path + "-journal", ec)) return true;
  sqlite3* db = nullptr;
  int rc = sqlite3_open_v2(file_uri(path, "").c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_URI,
                           nullptr);
  if (rc == SQLITE_OK) rc = sqlite3_busy_timeout(db, busy_ms);
  if (rc == SQLITE_OK) rc = sqlite3_exec(db, "SELECT count(*) FROM sqlite_schema", nullptr, nullptr, nullptr);
  const std::string why = rc == SQLITE_OK ? "" : (db ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
  sqlite3_close(db);
  if ((rc & 0xff) == SQLITE_BUSY || (rc & 0xff) == SQLITE_LOCKED) return false;
  // Any failure, not only a read-only file: where the file was writable but its
  // folder was not, the rollback rewrote the file and then failed to remove the
  // journal (an I/O error), and every later read said only SQLite's "attempt to
  // write a readonly database".
  if (rc != SQLITE_OK && std::filesystem::exists(path + "-journal", ec))
    fail_env("database " + path + " holds an interrupted write (" + path +
             "-journal) that only a user who may write the file and its folder can roll back (SQLite: " + why +
             "); until then it cannot be read");
  return true;
}
}  // namespace

namespace {
// A writer that SQLite lets open a file it cannot write falls back to reading,
// and its WAL switch then leaves -wal and -shm files beside the database with
// the database's read-only mode, which kept every later writer out even once
// the database itself was writable again. Refuse before SQLite touches anything.
void require_writable(const std::string& path, bool exists) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (exists && ::access(path.c_str(), W_OK) != 0)
    fail_env("database " + path + " is not writable: " + std::strerror(errno) + "; nothing was changed");
  fs::path dir = fs::path(path).parent_path();
  if (dir.empty()) dir = ".";
  // The journal (-wal, or -journal in rollback mode) is created beside the file.
  if (fs::exists(dir, ec) && ::access(dir.c_str(), W_OK) != 0)
    fail_env("the folder of database " + path + " is not writable (SQLite keeps its journal there): " +
             std::strerror(errno) + "; nothing was changed");
}
}  // namespace

int busy_timeout_ms() {
  // One total wait for another writer's lock, per open and per write
  // transaction (documented as 10 s). A malformed value is the caller's mistake,
  // not a reason to wait 0 ms silently.
  const char* e = std::getenv("CELTUNE_BUSY_TIMEOUT_MS");
  if (!e || !*e) return kDefaultBusyTimeoutMs;
  int v = -1;
  const char* end = e + std::strlen(e);
  auto r = std::from_chars(e, end, v);
  if (r.ec != std::errc() || r.ptr != end || v < 0)
    fail_usage(std::string("CELTUNE_BUSY_TIMEOUT_MS='") + e + "': expected a whole number of milliseconds from 0 to " +
               std::to_string(std::numeric_limits<int>::max()));
  return v;
}

Store::Store(const std::string& path, Access access) : Store(path, access, busy_timeout_ms()) {}

Store::Store(const std::string& path, Access access, int busy_ms) : path_(path), access_(access), busy_ms_(busy_ms) {
  // One deadline for the whole open: a hot-journal check that waited for a
  // writer leaves the opening statements only what is left of it.
  const auto open_deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(busy_ms);
  if (path.empty()) fail_usage("the database path is empty");
  // SQLite answers a directory or a device node with "disk I/O error" at the
  // first read; say what is wrong instead.
  std::error_code fec;
  const auto st = std::filesystem::status(path, fec);
  if (!fec && std::filesystem::exists(st) && !std::filesystem::is_regular_file(st))
    fail_env("database " + path + " is not a regular file" +
             (std::filesystem::is_directory(st) ? " (it is a directory)" : ""));
  if (fec && fec != std::errc::no_such_file_or_directory)
    fail_env("cannot reach database " + path + ": " + fec.message());
  if (access == Access::read_write) require_writable(path, !fec && std::filesystem::exists(st));
  int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_URI;
  std::string name = file_uri(path, "");
  if (access == Access::read_only) {
    // Reading a WAL database normally creates -wal and -shm files beside it;
    // readers must not create files. With no -wal present no writer is active,
    // so the file is opened immutable (no lock or journal files at all). With a
    // -wal present a tuner may be writing: open read-only the usual way to see
    // its committed rows. A rollback-journal database is read the usual way
    // (a shared lock, no files): immutable there skipped the lock and the hot
    // journal's recovery, and read a writer's uncommitted pages (merge copied
    // rows that were rolled back).
    //
    // A -wal without a -shm (the two files copied without it, a writer that
    // died while closing) has no live writer either: every connection to a WAL
    // database maps the -shm. SQLite reads such a log only by creating a -shm,
    // which a reader must not do, and cannot do in a read-only folder (SQLite's
    // wal.html: a read-only WAL database needs its -shm and -wal to exist or be
    // creatable, or immutable; nolock disables WAL, and the heap-memory index
    // of locking_mode=EXCLUSIVE needs a write lock on the file). A log too
    // short to hold one frame holds no commit: the file alone is the whole
    // database, read immutable. A log with frames in a folder where no -shm can
    // be made is refused saying so. (With the folder writable SQLite makes the
    // -shm: the only way to read those commits.)
    if (!recover_hot_journal(path, busy_ms)) fail_locked();
    const FileHeader header = read_header(path);  // after the rollback, which may rewrite it
    require_whole_pages(path, header);
    namespace fs = std::filesystem;
    std::error_code ec;
    const std::string wal = path + "-wal";
    const bool wal_mode = header.wal, has_wal = fs::exists(wal, ec), has_shm = fs::exists(path + "-shm", ec);
    // The smallest frame: a 24-byte frame header and a 512-byte page, after the
    // log's 32-byte header.
    constexpr uintmax_t kSmallestLogWithFrame = 32 + 24 + 512;
    const uintmax_t wal_bytes = has_wal ? fs::file_size(wal, ec) : 0;
    const bool log_has_frames = has_wal && (ec || wal_bytes >= kSmallestLogWithFrame);
    const bool immutable =
        wal_mode && !fs::exists(path + "-journal", ec) && (!has_wal || (!has_shm && !log_has_frames));
    if (wal_mode && log_has_frames && !has_shm) {
      fs::path dir = fs::path(path).parent_path();
      if (dir.empty()) dir = ".";
      if (::access(dir.c_str(), W_OK) != 0)
        fail_env("database " + path + " has commits in its write-ahead log (" + wal + ") but no " + path +
                 "-shm, which SQLite needs to read the log and cannot create in this read-only folder; open it once "
                 "where the folder is writable (celtune db import /dev/null as its owner folds the log into the "
                 "file), or ship it in rollback-journal mode (PRAGMA journal_mode = DELETE) as the shipped "
                 "database is");
    }
    flags = SQLITE_OPEN_READONLY | SQLITE_OPEN_URI;
    name = file_uri(path, immutable ? "?mode=ro&immutable=1" : "?mode=ro");
  }
  if (sqlite3_open_v2(name.c_str(), &db_, flags | SQLITE_OPEN_NOMUTEX, nullptr) != SQLITE_OK) {
    std::string m = db_ ? sqlite3_errmsg(db_) : "out of memory";
    sqlite3_close(db_);
    db_ = nullptr;
    fail_env("cannot open database " + path + ": " + m);
  }
  try {
    // The opening statements (schema check, WAL switch, migration) meet another
    // writer's lock too: a rollback-journal file being written, or several
    // processes creating the same new file. They retry under the same deadline
    // as a write instead of escaping as an uncaught Busy.
    retry_busy(
        [&] {
          exec(db_, path_, "PRAGMA foreign_keys = ON");
          migrate();
        },
        open_deadline);
  } catch (...) {
    sqlite3_close(db_);
    db_ = nullptr;
    throw;
  }
}

[[noreturn]] void Store::fail_locked() const {
  // A reader changes nothing either way: "made no change, nothing lost" read as
  // if a lookup had tried to write (the README probe).
  fail_env("database " + path_ + " stayed locked by another process past the busy timeout (" +
           std::to_string(busy_ms_) + " ms, CELTUNE_BUSY_TIMEOUT_MS)" +
           (access_ == Access::read_only ? std::string("; nothing was read from it")
                                         : std::string("; this operation made no change and nothing stored before "
                                                       "it was lost")));
}

void Store::retry_busy(const std::function<void()>& fn, std::optional<std::chrono::steady_clock::time_point> until) {
  using Clock = std::chrono::steady_clock;
  // Nested inside another retry (migrate's write within the open): let the
  // outermost loop own the one deadline, so waits never add up.
  if (deadline_) {
    fn();
    return;
  }
  deadline_ = until ? *until : Clock::now() + std::chrono::milliseconds(busy_ms_);
  struct Reset {
    std::optional<Clock::time_point>& d;
    ~Reset() { d.reset(); }
  } reset{deadline_};
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*deadline_ - Clock::now()).count();
    // SQLite's own wait gets only what is left of the deadline.
    sqlite3_busy_timeout(db_, static_cast<int>(std::max<int64_t>(0, left)));
    try {
      fn();
      return;
    } catch (const Stmt::Busy&) {
      if (Clock::now() >= *deadline_) fail_locked();
      std::this_thread::sleep_for(std::chrono::milliseconds(std::clamp<int64_t>(left / 10, 1, 50)));
    }
  }
}

Store::~Store() { sqlite3_close(db_); }

void Store::migrate() {
  int version = 0;
  {
    Stmt s(db_, path_, "PRAGMA user_version");  // also the first read: a non-database fails here
    if (s.step()) version = s.i32(0);
  }
  if (version > kSchemaVersion)
    fail_env("database " + path_ + " has schema version " + std::to_string(version) +
             ", newer than this celtune understands (" + std::to_string(kSchemaVersion) + ")");
  if (version == kSchemaVersion) {
    // The version lives in the 100-byte header, which survives truncation; reading
    // the schema table touches the first page and the catalogue, so a damaged
    // file fails here, at open, instead of at some later query.
    Stmt s(db_, path_,
           "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name IN "
           "('devices', 'problems', 'configs', 'measurements', 'best')");
    if (!s.step() || s.i64(0) != 5) fail_env("database " + path_ + " is missing celtune tables");
    if (access_ == Access::read_write) check_structure();
    return;
  }
  if (access_ == Access::read_only) {
    fail_env("database " + path_ + (version == 0 ? " is not a celtune database (no schema)"
                                                 : " has an old schema and is opened read-only"));
  }
  // A file with tables but no celtune version is someone else's: refuse before
  // changing any setting of it (the WAL switch below rewrites its header). The
  // version and the tables are read by one statement, so from one snapshot: a
  // second read of the catalogue alone could see the schema that another tuner
  // created after the first read (version 0, then tables: the concurrency test
  // failed so under load).
  if (version == 0) {
    int64_t now = 0, tables = 0;
    {
      Stmt t(db_, path_, "SELECT (SELECT user_version FROM pragma_user_version), (SELECT count(*) FROM sqlite_master)");
      if (t.step()) now = t.i64(0), tables = t.i64(1);
    }
    if (now != 0) return migrate();  // created meanwhile: open it as the database it now is
    if (tables != 0) fail_env("database " + path_ + " holds tables but no celtune schema version; refusing to touch it");
  }
  // WAL lets the runtime read while a tuner writes; set once, it sticks to the file.
  exec(db_, path_, "PRAGMA journal_mode = WAL");
  write([&] {
    int v = 0;
    Stmt s(db_, path_, "PRAGMA user_version");
    if (s.step()) v = s.i32(0);
    if (v == 0) {  // migration 0 → 1: the initial schema
      bool empty = true;
      Stmt t(db_, path_, "SELECT count(*) FROM sqlite_master");
      if (t.step()) empty = t.i64(0) == 0;
      if (!empty) fail_env("database " + path_ + " holds tables but no celtune schema version; refusing to touch it");
      exec(db_, path_, kSchemaSql);
      exec(db_, path_, "PRAGMA user_version = 1");
    }
    // Future migrations: if (v < 2) { … ; PRAGMA user_version = 2 }
  });
}

// A writer first asks SQLite whether the file is sound. Rows written into a
// damaged B-tree were committed and reported stored, and then export and merge
// refused the file, so the user could not get them out (a copy short by its last
// 256 bytes took a tune's rows and an import, exit 0; the forty-fourth session's
// CLI probe). integrity_check, not quick_check: quick_check reads every page but
// does not compare the indexes with their tables, and an index missing rows
// (eight bytes flipped in a tuned database, the fifty-third session's probe)
// passed it; the UNIQUE constraints then missed those rows and an import stored
// seven of them twice, exit 0. The full check takes milliseconds for a tuned
// database. Readers skip it: the runtime's lookup of a damaged file already warns
// and falls back to the defaults at the first row it cannot read.
namespace {
// Fails unless integrity_check finds nothing, its first finding on one line, then `then`.
void require_integrity(sqlite3* db, const std::string& path, const char* then) {
  Stmt s(db, path, "PRAGMA integrity_check(1)");
  std::string first = s.step() ? s.text(0) : std::string("no answer");
  std::replace(first.begin(), first.end(), '\n', ' ');  // "*** in database main ***\nOn tree page …"
  if (first != "ok") fail_env("database " + path + " is damaged (SQLite's integrity_check: " + first + "); " + then);
}
}  // namespace

void Store::check_structure() const {
  require_integrity(db_, path_,
                    "nothing was written to it. Restore it from a copy or an export, or tune into a new file");
  // The schema has no triggers: one added by hand runs inside our writes (an
  // AFTER INSERT ON best that deleted every measurement let an import exit 0
  // with all 489 gone; a helper's probe, sixty-second session).
  Stmt t(db_, path_, "SELECT name FROM sqlite_master WHERE type = 'trigger' ORDER BY name LIMIT 1");
  if (t.step())
    fail_env("database " + path_ + " holds a trigger celtune did not create ('" +
             printable_message(t.text(0).substr(0, 64), false) +
             "'), which a write would run; nothing was written to it. Export its rows into a new file");
}

void Store::check_sound() const {
  require_integrity(db_, path_, "its rows may be incomplete. Restore it from a copy or an export");
}

void Store::write(const std::function<void()>& fn) {
  if (access_ == Access::read_only) fail_env("database " + path_ + " is open read-only");
  if (tx_depth_ > 0) {  // nested: part of the caller's transaction
    fn();
    return;
  }
  // BEGIN IMMEDIATE takes the write lock up front, so a transaction never has to
  // upgrade (and deadlock) halfway. A busy statement rolls the whole transaction
  // back and retry_busy runs it again until the one deadline passes.
  retry_busy([&] {
    exec(db_, path_, "BEGIN IMMEDIATE");
    ++tx_depth_;
    try {
      fn();
      commit();
      --tx_depth_;
    } catch (...) {
      --tx_depth_;
      sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
      throw;
    }
  });
}

void Store::commit() {
  // A rollback-journal COMMIT waits for readers' shared locks to clear; one that
  // meets them past SQLite's own wait returns busy with the transaction still
  // open. COMMIT alone is retried then, never fn again: fn may have printed a
  // summary of what it wrote (printed before COMMIT, so that a summary which
  // cannot be written rolls the write back), and it must not print twice.
  using Clock = std::chrono::steady_clock;
  for (;;) {
    try {
      exec(db_, path_, "COMMIT");
      return;
    } catch (const Stmt::Busy&) {
      if (Clock::now() >= *deadline_) fail_locked();
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*deadline_ - Clock::now()).count();
      sqlite3_busy_timeout(db_, static_cast<int>(std::max<int64_t>(0, left)));
    }
  }
}

namespace {
// The cuBLASLt version number a record's text stands for (13.1.0: 130100), or 0
// where the text is no such version (the CPU's, or none).
int64_t cublaslt_number(const std::string& text) {
  unsigned major = 0, minor = 0, patch = 0;
  char tail = 0;
  if (text.size() > 32 || std::sscanf(text.c_str(), "%u.%u.%u%c", &major, &minor, &patch, &tail) != 3 ||
      minor > 99 || patch > 99 || major > 9999)
    return 0;
  return int64_t{major} * 10000 + minor * 100 + patch;
}
}  // namespace

int64_t Store::device_id(const DeviceInfo& d) {
  // A device row is keyed by the version text; its number is what the runtime
  // compares pinned GEMM algorithms with. A record without the number (an older
  // export's, read as 0) took the row first, and a best row pinned to 130100 on
  // the same device was then "algos INVALID", and export and merge refused the
  // database (a helper's probe, sixty-second session): the number now comes
  // from the text where the record has none (check_identity has the two agree
  // where it has one), and a row stored without it is given it.
  const int64_t version = d.cublaslt_version > 0 ? d.cublaslt_version : cublaslt_number(d.cublaslt);
  Stmt ins(db_, path_,
           "INSERT INTO devices (name, arch, sm_count, memory_bytes, driver, runtime, cublaslt, cublaslt_version) "
           "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) "
           "ON CONFLICT DO UPDATE SET cublaslt_version = excluded.cublaslt_version "
           "WHERE cublaslt_version = 0 AND excluded.cublaslt_version > 0");
  ins.bind(1, d.name).bind(2, d.arch).bind(3, d.sm_count).bind(4, d.memory_bytes).bind(5, d.driver);
  ins.bind(6, d.runtime).bind(7, d.cublaslt).bind(8, version);
  ins.step();
  Stmt sel(db_, path_,
           "SELECT id FROM devices WHERE name = ?1 AND arch = ?2 AND sm_count = ?3 AND memory_bytes = ?4 "
           "AND driver = ?5 AND runtime = ?6 AND cublaslt = ?7");
  sel.bind(1, d.name).bind(2, d.arch).bind(3, d.sm_count).bind(4, d.memory_bytes).bind(5, d.driver);
  sel.bind(6, d.runtime).bind(7, d.cublaslt);
  if (!sel.step()) fail_env("database " + path_ + ": device row vanished");
  return sel.i64(0);
}

int64_t Store::problem_id(const Problem& p) {
  Stmt ins(db_, path_,
           "INSERT INTO problems (key, family, tokens, hidden, vocab, dtype, mode) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) "
           "ON CONFLICT DO NOTHING");
  ins.bind(1, p.key()).bind(2, std::string(to_string(p.family))).bind(3, p.tokens).bind(4, p.hidden);
  ins.bind(5, p.vocab).bind(6, std::string(to_string(p.dtype))).bind(7, std::string(to_string(p.mode)));
  ins.step();
  Stmt sel(db_, path_, "SELECT id FROM problems WHERE key = ?1");
  sel.bind(1, p.key());
  if (!sel.step()) fail_env("database " + path_ + ": problem row vanished");
  return sel.i64(0);
}

int64_t Store::config_id(const KernelConfig& c) {
  const std::string j = canonical_json(c);
  Stmt ins(db_, path_, "INSERT INTO configs (json) VALUES (?1) ON CONFLICT DO NOTHING");
  ins.bind(1, j).step();
  Stmt sel(db_, path_, "SELECT id FROM configs WHERE json = ?1");
  sel.bind(1, j);
  if (!sel.step()) fail_env("database " + path_ + ": config row vanished");
  return sel.i64(0);
}

namespace {
constexpr const char* kMeasurementInsert =
    "INSERT INTO measurements (device_id, problem_id, config_id, kernel_hash, status, reason, median_ms, "
    "p20_ms, p80_ms, samples, spread, clock_start_mhz, clock_end_mhz, created_at) "
    "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14) "
    "ON CONFLICT (device_id, problem_id, config_id, kernel_hash) ";
constexpr const char* kMeasurementReplace =
    "DO UPDATE SET status = excluded.status, reason = excluded.reason, median_ms = excluded.median_ms, "
    "p20_ms = excluded.p20_ms, p80_ms = excluded.p80_ms, samples = excluded.samples, spread = excluded.spread, "
    "clock_start_mhz = excluded.clock_start_mhz, clock_end_mhz = excluded.clock_end_mhz, "
    "created_at = excluded.created_at";
}  // namespace

bool Store::insert_measurement(const Measurement& m, bool replace) {
  bool added = false;
  write([&] {
    const int64_t d = device_id(m.device), p = problem_id(m.problem), c = config_id(m.config);
    const std::string sql = std::string(kMeasurementInsert) + (replace ? kMeasurementReplace : "DO NOTHING");
    Stmt s(db_, path_, sql.c_str());
    s.bind(1, d).bind(2, p).bind(3, c).bind(4, m.kernel_hash).bind(5, m.status).bind(6, m.reason);
    s.bind(7, m.stats.median_ms).bind(8, m.stats.p20_ms).bind(9, m.stats.p80_ms).bind(10, m.stats.samples);
    s.bind(11, m.stats.spread).bind(12, m.clock_start_mhz).bind(13, m.clock_end_mhz).bind(14, m.created_at);
    s.step();
    added = sqlite3_changes(db_) > 0;
  });
  return added;
}

void Store::record(const Measurement& m) { insert_measurement(m, true); }

bool Store::add_measurement(const Measurement& m) { return insert_measurement(m, false); }

void Store::put_best(const BestEntry& b) {
  write([&] {
    const int64_t d = device_id(b.device), p = problem_id(b.problem), c = config_id(b.config);
    Stmt s(db_, path_,
           "INSERT OR REPLACE INTO best (device_id, problem_id, config_id, median_ms, p20_ms, p80_ms, samples, "
           "spread, default_ms, speedup, celtune_version, kernel_hash, cublaslt, created_at) "
           "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)");
    s.bind(1, d).bind(2, p).bind(3, c).bind(4, b.stats.median_ms).bind(5, b.stats.p20_ms);
    s.bind(6, b.stats.p80_ms).bind(7, b.stats.samples).bind(8, b.stats.spread).bind(9, b.default_ms);
    s.bind(10, b.speedup).bind(11, b.celtune_version).bind(12, b.kernel_hash).bind(13, b.cublaslt);
    s.bind(14, b.created_at);
    s.step();
  });
}

namespace {
// The SELECT behind both best-entry readers; `where` is a fixed clause with
// bound parameters, never text from input.
constexpr const char* kBestSelect =
    ", p.key, c.json, b.median_ms, b.p20_ms, b.p80_ms, b.samples, b.spread, b.default_ms, b.speedup, "
    "b.celtune_version, b.kernel_hash, b.cublaslt, b.created_at FROM best b JOIN devices d ON d.id = "
    "b.device_id JOIN problems p ON p.id = b.problem_id JOIN configs c ON c.id = b.config_id ";

// A stored problem key or config that no longer parses (edited by hand, written
// by a damaged disk) is a damaged database, exit 3 naming it, not a usage error.
Problem stored_problem(const std::string& path, const std::string& key) {
  try {
    return Problem::from_key(key);
  } catch (const Error& e) {
    fail_env("database " + path + " holds a damaged problem key: " + e.what());
  }
}
KernelConfig stored_config(const std::string& path, const std::string& json) {
  try {
    return parse_config_json(json);
  } catch (const Error& e) {
    fail_env("database " + path + " holds a damaged config: " + e.what());
  }
}

// The best-entry query with its tail: a fixed WHERE and/or ORDER BY clause.
std::string best_query(const std::string& tail) { return std::string("SELECT ") + kDeviceCols + kBestSelect + tail; }

BestEntry read_best(const Stmt& s, const std::string& path) {
  BestEntry b;
  b.device = read_device(s, 0);
  b.problem = stored_problem(path, s.text(8));
  b.config = stored_config(path, s.text(9));
  b.stats = read_stats(s, 10);
  b.default_ms = s.f64(15);
  b.speedup = s.f64(16);
  b.celtune_version = s.text(17);
  b.kernel_hash = s.text(18);
  b.cublaslt = s.text(19);
  b.created_at = s.text(20);
  return b;
}
}  // namespace

Offered Store::offer_best(const BestEntry& b, const std::string& current_hash) {
  Offered result = Offered::refused;
  write([&] {
    const int64_t d = device_id(b.device), p = problem_id(b.problem);
    Stmt s(db_, path_, best_query("WHERE b.device_id = ?1 AND b.problem_id = ?2").c_str());
    s.bind(1, d).bind(2, p);
    // A faster row from other kernels once displaced this build's row, and the
    // runtime, which skips it, fell back to the default. Ties keep what is
    // stored, so merging a database with itself changes nothing. A stored row
    // that breaks a rule (a median of −1 ms, a config the kernels refuse: edited
    // or damaged, and skipped by the runtime) loses to any sound one: it once
    // "won" as the faster, and the sound record was dropped.
    if (!s.step()) {
      result = Offered::added;
    } else {
      std::optional<BestEntry> stored;
      try {
        stored = read_best(s, path_);
      } catch (const Error&) {  // a problem key or config that no longer parses
      }
      bool wins = !stored || !broken_record(*stored).empty();
      if (!wins) {
        const bool ours = b.kernel_hash == current_hash, stored_ours = stored->kernel_hash == current_hash;
        wins = ours != stored_ours ? ours : b.stats.median_ms < stored->stats.median_ms;
      }
      result = wins ? Offered::replaced : Offered::refused;
    }
    if (result != Offered::refused) put_best(b);
  });
  return result;
}

// The readers join each row to its device, problem and config, so a row whose
// parent was deleted (foreign keys off, another tool) vanished from list, export
// and merge without a word; it is damage, exit 3. The Store writes only rows
// whose parents exist, so once per Store is enough (export and merge read both
// tables).
//
// The problems table's shape columns are what best_for_shape (the runtime's
// lookup) searches by, while every reader takes the problem from its key: a row
// whose columns disagree with its key (vocab edited to 2^63 − 1) vanished from
// lookups without a word while list and export showed it sound (the CLI probe,
// forty-fourth session). Damage too, checked with the references.
std::map<std::string, std::string> Store::damaged_problems() const {
  std::map<std::string, std::string> bad;
  Stmt s(db_, path_, "SELECT key, family, tokens, hidden, vocab, dtype, mode FROM problems");
  while (s.step()) {
    const std::string key = s.text(0);
    try {
      const Problem p = stored_problem(path_, key);
      if (s.text(1) != to_string(p.family) || s.i64(2) != p.tokens || s.i64(3) != p.hidden || s.i64(4) != p.vocab ||
          s.text(5) != to_string(p.dtype) || s.text(6) != to_string(p.mode))
        bad[key] = "database " + path_ + ": the problem row " + key +
                   " holds shape columns that disagree with its key: the database is damaged";
    } catch (const Error& e) {
      bad[key] = e.what();
    }
  }
  return bad;
}

std::vector<std::string> Store::dangling_rows(const char* table, const char* kind) const {
  // `table` is one of two literals, never input.
  std::vector<std::string> rows;
  Stmt s(db_, path_,
         (std::string("SELECT t.rowid, d.id IS NULL, p.id IS NULL, c.id IS NULL FROM ") + table +
          " t LEFT JOIN devices d ON d.id = t.device_id LEFT JOIN problems p ON p.id = t.problem_id "
          "LEFT JOIN configs c ON c.id = t.config_id WHERE d.id IS NULL OR p.id IS NULL OR c.id IS NULL")
             .c_str());
  while (s.step())
    rows.push_back(std::string(kind) + " row " + std::to_string(s.i64(0)) + ": refers to a missing " +
                   (s.i64(1) ? "device" : s.i64(2) ? "problem" : "config"));
  return rows;
}

void Store::check_references() const {
  if (references_checked_) return;
  {
    Stmt s(db_, path_, "PRAGMA foreign_key_check");
    if (s.step())
      fail_env("database " + path_ + ": a row of table " + s.text(0) + " refers to a missing row of " + s.text(2) +
               ": the database is damaged");
  }
  if (const auto bad = damaged_problems(); !bad.empty()) fail_env(bad.begin()->second);
  references_checked_ = true;
}

template <typename Row, typename Read>
std::vector<Row> Store::read_rows(const char* table, const char* kind, const char* sql, Read read,
                                  std::vector<std::string>* unreadable) const {
  std::vector<Row> out;
  Stmt s(db_, path_, sql);
  if (!unreadable) {
    check_references();
    while (s.step()) out.push_back(read(s));
    return out;
  }
  const auto bad_problems = damaged_problems();
  for (auto& row : dangling_rows(table, kind)) unreadable->push_back(std::move(row));
  while (s.step()) {
    const std::string name = std::string(kind) + " " + s.text(0) + " " + s.text(8);
    if (const auto it = bad_problems.find(s.text(8)); it != bad_problems.end()) {
      unreadable->push_back(name + ": " + it->second);
      continue;
    }
    try {
      out.push_back(read(s));
    } catch (const Error& e) {
      unreadable->push_back(name + ": " + e.what());
    }
  }
  return out;
}

namespace {
// Rows in an order that depends on what they hold, never on row ids, so the same
// content exports the same bytes whatever order it was imported in.
constexpr const char* kDeviceOrder =
    "d.name, d.arch, d.sm_count, d.memory_bytes, d.driver, d.runtime, d.cublaslt, d.cublaslt_version";
}  // namespace

std::vector<BestEntry> Store::best_entries(std::vector<std::string>* unreadable) const {
  return read_rows<BestEntry>("best", "best", best_query(std::string("ORDER BY ") + kDeviceOrder + ", p.key").c_str(),
                              [&](const Stmt& s) { return read_best(s, path_); }, unreadable);
}

std::vector<BestEntry> Store::best_for_shape(const Problem& p) const {
  // The runtime's reader too: a row whose config was deleted used to vanish
  // from its lookups without a word; now the database is damaged, as for list.
  check_references();
  std::vector<BestEntry> out;
  Stmt s(db_, path_,
         best_query("WHERE p.family = ?1 AND p.hidden = ?2 AND p.vocab = ?3 AND p.dtype = ?4 AND p.mode = ?5 "
                    "ORDER BY d.name, p.tokens")
             .c_str());
  s.bind(1, std::string(to_string(p.family))).bind(2, p.hidden).bind(3, p.vocab);
  s.bind(4, std::string(to_string(p.dtype))).bind(5, std::string(to_string(p.mode)));
  while (s.step()) out.push_back(read_best(s, path_));
  return out;
}

std::vector<Measurement> Store::measurements(std::vector<std::string>* unreadable) const {
  const std::string sql =
      std::string("SELECT ") + kDeviceCols +
      ", p.key, c.json, m.median_ms, m.p20_ms, m.p80_ms, m.samples, m.spread, m.kernel_hash, m.status, "
      "m.reason, m.clock_start_mhz, m.clock_end_mhz, m.created_at FROM measurements m JOIN devices d ON d.id = "
      "m.device_id JOIN problems p ON p.id = m.problem_id JOIN configs c ON c.id = m.config_id "
      "ORDER BY " + kDeviceOrder + ", p.key, c.json, m.kernel_hash";
  return read_rows<Measurement>("measurements", "measurement", sql.c_str(), [&](const Stmt& s) {
    Measurement m;
    m.device = read_device(s, 0);
    m.problem = stored_problem(path_, s.text(8));
    m.config = stored_config(path_, s.text(9));
    m.stats = read_stats(s, 10);
    m.kernel_hash = s.text(15);
    m.status = s.text(16);
    m.reason = s.text(17);
    m.clock_start_mhz = s.f64(18);
    m.clock_end_mhz = s.f64(19);
    m.created_at = s.text(20);
    return m;
  }, unreadable);
}

std::optional<Measurement> Store::find_measurement(const DeviceInfo& d, const Problem& p, const KernelConfig& c,
                                                   const std::string& kernel_hash) const {
  Stmt s(db_, path_,
         "SELECT m.median_ms, m.p20_ms, m.p80_ms, m.samples, m.spread, m.status, m.reason, m.clock_start_mhz, "
         "m.clock_end_mhz, m.created_at FROM measurements m JOIN devices d ON d.id = m.device_id "
         "JOIN problems p ON p.id = m.problem_id JOIN configs c ON c.id = m.config_id "
         "WHERE d.name = ?1 AND d.arch = ?2 AND d.sm_count = ?3 AND d.memory_bytes = ?4 AND d.driver = ?5 "
         "AND d.runtime = ?6 AND d.cublaslt = ?7 AND p.key = ?8 AND c.json = ?9 AND m.kernel_hash = ?10");
  s.bind(1, d.name).bind(2, d.arch).bind(3, d.sm_count).bind(4, d.memory_bytes).bind(5, d.driver);
  s.bind(6, d.runtime).bind(7, d.cublaslt).bind(8, p.key()).bind(9, canonical_json(c)).bind(10, kernel_hash);
  if (!s.step()) return std::nullopt;
  Measurement m;
  m.device = d, m.problem = p, m.config = c, m.kernel_hash = kernel_hash;
  m.stats = read_stats(s, 0);
  m.status = s.text(5);
  m.reason = s.text(6);
  m.clock_start_mhz = s.f64(7);
  m.clock_end_mhz = s.f64(8);
  m.created_at = s.text(9);
  return m;
}

std::string broken_rule(const Problem& p, const KernelConfig& c) {
  try {
    validate_config(p, c);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

namespace {
template <typename Row>
std::string broken(const Row& row) {
  try {
    check_record(row);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}
}  // namespace

std::string broken_record(const BestEntry& b) { return broken(b); }
std::string broken_record(const Measurement& m) { return broken(m); }

std::string broken_best_note(const std::string& path, const BestEntry& b) {
  const std::string rule = broken_record(b);
  if (rule.empty()) return "";
  return "database " + path + ": the best config stored for " + b.device.name + " " + b.problem.key() + " (" +
         to_string(b.config) + ") breaks a rule (" + rule + ")";
}

std::string dump_text(const nlohmann::json& j, int indent) {
  return j.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

namespace {
// Export's salvage of damaged text: each byte sequence that is not UTF-8, and
// each control character, becomes '?' (one byte: a name stays within its
// length rule, where U+FFFD's three bytes pushed one past it). True if any did.
bool salvage_strings(nlohmann::json& j) {
  bool changed = false;
  if (j.is_string()) {
    std::string text = unprintable_as(j.get_ref<const std::string&>(), '?');
    changed = text != j.get_ref<const std::string&>();
    if (changed) j = std::move(text);
  } else if (j.is_structured()) {
    for (auto& v : j) changed = salvage_strings(v) || changed;
  }
  return changed;
}
}  // namespace

ExportReport export_jsonl(const Store& s, std::ostream& out, bool skip_damaged) {
  // Every line is read back as import reads it before the first is written: an
  // export that import refuses is a backup that fails when it is needed (a
  // stored median of −1 ms was exported, then refused). Damaged text (not
  // UTF-8, control characters) is salvaged, and the caller told which rows.
  std::vector<std::string> lines;
  ExportReport report;
  auto add = [&]<typename Row>(const Row& row, const char* kind) {
    nlohmann::json j = row;
    j["record"] = kind;
    const std::string name = std::string(kind) + " " + row.device.name + " " + row.problem.key();
    const bool salvaged = salvage_strings(j);
    std::string line = j.dump(), damage;
    try {
      check_record(parse_json_strict(line).get<Row>());
    } catch (const nlohmann::json::exception& e) {
      damage = std::string("it does not read back (") + e.what() + ")";
    } catch (const Error& e) {
      damage = e.what();
    }
    if (damage.empty()) {
      if (salvaged) report.replaced.push_back(name);
      lines.push_back(std::move(line));
    } else if (skip_damaged) {
      report.skipped.push_back(name + " (" + to_string(row.config) + "): " + damage);
    } else {
      fail_env("the database holds a damaged " + std::string(kind) + " row for " + row.problem.key() + ": " + damage +
               "; nothing was exported (--skip-damaged exports the other rows)");
    }
  };
  // Skipping, a row that does not even read (its config or problem key does
  // not parse, it refers to a missing row) is left out and named too.
  std::vector<std::string>* unreadable = skip_damaged ? &report.skipped : nullptr;
  for (const auto& b : s.best_entries(unreadable)) add(b, "best");
  for (const auto& m : s.measurements(unreadable)) add(m, "measurement");
  for (const auto& line : lines) out << line << '\n';
  return report;
}

namespace {
// A call's time as a record may hold it: at most 1e7 ms (almost three hours; a
// median of 1e300 ms was imported, printed as 300 digits and plotted at the
// axis' origin), and at least 1e-4 ms, under any launch or call through a
// backend (a median of 1e-300 ms imported, and would have won every merge
// against sound rows of the same kernels; a helper's probe, sixty-second session).
bool time_in_range(double ms) { return std::isfinite(ms) && ms >= 1e-4 && ms <= 1e7; }

// A record that would poison the database: a median of 0 or -1 wins every later
// import and merge, and a config the kernels refuse would be served at run time.
// Failed measurements carry a reason and no timing (check_record).
void check_stats(const Stats& t) {
  if (!time_in_range(t.median_ms) || !time_in_range(t.p20_ms) || !time_in_range(t.p80_ms))
    fail_usage("times must be within [1e-4, 1e7] ms (median " + format_double(t.median_ms) + ", p20 " +
               format_double(t.p20_ms) + ", p80 " + format_double(t.p80_ms) + ")");
  if (!(t.p20_ms <= t.median_ms && t.median_ms <= t.p80_ms))
    fail_usage("p20 ≤ median ≤ p80 does not hold (" + format_double(t.p20_ms) + ", " + format_double(t.median_ms) +
               ", " + format_double(t.p80_ms) + ")");
  // tune times at most 10 000 runs a candidate (--max-runs), and its interleaved
  // rounds fewer: a row claiming 10^15 samples imported.
  constexpr int64_t kMaxSamples = 1000000;
  if (t.samples < 1 || t.samples > kMaxSamples)
    fail_usage("samples must be in [1, " + std::to_string(kMaxSamples) + "], got " + std::to_string(t.samples));
  if (!std::isfinite(t.spread) || t.spread < 0) fail_usage("spread must be finite and ≥ 0, got " + format_double(t.spread));
  // spread is (p80 − p20) / median of the same samples (tuners/measure.cpp
  // computes it so, and `db list` and the tuner's noise guard read it): a row
  // whose spread disagreed with its own quantiles imported.
  const double expected = (t.p80_ms - t.p20_ms) / t.median_ms;
  if (std::fabs(t.spread - expected) > 1e-9 * std::max(1.0, expected))
    fail_usage("spread " + format_double(t.spread) + " is not (p80 − p20) / median (" + format_double(expected) + ")");
}

// Text a record carries and `db list` or `lookup` print: at most `max` bytes of
// valid UTF-8 without control characters, C1 included (an escape sequence in a
// version string was printed raw; a byte 0xff made every later export fail;
// U+009B, the 8-bit CSI, was imported).
bool printable(const std::string& s, size_t max) {
  if (s.size() > max) return false;
  for (size_t i = 0; i < s.size();) {
    const size_t n = utf8_sequence_length(s, i);
    if (n == 0 || is_control(s, i, n)) return false;
    i += n;
  }
  return true;
}

// Who measured and when: a kernel hash is what kernel_hash.py prints (lowercase
// hex; tests use short ones; "zz" was accepted), a device name is printable text, a time is UTC ISO
// 8601 as utc_now_iso8601() writes it. An empty or 100 000-character hash, a
// name with escape sequences (printed raw by `db list`), "yesterday" were all
// accepted.
void check_identity(const DeviceInfo& d, const std::string& kernel_hash, const std::string& created_at) {
  const bool hash_ok = !kernel_hash.empty() && kernel_hash.size() <= 64 &&
                       std::all_of(kernel_hash.begin(), kernel_hash.end(),
                                   [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
  if (!hash_ok) fail_usage("kernel_hash must be 1 to 64 lowercase hex digits, got '" + kernel_hash.substr(0, 80) + "'");
  if (d.name.empty() || !printable(d.name, 256))
    fail_usage("device name must be 1 to 256 bytes of UTF-8 without control characters");
  for (const auto& [field, text] : {std::pair{"id", &d.id}, std::pair{"arch", &d.arch}, std::pair{"driver", &d.driver},
                                    std::pair{"runtime", &d.runtime}, std::pair{"cublaslt", &d.cublaslt}})
    if (!printable(*text, 64))
      fail_usage(std::string("device ") + field + " must be at most 64 bytes of UTF-8 without control characters");
  // The backends' arch: "cpu", or "sm_" and the compute capability's digits
  // (major then minor, as cuda_backend writes it). An empty or made-up arch made
  // a second device row that `db list` showed as a twin of the first.
  const bool sm_arch = d.arch.size() >= 5 && d.arch.size() <= 7 && d.arch.compare(0, 3, "sm_") == 0 &&
                       std::all_of(d.arch.begin() + 3, d.arch.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (d.arch != "cpu" && !sm_arch)
    fail_usage("device arch must be \"cpu\" or \"sm_\" and the compute capability (sm_90), got '" +
               d.arch.substr(0, 64) + "'");
  // Every device that measures has a processor (the CPU backend's count is its
  // threads): a row from an sm_90 device with 0 SMs imported.
  if (d.sm_count < 1) fail_usage("device sm_count must be ≥ 1, got " + std::to_string(d.sm_count));
  if (d.memory_bytes < 0 || d.cublaslt_version < 0) fail_usage("device memory_bytes and cublaslt_version must be ≥ 0");
  // The device row is keyed by the version text, not the number (the runtime
  // compares pinned GEMM algorithms against the number): they must agree, or the
  // first record's number silently stood for every later one's. The backend
  // writes the text from the number as major.minor.patch (130100: 13.1.0).
  if (d.cublaslt_version > 0) {
    const int64_t v = d.cublaslt_version;
    const std::string text =
        std::to_string(v / 10000) + "." + std::to_string((v / 100) % 100) + "." + std::to_string(v % 100);
    if (d.cublaslt != text)
      fail_usage("device cublaslt '" + d.cublaslt.substr(0, 64) + "' does not match cublaslt_version " +
                 std::to_string(v) + " (" + text + ")");
  }
  const std::string& t = created_at;
  auto digits = [&](size_t at, size_t n) {
    for (size_t i = at; i < at + n; ++i)
      if (i >= t.size() || t[i] < '0' || t[i] > '9') return false;
    return true;
  };
  const bool time_ok = t.size() == 20 && digits(0, 4) && t[4] == '-' && digits(5, 2) && t[7] == '-' && digits(8, 2) &&
                       t[10] == 'T' && digits(11, 2) && t[13] == ':' && digits(14, 2) && t[16] == ':' &&
                       digits(17, 2) && t[19] == 'Z';
  auto num = [&](size_t at, size_t n) { return std::stoi(t.substr(at, n)); };
  // A day the month has (2026-02-31 was imported), from 2000 on (0000-01-01
  // was): celtune dates its rows by the clock that measured them.
  auto days_in = [](int y, int m) {
    constexpr int kDays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    const bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    return m == 2 && leap ? 29 : kDays[m - 1];
  };
  const bool range_ok = time_ok && num(0, 4) >= 2000 && num(5, 2) >= 1 && num(5, 2) <= 12 && num(8, 2) >= 1 &&
                        num(8, 2) <= days_in(num(0, 4), num(5, 2)) && num(11, 2) <= 23 && num(14, 2) <= 59 &&
                        num(17, 2) <= 60;
  if (!range_ok)
    fail_usage(std::string("created_at must be ") + (time_ok ? "a real UTC time from 2000 on" : "UTC ISO 8601") +
               " (2026-11-23T08:00:00Z), got '" + t.substr(0, 40) + "'");
  // Nor a time that has not come (a row dated 9999 was imported): tune stamps
  // rows with the clock, so a day of slack covers a clock or time zone set wrong.
  std::tm tm{};
  tm.tm_year = num(0, 4) - 1900, tm.tm_mon = num(5, 2) - 1, tm.tm_mday = num(8, 2);
  tm.tm_hour = num(11, 2), tm.tm_min = num(14, 2), tm.tm_sec = num(17, 2);
  if (timegm(&tm) > std::time(nullptr) + 24 * 3600)
    fail_usage("created_at " + t + " is more than a day in the future (now " + utc_now_iso8601() + ")");
}
}  // namespace

namespace {
// impl fused is built for sm_90 only (kernels/flce/sm90): a row that names it for
// another device could never have been measured there. Tuned cuBLASLt algorithms
// are found on the row's own device (tune stores its cuBLASLt version with them),
// so one naming another version could not have been measured either, and the
// runtime skips it: imported over a sound row, it left the shape untuned.
void check_runs_on(const DeviceInfo& d, const KernelConfig& c) {
  if (c.impl == KernelConfig::Impl::fused && d.arch != "sm_90")
    fail_usage("impl fused runs on sm_90 only; this row's device is " + d.arch.substr(0, 64));
  if (!c.gemm_algos.empty() && c.gemm_algos_cublaslt != d.cublaslt_version)
    fail_usage("gemm_algos were tuned with cuBLASLt " + std::to_string(c.gemm_algos_cublaslt) +
               ", but this row's device has " + std::to_string(d.cublaslt_version) +
               ": algorithms are tuned on the row's own device");
}
}  // namespace

void check_record(const BestEntry& b) {
  check_identity(b.device, b.kernel_hash, b.created_at);
  b.problem.validate();
  validate_config(b.problem, b.config);
  check_runs_on(b.device, b.config);
  check_stats(b.stats);
  // The default's time is a time like the others: 1e308 imported, and `db list`
  // printed its speedup as 63 digits.
  if (!time_in_range(b.default_ms))
    fail_usage("default_ms must be within [1e-4, 1e7] ms, got " + format_double(b.default_ms));
  // speedup = default / best: positive and finite (∞ exported as null, which the
  // import then refused; −5 was printed as "−5.00x over default"), and tune
  // stores exactly that quotient of the two medians of one interleaved round
  // (a row claiming 1e308× imported).
  if (!std::isfinite(b.speedup) || b.speedup <= 0) fail_usage("speedup must be finite and > 0");
  if (std::fabs(b.speedup - b.default_ms / b.stats.median_ms) > 1e-9 * b.speedup)
    fail_usage("speedup " + format_double(b.speedup) + " is not default_ms / median_ms (" +
               format_double(b.default_ms / b.stats.median_ms) + ")");
  if (b.celtune_version.empty() || !printable(b.celtune_version, 64) || !printable(b.cublaslt, 64))
    fail_usage("celtune_version (1 to 64 bytes) and cublaslt (at most 64) must be UTF-8 without control characters");
}

void check_record(const Measurement& m) {
  check_identity(m.device, m.kernel_hash, m.created_at);
  m.problem.validate();
  if (m.status != "ok" && m.status != "failed") fail_usage("status must be 'ok' or 'failed'");
  if (!printable(m.reason, 4096)) fail_usage("reason must be at most 4096 bytes of UTF-8 without control characters");
  // A failed measurement is kept so the tuner never retries it: it must say why.
  // An ok one has no reason to give (one that did imported). A failed one timed
  // nothing, and tune stores its stats as zeros: one claiming a median of 1e300
  // imported and was exported again.
  if (m.status == "failed" && m.reason.empty()) fail_usage("a failed measurement must give its reason");
  if (m.status == "ok" && !m.reason.empty()) fail_usage("a measurement with status ok gives no reason");
  if (m.status == "failed" && !(m.stats == Stats{}))
    fail_usage("a failed measurement timed nothing: its stats must be zeros, got median " +
               format_double(m.stats.median_ms) + " over " + std::to_string(m.stats.samples) + " samples");
  // SM clocks read through NVML at the start and end of sampling, 0 where none
  // was read (the CPU backend); no GPU clocks above 10 GHz.
  for (double mhz : {m.clock_start_mhz, m.clock_end_mhz})
    if (!(mhz >= 0 && mhz <= 10000)) fail_usage("clock_start_mhz and clock_end_mhz must be in [0, 10000] MHz");
  // Every config must be one the model can state, failed or not: a failed row
  // is exported and merged like any other, and its config printed. Whether the
  // device could run it is what a failure may have found out.
  validate_config(m.problem, m.config);
  if (m.status == "ok") {
    check_runs_on(m.device, m.config);
    check_stats(m.stats);
  }
}

namespace {
// nlohmann's message as json_error_text gives it, a type error said as one.
std::string json_reason(const nlohmann::json::exception& e) {
  std::string w = json_error_text(e);
  if (dynamic_cast<const nlohmann::json::type_error*>(&e) != nullptr) w = "a field has the wrong type (" + w + ")";
  return w;
}
}  // namespace

Records read_jsonl(std::istream& in) {
  Records r;
  int64_t line_no = 0;
  // Lines are read with a cap: a record is ~1 KiB, and `import /dev/zero` grew
  // one line until memory ran out.
  constexpr size_t kMaxLine = size_t{1} << 20;
  auto next_line = [&](std::string& line) {
    line.clear();
    bool any = false;
    for (char c; in.get(c);) {
      any = true;
      if (c == '\n') break;
      if (line.size() == kMaxLine)
        fail_usage("import line " + std::to_string(line_no + 1) + " is longer than 1 MiB; nothing was imported");
      line.push_back(c);
    }
    return any;
  };
  for (std::string line; next_line(line);) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    try {
      const auto j = parse_json_strict(line);
      // A line that is valid JSON but no object ([1,2], 7) read "a field has
      // the wrong type (cannot use at() with array)".
      if (!j.is_object()) fail_usage(std::string("a record is a JSON object, not ") + j.type_name());
      const auto kind = json_field<std::string>(j, "record");
      if (kind == "best") {
        r.best.push_back(j.get<BestEntry>());
        check_record(r.best.back());
      } else if (kind == "measurement") {
        r.measurements.push_back(j.get<Measurement>());
        check_record(r.measurements.back());
      } else {
        fail_usage("unknown record kind '" + kind + "'");
      }
    } catch (const nlohmann::json::exception& e) {
      fail_usage("import line " + std::to_string(line_no) + ": " + json_reason(e) + "; nothing was imported");
    } catch (const Error& e) {
      fail_usage("import line " + std::to_string(line_no) + ": " + e.what() + "; nothing was imported");
    }
  }
  if (in.bad()) fail_env("error reading the import file; nothing was imported");
  return r;
}

Records read_rows(const std::vector<const Store*>& from) {
  Records r;
  for (const Store* s : from) {
    const auto meas = s->measurements();
    const auto best = s->best_entries();
    // The rows import would refuse are refused here too (a damaged row with a
    // median of −1 ms won every merge), before anything is written.
    try {
      for (const auto& m : meas) check_record(m);
      for (const auto& b : best) check_record(b);
    } catch (const Error& e) {
      fail_env("database " + s->path() + " holds a damaged row: " + e.what() + "; nothing was merged");
    }
    r.measurements.insert(r.measurements.end(), meas.begin(), meas.end());
    r.best.insert(r.best.end(), best.begin(), best.end());
  }
  return r;
}

namespace {
// The identity of a stored row as the schema's UNIQUE constraints see it (the
// device's columns but cublaslt_version, the problem key), as text: what makes
// two records of one import compete for one row.
std::string row_key(const DeviceInfo& d, const Problem& p) {
  return nlohmann::json{d.name, d.arch, d.sm_count, d.memory_bytes, d.driver, d.runtime, d.cublaslt, p.key()}.dump();
}
}  // namespace

ImportCounts offer_records(Store& s, const Records& r, const std::string& current_hash) {
  ImportCounts n;
  s.write([&] {
    n = {};  // a transaction retried after contention counts afresh
    std::set<std::string> seen;
    for (const auto& m : r.measurements) {
      if (!seen.insert(row_key(m.device, m.problem) + canonical_json(m.config) + m.kernel_hash).second)
        ++n.measurements_repeated;
      else if (s.add_measurement(m))
        ++n.measurements_added;
      else
        ++n.measurements_stored;
    }
    // A best entry is counted by what its row holds once every record is
    // offered: two records of one key store one row (the second once counted
    // as kept too), whichever of them holds it at the end.
    struct Slot {
      bool stored_before = false, taken = false;
      int64_t records = 0;
    };
    std::map<std::string, Slot> slots;
    for (const auto& b : r.best) {
      auto [it, first] = slots.try_emplace(row_key(b.device, b.problem));
      const Offered o = s.offer_best(b, current_hash);
      if (first) it->second.stored_before = o != Offered::added;
      it->second.taken |= o != Offered::refused;
      ++it->second.records;
    }
    for (const auto& [key, slot] : slots) {
      if (!slot.taken) {
        n.best_kept_stored += slot.records;
        continue;
      }
      ++(slot.stored_before ? n.best_replaced : n.best_added);
      n.best_beaten += slot.records - 1;
    }
  });
  return n;
}

ImportCounts import_jsonl(Store& s, std::istream& in, const std::string& current_hash) {
  // Parse and check everything first, so a bad line leaves the database untouched.
  return offer_records(s, read_jsonl(in), current_hash);
}

}  // namespace celtune::db
