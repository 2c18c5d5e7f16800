// The SQLite store: round trips, merge semantics, schema versions, damaged files.
#include <doctest/doctest.h>

#include <sqlite3.h>
#include <unistd.h>

#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "db/store.hpp"
#include "model/error.hpp"

using namespace celtune;
namespace fs = std::filesystem;

namespace {

struct TempDir {
  fs::path path;
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "celtune-test-XXXXXX").string();
    path = mkdtemp(tmpl.data());
  }
  ~TempDir() { fs::remove_all(path); }
  std::string file(const char* name) const { return (path / name).string(); }
};

// A made-up device, as Kernel Launcher's tests use a "GTX fictional".
DeviceInfo fictional(const char* name = "GTX fictional") {
  DeviceInfo d;
  d.name = name, d.arch = "sm_90", d.sm_count = 132, d.memory_bytes = int64_t{80} << 30;
  d.driver = "580.1", d.runtime = "13.0", d.cublaslt = "13.0.0", d.cublaslt_version = 130000;
  return d;
}

Problem problem(int64_t n) {
  Problem p;
  p.tokens = n, p.hidden = 4096, p.vocab = 128256;
  return p;
}

db::BestEntry best(const DeviceInfo& d, int64_t n, double ms, int block) {
  db::BestEntry b;
  b.device = d, b.problem = problem(n);
  b.config.block_size = block, b.config.v_chunk = 8192;
  b.stats = {ms, ms * 0.99, ms * 1.02, 40, (ms * 1.02 - ms * 0.99) / ms};
  b.default_ms = ms * 1.5, b.speedup = 1.5, b.celtune_version = "0.1.0", b.kernel_hash = "abc123";
  b.cublaslt = d.cublaslt, b.created_at = "2026-11-22T00:00:00Z";
  return b;
}

db::Measurement meas(const DeviceInfo& d, int64_t n, int block, const char* status = "ok") {
  db::Measurement m;
  m.device = d, m.problem = problem(n), m.config.block_size = block;
  m.kernel_hash = "abc123", m.status = status, m.reason = status == std::string("ok") ? "" : "rel L2 too large";
  // A failed measurement timed nothing (its stats are zeros); an ok one's spread
  // is (p80 − p20) / median, as check_record requires.
  const double median = 1.0 + block * 1e-4;
  if (m.status == "ok") m.stats = {median, median * 0.99, median * 1.1, 30, (median * 1.1 - median * 0.99) / median};
  m.created_at = "2026-11-22T00:00:00Z";
  return m;
}

// Import of `text` must fail as a usage error whose message holds `what`.
void expect_refused(db::Store& s, const std::string& text, const std::string& what) {
  std::istringstream in(text);
  try {
    db::import_jsonl(s, in, "abc123");
    FAIL("import succeeded where it should refuse: " << what);
  } catch (const Error& e) {
    CHECK(e.status() == Status::usage);
    CHECK(std::string(e.what()).find(what) != std::string::npos);
  }
}

std::string export_text(const db::Store& s) {
  std::ostringstream o;
  db::export_jsonl(s, o);
  return o.str();
}

// One best entry (N = 4096) as export writes it: the starting point of the
// import tests that damage a line.
std::string exported_best(TempDir& t) {
  std::ostringstream out;
  db::Store src(t.file("src.sqlite"), db::Access::read_write);
  src.put_best(best(fictional(), 4096, 2.0, 256));
  db::export_jsonl(src, out);
  return out.str();
}

// One SQL statement run on a database file behind the Store's back (a user's
// or a tool's edit); returns SQLite's result code.
int edit_raw(const std::string& path, const char* sql) {
  sqlite3* raw = nullptr;
  REQUIRE(sqlite3_open(path.c_str(), &raw) == SQLITE_OK);
  const int rc = sqlite3_exec(raw, sql, nullptr, nullptr, nullptr);
  sqlite3_close(raw);
  return rc;
}

// A writer's open of `path` refuses it (environment, the message naming `what`)
// and leaves every byte of the file as it was.
void check_write_refused(const std::string& path, const char* what) {
  REQUIRE_FALSE(fs::exists(path + "-wal"));  // the last connection folded the log into the file
  auto bytes = [&] {
    std::ifstream f(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
  };
  const std::string before = bytes();
  try {
    db::Store s(path, db::Access::read_write);
    s.put_best(best(fictional(), 4096, 0.5, 256));
    FAIL("a damaged database took a write");
  } catch (const Error& e) {
    CHECK(e.status() == Status::environment);
    CHECK(std::string(e.what()).find(what) != std::string::npos);
  }
  CHECK(bytes() == before);
}

}  // namespace

TEST_CASE("store: write, read back, and export → import → export is lossless") {
  TempDir t;
  std::string text;
  {
    db::Store s(t.file("a.sqlite"), db::Access::read_write);
    s.record(meas(fictional(), 4096, 256));
    s.record(meas(fictional(), 4096, 512, "failed"));
    s.put_best(best(fictional(), 4096, 2.5, 512));
    s.put_best(best(fictional("other"), 8192, 5.0, 1024));
    CHECK(s.best_entries().size() == 2);
    CHECK(s.measurements().size() == 2);
    const auto found = s.find_measurement(fictional(), problem(4096), meas(fictional(), 4096, 512).config, "abc123");
    REQUIRE(found);
    CHECK(found->status == "failed");
    CHECK(found->reason == "rel L2 too large");
    CHECK_FALSE(s.find_measurement(fictional(), problem(4096), meas(fictional(), 4096, 512).config, "zzz"));
    text = export_text(s);
    CHECK(s.best_entries()[0] == best(fictional("GTX fictional"), 4096, 2.5, 512));
  }
  {
    db::Store s(t.file("b.sqlite"), db::Access::read_write);
    std::istringstream in(text);
    const auto n = db::import_jsonl(s, in, "abc123");
    CHECK(n.measurements_added == 2);
    CHECK(n.best_added == 2);
    CHECK(export_text(s) == text);
  }
}

TEST_CASE("store: merge keeps the faster best per device and problem, and every measurement") {
  TempDir t;
  {
    db::Store a(t.file("a.sqlite"), db::Access::read_write);
    a.put_best(best(fictional(), 4096, 2.0, 256));  // faster here
    a.put_best(best(fictional(), 8192, 9.0, 256));  // slower here
    a.record(meas(fictional(), 4096, 256));
    db::Store b(t.file("b.sqlite"), db::Access::read_write);
    b.put_best(best(fictional(), 4096, 3.0, 512));
    b.put_best(best(fictional(), 8192, 4.0, 512));
    b.put_best(best(fictional(), 2048, 1.0, 512));  // only in B
    b.record(meas(fictional(), 4096, 512));
  }
  db::Store out(t.file("out.sqlite"), db::Access::read_write);
  for (const char* f : {"a.sqlite", "b.sqlite"}) {
    db::Store src(t.file(f), db::Access::read_only);
    db::offer_records(out, db::read_rows({&src}), "abc123");
  }
  const auto entries = out.best_entries();
  REQUIRE(entries.size() == 3);
  for (const auto& e : entries) {
    if (e.problem.tokens == 4096) CHECK(e.config.block_size == 256);
    if (e.problem.tokens == 8192) CHECK(e.config.block_size == 512);
    if (e.problem.tokens == 2048) CHECK(e.stats.median_ms == 1.0);
  }
  CHECK(out.measurements().size() == 2);
  // Merging again changes nothing.
  const std::string before = export_text(out);
  db::Store again(t.file("a.sqlite"), db::Access::read_only);
  db::offer_records(out, db::read_rows({&again}), "abc123");
  CHECK(export_text(out) == before);
}

TEST_CASE("store: import and merge never replace a stored measurement") {
  // A copy whose rows read "failed" once turned every stored "ok" into "failed"
  // (the measurement upsert), and the next tune found no config that passed.
  TempDir t;
  const auto stored = meas(fictional(), 4096, 256), other = meas(fictional(), 4096, 512);
  const auto failed = meas(fictional(), 4096, 256, "failed");
  {
    db::Store b(t.file("b.sqlite"), db::Access::read_write);
    b.record(failed);
    b.record(other);
  }
  db::Store a(t.file("a.sqlite"), db::Access::read_write);
  a.record(stored);
  {
    db::Store b(t.file("b.sqlite"), db::Access::read_only);
    const auto n = db::offer_records(a, db::read_rows({&b}), "abc123");
    CHECK(n.measurements_stored == 1);
    CHECK(n.measurements_added == 1);  // `other` only
    std::istringstream in(export_text(b));
    const auto m = db::import_jsonl(a, in, "abc123");
    CHECK(m.measurements_stored == 2);
    CHECK(m.measurements_added == 0);
  }
  const auto kept = a.find_measurement(fictional(), problem(4096), stored.config, "abc123");
  REQUIRE(kept);
  CHECK(kept->status == "ok");
  CHECK(kept->stats.median_ms == stored.stats.median_ms);
  CHECK(a.measurements().size() == 2);
  // tune's own re-measurement (--force) still replaces its row.
  a.record(failed);
  CHECK(a.find_measurement(fictional(), problem(4096), stored.config, "abc123")->status == "failed");
}

TEST_CASE("store: a best entry of this build's kernels is never displaced by a faster one the runtime skips") {
  TempDir t;
  db::Store s(t.file("a.sqlite"), db::Access::read_write);
  s.put_best(best(fictional(), 4096, 2.0, 256));  // kernel hash abc123: this build's
  db::BestEntry stale = best(fictional(), 4096, 0.5, 512);
  stale.kernel_hash = "0123abcd";
  CHECK(s.offer_best(stale, "abc123") == db::Offered::refused);
  REQUIRE(s.best_entries().size() == 1);
  CHECK(s.best_entries()[0].kernel_hash == "abc123");
  // The other way round: this build's entry replaces a faster stale one …
  db::Store u(t.file("u.sqlite"), db::Access::read_write);
  u.put_best(stale);
  CHECK(u.offer_best(best(fictional(), 4096, 2.0, 256), "abc123") == db::Offered::replaced);
  CHECK(u.best_entries()[0].kernel_hash == "abc123");
  // … and between two entries of other kernels (or two of ours) the faster wins.
  db::BestEntry staler = best(fictional(), 4096, 0.4, 1024);
  staler.kernel_hash = "fedc";
  CHECK(u.offer_best(staler, "abc123") == db::Offered::refused);
  db::Store v(t.file("v.sqlite"), db::Access::read_write);
  v.put_best(stale);
  CHECK(v.offer_best(staler, "abc123") == db::Offered::replaced);
  CHECK(v.best_entries()[0].config.block_size == 1024);
  CHECK(v.offer_best(best(fictional(), 4096, 9.0, 256), "abc123") == db::Offered::replaced);  // ours, though slower
  CHECK(v.offer_best(best(fictional(), 4096, 9.0, 512), "abc123") == db::Offered::refused);  // a tie keeps what is stored
  db::Store w(t.file("w.sqlite"), db::Access::read_write);
  CHECK(w.offer_best(stale, "abc123") == db::Offered::added);
}

TEST_CASE("store: a damaged best entry loses to any sound one") {
  // A stored median of −1 ms (edited, or a damaged disk) once "won" as the
  // faster: the sound record of an import or merge was dropped, and the
  // runtime, which skips the damaged row, fell back to the default.
  TempDir t;
  db::Store s(t.file("a.sqlite"), db::Access::read_write);
  db::BestEntry damaged = best(fictional(), 4096, 1.0, 256);
  damaged.stats.median_ms = damaged.stats.p20_ms = -1.0;
  s.put_best(damaged);
  REQUIRE(!db::broken_record(s.best_entries()[0]).empty());
  CHECK(s.offer_best(best(fictional(), 4096, 2.0, 512), "abc123") == db::Offered::replaced);
  CHECK(s.best_entries()[0].stats.median_ms == 2.0);
  // Of other kernels too, though this build's damaged row would otherwise win.
  db::Store u(t.file("u.sqlite"), db::Access::read_write);
  u.put_best(damaged);
  db::BestEntry stale = best(fictional(), 4096, 3.0, 512);
  stale.kernel_hash = "0123abcd";
  CHECK(u.offer_best(stale, "abc123") == db::Offered::replaced);
  // A sound stored row still keeps its place against a slower one.
  CHECK(u.offer_best(best(fictional(), 4096, 9.0, 1024), "abc123") == db::Offered::replaced);  // ours beats stale
  CHECK(u.offer_best(best(fictional(), 4096, 9.5, 256), "abc123") == db::Offered::refused);
}

TEST_CASE("store: import and merge count each record once, as what became of it") {
  // The summaries once counted a best entry "kept" each time it was stored, so
  // two records of one key in a file read "2 kept" where one row was stored,
  // and said "0 of 0" of an empty file.
  TempDir t;
  auto total = [](const db::ImportCounts& n) {
    return n.measurements_added + n.measurements_stored + n.measurements_repeated + n.best_added + n.best_replaced +
           n.best_kept_stored + n.best_beaten;
  };
  auto import_text = [](db::Store& s, const std::string& text) {
    std::istringstream in(text);
    return db::import_jsonl(s, in, "abc123");
  };
  db::Store s(t.file("a.sqlite"), db::Access::read_write);
  CHECK(total(import_text(s, "")) == 0);
  {
    db::Store lines(t.file("lines.sqlite"), db::Access::read_write);
    lines.record(meas(fictional(), 4096, 256));
    lines.put_best(best(fictional(), 4096, 2.0, 256));
  }
  db::Store lines(t.file("lines.sqlite"), db::Access::read_only);
  const std::string one = export_text(lines);  // one measurement, one best entry
  // The same two records twice: the second of each is a repeat, not a second row.
  auto n = import_text(s, one + one);
  CHECK(n.measurements_added == 1);
  CHECK(n.measurements_repeated == 1);
  CHECK(n.best_added == 1);
  CHECK(n.best_beaten == 1);
  CHECK(total(n) == 4);
  // Again: everything was stored already.
  n = import_text(s, one);
  CHECK(n.measurements_stored == 1);
  CHECK(n.best_kept_stored == 1);
  CHECK(total(n) == 2);
  // A slower and then a faster record of the stored key: one replaces the
  // stored entry, the other lost to it (not "2 kept").
  {
    db::Store two(t.file("two.sqlite"), db::Access::read_write);
    two.put_best(best(fictional(), 4096, 3.0, 512));
  }
  {
    db::Store two(t.file("two.sqlite"), db::Access::read_only);
    const std::string slower = export_text(two);
    db::Store faster_src(t.file("faster.sqlite"), db::Access::read_write);
    faster_src.put_best(best(fictional(), 4096, 1.0, 1024));
    n = import_text(s, slower + export_text(faster_src));
  }
  CHECK(n.best_replaced == 1);
  CHECK(n.best_beaten == 1);
  CHECK(total(n) == 2);
  REQUIRE(s.best_entries().size() == 1);
  CHECK(s.best_entries()[0].config.block_size == 1024);
  // Merge: two inputs holding the same key into a new database: one added, the
  // other lost to it, whichever order (A's row was "won", then B's "won" too).
  db::Store out(t.file("out.sqlite"), db::Access::read_write);
  db::Store a(t.file("two.sqlite"), db::Access::read_only), b(t.file("a.sqlite"), db::Access::read_only);
  n = db::offer_records(out, db::read_rows({&a, &b}), "abc123");
  CHECK(n.best_added == 1);
  CHECK(n.best_beaten == 1);
  CHECK(n.measurements_added == 1);
  CHECK(total(n) == 3);
}

TEST_CASE("store: malformed import stores nothing") {
  TempDir t;
  db::Store s(t.file("a.sqlite"), db::Access::read_write);
  expect_refused(s, exported_best(t) + "{\"record\": \"best\", \"device\": 7}\n", "line 2");
  CHECK(s.best_entries().empty());
}

TEST_CASE("store: import refuses out-of-range numbers (found by fuzzing)") {
  TempDir t;
  db::Store s(t.file("a.sqlite"), db::Access::read_write);
  std::string line = exported_best(t);
  const auto at = line.find("\"tokens\":4096");
  REQUIRE(at != std::string::npos);
  line.replace(at, 14, "\"tokens\":8.5e70");
  std::istringstream in(line);
  CHECK_THROWS_AS(db::import_jsonl(s, in, "abc123"), Error);
  CHECK(s.best_entries().empty());
}

TEST_CASE("store: a row's tuned cuBLASLt algorithms must be its own device's version; import refuses others") {
  // The CLI probe imported such a row over a sound one: the runtime then skipped
  // it (another cuBLASLt), and the shape ran untuned.
  TempDir t;
  const DeviceInfo d = fictional();  // cuBLASLt 130000
  db::BestEntry b = best(d, 4096, 2.0, 256);
  b.config.gemm_algos = {std::string(128, '0'), "", ""};
  b.config.gemm_algos_cublaslt = d.cublaslt_version;
  CHECK_NOTHROW(db::check_record(b));
  b.config.gemm_algos_cublaslt = 130100;
  CHECK_THROWS_WITH_AS(db::check_record(b), doctest::Contains("cuBLASLt 130100"), Error);
  db::Measurement m = meas(d, 4096, 256);
  m.config.gemm_algos = b.config.gemm_algos, m.config.gemm_algos_cublaslt = 130100;
  CHECK_THROWS_WITH_AS(db::check_record(m), doctest::Contains("own device"), Error);
  // Through import: the sound stored row stays, byte for byte.
  db::Store s(t.file("a.sqlite"), db::Access::read_write);
  s.put_best(best(d, 4096, 4.0, 256));
  const std::string before = export_text(s);
  std::string line = exported_best(t);
  const auto at = line.find("\"config\":{");
  REQUIRE(at != std::string::npos);
  line.insert(at + 10, "\"gemm_algos\":[\"" + std::string(128, '0') + "\",\"\",\"\"],\"gemm_algos_cublaslt\":130100,");
  expect_refused(s, line, "own device");
  CHECK(export_text(s) == before);
}

TEST_CASE("store: a record without the cuBLASLt number takes it from the text; a pinned best row stays valid") {
  // A measurement without cublaslt_version (an older export's, read as 0)
  // created the device row first; a best row pinned to the same device's
  // 130000 was then "algos INVALID", and export and merge refused the database
  // (a helper's probe, sixty-second session).
  TempDir t;
  const DeviceInfo d = fictional();  // cuBLASLt "13.0.0", 130000
  DeviceInfo old = d;
  old.cublaslt_version = 0;
  db::BestEntry b = best(d, 4096, 2.0, 256);
  b.config.gemm_algos = {std::string(128, '0'), "", ""};
  b.config.gemm_algos_cublaslt = d.cublaslt_version;
  for (bool stored_first : {true, false}) {  // the bare row there before, or made by this write
    CAPTURE(stored_first);
    const std::string path = t.file(stored_first ? "first.sqlite" : "together.sqlite");
    db::Store s(path, db::Access::read_write);
    if (stored_first) edit_raw(path, "INSERT INTO devices (name, arch, sm_count, memory_bytes, driver, runtime, "
                                     "cublaslt, cublaslt_version) VALUES ('GTX fictional', 'sm_90', 132, "
                                     "85899345920, '580.1', '13.0', '13.0.0', 0)");
    s.add_measurement(meas(old, 4096, 256));
    s.put_best(b);
    const auto rows = s.best_entries();
    REQUIRE(rows.size() == 1);
    CHECK(rows[0].device.cublaslt_version == 130000);
    CHECK_NOTHROW(export_text(s));
  }
}

TEST_CASE("store: times, the default's included, within [1e-4, 1e7] ms") {
  const DeviceInfo d = fictional();
  for (double ms : {1e-5, 2e7, 1e308}) {
    CAPTURE(ms);
    db::BestEntry b = best(d, 4096, 2.0, 256);
    b.default_ms = ms, b.speedup = ms / b.stats.median_ms;
    CHECK_THROWS_WITH_AS(db::check_record(b), doctest::Contains("default_ms must be within"), Error);
    b = best(d, 4096, ms, 256);
    b.default_ms = 2.0, b.speedup = 2.0 / ms;
    CHECK_THROWS_WITH_AS(db::check_record(b), doctest::Contains("times must be within"), Error);
  }
  db::BestEntry b = best(d, 4096, 1e-4, 256);
  b.stats.p20_ms = b.stats.median_ms;
  b.stats.spread = (b.stats.p80_ms - b.stats.p20_ms) / b.stats.median_ms;
  b.default_ms = 1e7, b.speedup = 1e7 / 1e-4;
  CHECK_NOTHROW(db::check_record(b));
}

TEST_CASE("store: import refuses a kernel hash that is not hex and a failure without a reason") {
  const DeviceInfo d = fictional();
  db::BestEntry b = best(d, 4096, 10.0, 2048);
  CHECK_NOTHROW(db::check_record(b));
  b.kernel_hash = "zz";
  CHECK_THROWS_WITH_AS(db::check_record(b), doctest::Contains("hex"), Error);
  db::Measurement m = meas(d, 4096, 2048, "failed");
  CHECK_NOTHROW(db::check_record(m));
  m.reason.clear();
  CHECK_THROWS_WITH_AS(db::check_record(m), doctest::Contains("reason"), Error);
}

TEST_CASE("store: import refuses stats that disagree with themselves, and timings on a failure") {
  const DeviceInfo d = fictional();
  db::BestEntry b = best(d, 4096, 10.0, 2048);
  CHECK_NOTHROW(db::check_record(b));
  b.stats.spread *= 1.5;  // no longer (p80 − p20) / median
  CHECK_THROWS_WITH_AS(db::check_record(b), doctest::Contains("is not (p80 − p20) / median"), Error);
  db::Measurement ok = meas(d, 4096, 2048);
  CHECK_NOTHROW(db::check_record(ok));
  ok.stats.spread = 0.0;
  CHECK_THROWS_WITH_AS(db::check_record(ok), doctest::Contains("spread"), Error);
  db::Measurement m = meas(d, 4096, 2048, "failed");
  m.stats = meas(d, 4096, 2048).stats;  // a failure claiming a timing
  CHECK_THROWS_WITH_AS(db::check_record(m), doctest::Contains("timed nothing"), Error);
  m.stats = db::Stats{};
  m.stats.samples = 3;
  CHECK_THROWS_WITH_AS(db::check_record(m), doctest::Contains("timed nothing"), Error);
}

TEST_CASE("store: import refuses a key given twice in one object, at any depth") {
  TempDir t;
  db::Store s(t.file("a.sqlite"), db::Access::read_write);
  const std::string line = exported_best(t);
  for (const std::string& field : {std::string("\"tokens\":4096"), std::string("\"speedup\":")}) {
    CAPTURE(field);
    std::string twice = line;
    const auto at = twice.find(field);
    REQUIRE(at != std::string::npos);
    // The same key again right after the first, with another value where it is a number.
    const auto end = twice.find_first_of(",}", at);
    const std::string dup = field == "\"tokens\":4096" ? "\"tokens\":8192," : twice.substr(at, end - at) + ",";
    twice.insert(at, dup);
    expect_refused(s, twice, "duplicate key");
    CHECK(s.best_entries().empty());
  }
  // The same key in two different objects is fine: the untouched line imports.
  std::istringstream in(line);
  CHECK(db::import_jsonl(s, in, "abc123").best_added == 1);
}

TEST_CASE("store: import refuses a created_at more than a day in the future") {
  // A row dated 9999 was imported, and sorted as the newest for ever after.
  TempDir t;
  db::Store s(t.file("a.sqlite"), db::Access::read_write);
  const std::string line = exported_best(t);
  auto dated = [&](const std::string& when) {
    std::string l = line;
    for (auto at = l.find("2026-11-22T00:00:00Z"); at != std::string::npos; at = l.find("2026-11-22T00:00:00Z"))
      l.replace(at, 20, when);
    return l;
  };
  auto from_now = [](std::time_t seconds) {
    const std::time_t when = std::time(nullptr) + seconds;
    std::tm tm{};
    gmtime_r(&when, &tm);
    char text[32];
    std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &tm);
    return std::string(text);
  };
  expect_refused(s, dated("9999-01-01T00:00:00Z"), "in the future");
  expect_refused(s, dated(from_now(2 * 86400)), "in the future");
  CHECK(s.best_entries().empty());
  // A clock a few hours ahead (a time zone set wrong) is not a lie about the row.
  std::istringstream in(dated(from_now(3 * 3600)));
  CHECK_NOTHROW(db::import_jsonl(s, in, "abc123"));
  CHECK(s.best_entries().size() == 1);
}

TEST_CASE("store: damaged, foreign and newer databases are refused with an environment error") {
  TempDir t;
  auto refuses = [](const std::string& path, db::Access a) {
    try {
      db::Store s(path, a);
    } catch (const Error& e) {
      CHECK(e.status() == Status::environment);
      return true;
    }
    return false;
  };
  {  // random bytes
    std::ofstream f(t.file("junk.sqlite"), std::ios::binary);
    for (int i = 0; i < 4096; ++i) f.put(static_cast<char>((i * 7919) & 0xff));
  }
  CHECK(refuses(t.file("junk.sqlite"), db::Access::read_only));
  CHECK(refuses(t.file("junk.sqlite"), db::Access::read_write));
  {  // a newer schema
    db::Store s(t.file("new.sqlite"), db::Access::read_write);
  }
  edit_raw(t.file("new.sqlite"), "PRAGMA user_version = 99");
  CHECK(refuses(t.file("new.sqlite"), db::Access::read_only));
  CHECK(refuses(t.file("new.sqlite"), db::Access::read_write));
  edit_raw(t.file("foreign.sqlite"), "CREATE TABLE t (x)");  // someone else's database: tables, no version
  CHECK(refuses(t.file("foreign.sqlite"), db::Access::read_write));
  // Read-only never creates a file.
  CHECK(refuses(t.file("absent.sqlite"), db::Access::read_only));
  CHECK_FALSE(fs::exists(t.file("absent.sqlite")));
  {  // a truncated database
    db::Store s(t.file("trunc.sqlite"), db::Access::read_write);
    for (int n = 1; n < 200; ++n) s.put_best(best(fictional(), n, 1.0, 256));
  }
  fs::resize_file(t.file("trunc.sqlite"), 1000);
  fs::remove(t.file("trunc.sqlite-wal"));
  CHECK(refuses(t.file("trunc.sqlite"), db::Access::read_only));
  {  // a number column edited to hold text: read as 0 ms once, winning every comparison
    db::Store s(t.file("text.sqlite"), db::Access::read_write);
    s.put_best(best(fictional(), 4096, 1.0, 256));
  }
  CHECK(edit_raw(t.file("text.sqlite"), "UPDATE best SET median_ms = 'fast'") == SQLITE_OK);
  db::Store s(t.file("text.sqlite"), db::Access::read_only);
  CHECK_THROWS_WITH_AS(s.best_entries(), doctest::Contains("median_ms holds text"), Error);
}

TEST_CASE("store: a writer refuses a database holding a trigger, and leaves the file as it was") {
  // The schema has none; one added by hand ran inside an import, which exited 0
  // with every measurement deleted (a helper's probe, sixty-second session).
  TempDir t;
  {
    db::Store s(t.file("trig.sqlite"), db::Access::read_write);
    s.add_measurement(meas(fictional(), 4096, 256));
  }
  REQUIRE(edit_raw(t.file("trig.sqlite"),
                   "CREATE TRIGGER wipe AFTER INSERT ON best BEGIN DELETE FROM measurements; END") == SQLITE_OK);
  check_write_refused(t.file("trig.sqlite"), "trigger");
  db::Store r(t.file("trig.sqlite"), db::Access::read_only);  // readers run no trigger
  CHECK(r.measurements().size() == 1);
}

TEST_CASE("store: a writer refuses a database whose pages are damaged, and leaves the file as it was") {
  // The CLI probe's case: a copy short by its last 256 bytes still opened (its
  // header and catalogue intact), took a tune's rows and an import, exit 0, and
  // export and merge then refused it.
  TempDir t;
  const std::string path = t.file("short.sqlite");
  {
    db::Store s(path, db::Access::read_write);
    for (int n = 1; n < 400; ++n) s.put_best(best(fictional(), n, 1.0, 256));
  }
  REQUIRE_FALSE(fs::exists(path + "-wal"));  // the last connection folded the log into the file
  fs::resize_file(path, fs::file_size(path) - 256);
  check_write_refused(path, "integrity_check");
}

TEST_CASE("store: an index that disagrees with its table is damage, for writers and readers alike") {
  // The fifty-third session's probe: eight bytes flipped in a tuned database
  // left an index missing rows, which quick_check (pages only) passed; an
  // import then stored seven rows twice, exit 0. Here the index's declared
  // columns are edited behind SQLite's back, so its entries no longer match the
  // rows, which only integrity_check's index cross-check sees.
  TempDir t;
  const std::string path = t.file("index.sqlite");
  {
    db::Store s(path, db::Access::read_write);
    for (int n = 1; n < 40; ++n) s.put_best(best(fictional(), n, 1.0, 256));
  }
  REQUIRE(edit_raw(path,
                   "PRAGMA writable_schema = ON; UPDATE sqlite_master SET sql = "
                   "'CREATE INDEX problems_shape ON problems (mode, dtype, vocab, hidden, family)' "
                   "WHERE name = 'problems_shape'; PRAGMA writable_schema = OFF;") == SQLITE_OK);
  {
    sqlite3* raw = nullptr;  // quick_check, which the store once asked, finds nothing wrong
    REQUIRE(sqlite3_open(path.c_str(), &raw) == SQLITE_OK);
    sqlite3_stmt* st = nullptr;
    REQUIRE(sqlite3_prepare_v2(raw, "PRAGMA quick_check", -1, &st, nullptr) == SQLITE_OK);
    REQUIRE(sqlite3_step(st) == SQLITE_ROW);
    CHECK(std::string(reinterpret_cast<const char*>(sqlite3_column_text(st, 0))) == "ok");
    sqlite3_finalize(st);
    sqlite3_close(raw);
  }
  check_write_refused(path, "problems_shape");
  db::Store r(path, db::Access::read_only);
  CHECK_THROWS_WITH_AS(r.check_sound(), doctest::Contains("integrity_check"), Error);
}

TEST_CASE("store: a problem row whose shape columns disagree with its key is damage, for list and lookup alike") {
  // The runtime's lookup searches by the columns, list and export read the key:
  // vocab edited to 2^63 - 1 hid the row from lookups while list showed it sound.
  TempDir t;
  const std::string path = t.file("cols.sqlite");
  {
    db::Store s(path, db::Access::read_write);
    s.put_best(best(fictional(), 4096, 1.0, 256));
  }
  for (const char* edit : {"UPDATE problems SET vocab = 9223372036854775807", "UPDATE problems SET tokens = 8192",
                           "UPDATE problems SET mode = 'fwd'"}) {
    CAPTURE(edit);
    const std::string copy = t.file("edited.sqlite");
    fs::copy_file(path, copy, fs::copy_options::overwrite_existing);
    REQUIRE(edit_raw(copy, edit) == SQLITE_OK);
    const db::Store s(copy, db::Access::read_only);  // a failed check is not cached: each reader repeats it
    CHECK_THROWS_WITH_AS(s.best_entries(), doctest::Contains("disagree with its key"), Error);
    CHECK_THROWS_WITH_AS(s.best_for_shape(problem(4096)), doctest::Contains("disagree with its key"), Error);
  }
  const db::Store sound(path, db::Access::read_only);
  CHECK(sound.best_entries().size() == 1);
}
