// The runtime's config resolution and C API, without a GPU: a fixture database
// with made-up devices, every tier, every way a database can be unusable.
#include <doctest/doctest.h>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <optional>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <algorithm>
#include <atomic>
#include <thread>

#include <nlohmann/json.hpp>

#include <sqlite3.h>

#include "celtune/celtune.h"
#include "db/store.hpp"
#include "kernels/backend.hpp"
#include "kernels/cpu/cpu_backend.hpp"
#include "kernels/kernel_hash.hpp"
#include "model/error.hpp"
#include "runtime/resolve.hpp"

using namespace celtune;
namespace fs = std::filesystem;

namespace {

struct Fixture {
  fs::path dir;
  std::string db;
  DeviceInfo h100, h200, other_arch;
  Fixture() {
    std::string tmpl = (fs::temp_directory_path() / "celtune-rt-XXXXXX").string();
    dir = mkdtemp(tmpl.data());
    db = (dir / "fixture.sqlite").string();
    auto device = [](const char* name, const char* arch) {
      DeviceInfo d;
      d.name = name, d.arch = arch, d.sm_count = 132, d.memory_bytes = int64_t{80} << 30;
      d.driver = "13.0", d.runtime = "13.0", d.cublaslt = "13.1.0", d.cublaslt_version = 130100;
      return d;
    };
    h100 = device("GTX fictional H1", "sm_90");
    h200 = device("GTX fictional H2", "sm_90");
    other_arch = device("GTX fictional B", "sm_100");
    db::Store s(db, db::Access::read_write);
    put(s, h100, 4096, 1024, kKernelSourceHash);
    put(s, h100, 16384, 2048, kKernelSourceHash);
    put(s, h100, 1024, 512, "stale-hash");  // measured with other kernel code
    put(s, h200, 8192, 4096, kKernelSourceHash);
  }
  ~Fixture() { fs::remove_all(dir); }
  static Problem problem(int64_t n) {
    Problem p;
    p.tokens = n, p.hidden = 4096, p.vocab = 128256;
    return p;
  }
  static void put(db::Store& s, const DeviceInfo& d, int64_t n, int64_t row_chunk, const std::string& hash) {
    db::BestEntry b;
    b.device = d, b.problem = problem(n);
    b.config.block_size = 4096, b.config.v_chunk = 0, b.config.row_chunk = row_chunk, b.config.threads = 512;
    b.stats = {1.0, 0.9, 1.1, 20, 0.2};
    b.default_ms = 1.2, b.speedup = 1.2, b.celtune_version = "0.1.0", b.kernel_hash = hash, b.cublaslt = d.cublaslt;
    b.created_at = "2026-11-22T00:00:00Z";
    s.put_best(b);
  }
};

std::string file_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream o;
  o << f.rdbuf();
  return o.str();
}

}  // namespace

TEST_CASE("resolution tiers: exact, nearest by log distance, same-arch, default; stale entries skipped") {
  Fixture fx;
  const std::string before = file_bytes(fx.db);
  std::ostringstream warn;
  runtime::Resolver r(fx.db, fx.h100, kKernelSourceHash, warn);
  auto exact = r.resolve(Fixture::problem(4096), nullptr);
  CHECK(exact.source == runtime::Source::exact);
  CHECK(exact.config.row_chunk == 1024);
  // 6000 is nearer 4096 than 16384 in log distance (0.38 against 1.00).
  auto near = r.resolve(Fixture::problem(6000), nullptr);
  CHECK(near.source == runtime::Source::nearest);
  CHECK(near.entry->problem.tokens == 4096);
  auto near2 = r.resolve(Fixture::problem(12000), nullptr);
  CHECK(near2.entry->problem.tokens == 16384);
  // 1024: only a stale-hash entry on this device, so nearest is 4096 and the stale one is reported.
  auto stale = r.resolve(Fixture::problem(1024), nullptr);
  CHECK(stale.entry->problem.tokens == 4096);
  CHECK(stale.skipped.size() == 1);
  CHECK(stale.skipped[0].find("stale-hash") != std::string::npos);
  // Another ignore_index (a padding id, as celtune.torch maps it) or int32
  // targets: the stored row for the same shape serves, as nearest, not exact.
  Problem pad = Fixture::problem(4096);
  pad.loss.ignore_index = INT64_MIN;
  const auto padded = r.resolve(pad, nullptr);
  CHECK(padded.source == runtime::Source::nearest);
  CHECK(padded.entry->problem.tokens == 4096);
  pad.loss.ignore_index = -1, pad.target_type = TargetType::i32, pad.tokens = 12000;
  CHECK(r.resolve(pad, nullptr).entry->problem.tokens == 16384);
  // Other loss options: nothing stored for them, so the default.
  Problem smooth = Fixture::problem(4096);
  smooth.loss.label_smoothing = 0.1;
  CHECK(r.resolve(smooth, nullptr).source == runtime::Source::default_config);
  // A device with no entries of its own, same sm_90: the other sm_90 device's.
  runtime::Resolver r2(fx.db, fx.h200, kKernelSourceHash, warn);
  CHECK(r2.resolve(Fixture::problem(8192), nullptr).source == runtime::Source::exact);
  DeviceInfo stranger = fx.h200;
  stranger.name = "GTX fictional H3";
  runtime::Resolver r3(fx.db, stranger, kKernelSourceHash, warn);
  CHECK(r3.resolve(Fixture::problem(4096), nullptr).source == runtime::Source::same_arch);
  runtime::Resolver r4(fx.db, fx.other_arch, kKernelSourceHash, warn);
  const auto def = r4.resolve(Fixture::problem(4096), nullptr);
  CHECK(def.source == runtime::Source::default_config);
  CHECK(def.config == default_config(Fixture::problem(4096)));
  CHECK(warn.str().empty());
  // Lookups never write: the file is byte for byte what it was, no side files.
  CHECK_FALSE(fs::exists(fx.db + "-wal"));
  CHECK_FALSE(fs::exists(fx.db + "-shm"));
  CHECK(file_bytes(fx.db) == before);
}

TEST_CASE("this device's rows in a later database beat another device's rows in an earlier one") {
  // A CELTUNE_DB holding only another GPU's rows (same arch) answered first and
  // hid the shipped file's exact rows (the README probe).
  Fixture fx;
  const std::string other = (fx.dir / "other.sqlite").string();
  {
    db::Store s(other, db::Access::read_write);
    Fixture::put(s, fx.h200, 4096, 256, kKernelSourceHash);
  }
  std::ostringstream warn;
  const std::vector<runtime::DatabasePath> both{{other, true}, {fx.db, true}};
  runtime::Resolver r(both, fx.h100, kKernelSourceHash, warn);
  const auto own = r.resolve(Fixture::problem(4096), nullptr);
  CHECK(own.source == runtime::Source::exact);
  CHECK(own.database == fx.db);
  CHECK(own.config.row_chunk == 1024);
  // Among this device's rows the database order still rules: nearest first.
  CHECK(r.resolve(Fixture::problem(6000), nullptr).database == fx.db);
  // With no row of its own anywhere, the first database's borrowed row serves.
  DeviceInfo stranger = fx.h100;
  stranger.name = "GTX fictional H3";
  runtime::Resolver r2(both, stranger, kKernelSourceHash, warn);
  const auto borrowed = r2.resolve(Fixture::problem(4096), nullptr);
  CHECK(borrowed.source == runtime::Source::same_arch);
  CHECK(borrowed.database == other);
  CHECK(borrowed.config.row_chunk == 256);
  CHECK(warn.str().empty());
}

TEST_CASE("a row stored for the very targets beats one for other targets at the same shape") {
  Fixture fx;
  Problem p = Fixture::problem(4096);
  p.loss.ignore_index = -1, p.target_type = TargetType::i32;
  {
    db::Store s(fx.db, db::Access::read_write);
    db::BestEntry b = s.best_for_shape(p).front();
    b.device = fx.h100, b.problem = p, b.config.row_chunk = 768, b.kernel_hash = kKernelSourceHash;
    s.put_best(b);
  }
  std::ostringstream warn;
  runtime::Resolver r(fx.db, fx.h100, kKernelSourceHash, warn);
  const auto mine = r.resolve(p, nullptr);
  CHECK(mine.source == runtime::Source::exact);
  CHECK(mine.config.row_chunk == 768);
  CHECK(r.resolve(Fixture::problem(4096), nullptr).config.row_chunk == 1024);  // and the -100 one its own
  p.tokens = 6000;  // nearest: both at the same distance, the matching one first
  CHECK(r.resolve(p, nullptr).config.row_chunk == 768);
  p.target_type = TargetType::i64;  // neither matches fully: the store's order
  CHECK(r.resolve(p, nullptr).source == runtime::Source::nearest);
}

TEST_CASE("explicit beats CELTUNE_CONFIG beats the database; malformed ones are usage errors") {
  Fixture fx;
  std::ostringstream warn;
  runtime::Resolver r(fx.db, fx.h100, kKernelSourceHash, warn);
  setenv("CELTUNE_CONFIG", "{\"block_size\": 512, \"threads\": 128}", 1);
  CHECK(r.resolve(Fixture::problem(4096), nullptr).source == runtime::Source::env);
  CHECK(r.resolve(Fixture::problem(4096), nullptr).config.block_size == 512);
  const auto ex = r.resolve(Fixture::problem(4096), "{\"block_size\": 256}");
  CHECK(ex.source == runtime::Source::explicit_config);
  CHECK(ex.config.block_size == 256);
  setenv("CELTUNE_CONFIG", "{\"blok\": 1}", 1);
  CHECK_THROWS_AS(r.resolve(Fixture::problem(4096), nullptr), Error);
  unsetenv("CELTUNE_CONFIG");
  CHECK_THROWS_AS(r.resolve(Fixture::problem(4096), "not json"), Error);
  CHECK(r.resolve(Fixture::problem(4096), nullptr).source == runtime::Source::exact);
}

TEST_CASE("a malformed CELTUNE_BUSY_TIMEOUT_MS: one warning and the default wait; the databases still answer") {
  // It used to make every database refuse to open (a warning each), so every
  // tuned config gave way to the defaults over a value that matters only when a
  // database is locked.
  Fixture fx;
  for (const char* bad : {"abc", "-1", " 500"}) {
    CAPTURE(bad);
    setenv("CELTUNE_BUSY_TIMEOUT_MS", bad, 1);
    std::ostringstream warn;
    runtime::Resolver r(std::vector<runtime::DatabasePath>{{fx.db, true}, {fx.db, true}}, fx.h100,
                        kKernelSourceHash, warn);
    CHECK(r.resolve(Fixture::problem(4096), nullptr).source == runtime::Source::exact);
    CHECK(r.resolve(Fixture::problem(8192), nullptr).source == runtime::Source::nearest);
    const std::string w = warn.str();
    CHECK(std::count(w.begin(), w.end(), '\n') == 1);
    CHECK(w.find("CELTUNE_BUSY_TIMEOUT_MS") != std::string::npos);
  }
  unsetenv("CELTUNE_BUSY_TIMEOUT_MS");
}

TEST_CASE("a best row whose config row is gone: one warning naming the damage, then the next source") {
  // The lookup's join dropped such a row without a word (the C API probe).
  Fixture fx;
  {
    sqlite3* raw = nullptr;
    REQUIRE(sqlite3_open(fx.db.c_str(), &raw) == SQLITE_OK);
    REQUIRE(sqlite3_exec(raw, "PRAGMA foreign_keys = OFF; DELETE FROM configs", nullptr, nullptr, nullptr) ==
            SQLITE_OK);
    sqlite3_close(raw);
  }
  std::ostringstream warn;
  runtime::Resolver r(fx.db, fx.h100, kKernelSourceHash, warn);
  for (int n : {4096, 8192}) CHECK(r.resolve(Fixture::problem(n), nullptr).source == runtime::Source::default_config);
  const std::string w = warn.str();
  CHECK(std::count(w.begin(), w.end(), '\n') == 1);
  CHECK(w.find("refers to a missing row") != std::string::npos);
}

TEST_CASE("a damaged best row (a median of -1 ms): one warning naming row and rule, then the next candidate") {
  // Such a row was skipped in silence unless CELTUNE_LOG=1 (the C API probe),
  // where list and tune name it.
  Fixture fx;
  {
    sqlite3* raw = nullptr;
    REQUIRE(sqlite3_open(fx.db.c_str(), &raw) == SQLITE_OK);
    REQUIRE(sqlite3_exec(raw,
                         "UPDATE best SET median_ms = -1 WHERE kernel_hash <> 'stale-hash' AND problem_id = "
                         "(SELECT b.problem_id FROM best b JOIN configs c ON c.id = b.config_id "
                         "WHERE c.json LIKE '%\"row_chunk\":1024%')",
                         nullptr, nullptr, nullptr) == SQLITE_OK);
    CHECK(sqlite3_changes(raw) == 1);
    sqlite3_close(raw);
  }
  std::ostringstream warn;
  runtime::Resolver r(fx.db, fx.h100, kKernelSourceHash, warn);
  // N = 4096's own row is damaged: the nearest sound row (16384) serves, at
  // 4096 and again at 6000, with one warning between them.
  for (int n : {4096, 6000, 4096}) {
    const auto got = r.resolve(Fixture::problem(n), nullptr);
    CHECK(got.source == runtime::Source::nearest);
    REQUIRE(got.entry);
    CHECK(got.entry->problem.tokens == 16384);
  }
  const std::string w = warn.str();
  CAPTURE(w);
  CHECK(std::count(w.begin(), w.end(), '\n') == 1);
  CHECK(w.find("celtune: warning: database " + fx.db) == 0);
  CHECK(w.find("N4096") != std::string::npos);
  CHECK(w.find("breaks a rule") != std::string::npos);
}

TEST_CASE("unusable databases: one warning, then the defaults; nothing is created or changed") {
  Fixture fx;
  const std::string junk = (fx.dir / "junk.sqlite").string(), empty = (fx.dir / "empty.sqlite").string();
  const std::string trunc = (fx.dir / "trunc.sqlite").string(), newer = (fx.dir / "newer.sqlite").string();
  {
    std::ofstream f(junk, std::ios::binary);
    for (int i = 0; i < 8192; ++i) f.put(static_cast<char>((i * 2654435761u) >> 24));
  }
  { std::ofstream f(empty); }
  fs::copy_file(fx.db, trunc);
  fs::resize_file(trunc, 3000);
  {
    db::Store s(newer, db::Access::read_write);
  }
  {
    sqlite3* raw = nullptr;
    REQUIRE(sqlite3_open(newer.c_str(), &raw) == SQLITE_OK);
    sqlite3_exec(raw, "PRAGMA user_version = 7", nullptr, nullptr, nullptr);
    sqlite3_close(raw);
  }
  const std::string absent = (fx.dir / "absent.sqlite").string();
  for (const std::string& path : {junk, empty, trunc, newer, absent}) {
    CAPTURE(path);
    const std::string before = fs::exists(path) ? file_bytes(path) : "<absent>";
    std::ostringstream warn;
    runtime::Resolver r(path, fx.h100, kKernelSourceHash, warn);
    for (int n : {4096, 8192, 4096}) {
      const auto got = r.resolve(Fixture::problem(n), nullptr);
      CHECK(got.source == runtime::Source::default_config);
      CHECK(got.config == default_config(Fixture::problem(n)));
    }
    const std::string w = warn.str();
    CHECK(std::count(w.begin(), w.end(), '\n') == 1);  // one warning, not one per call
    CHECK((fs::exists(path) ? file_bytes(path) : "<absent>") == before);
    CHECK_FALSE(fs::exists(path + "-wal"));
  }
}

TEST_CASE("C API without a GPU: lookups work, kernel calls say why they cannot, bad arguments are refused") {
  Fixture fx;
  celtune_context* ctx = nullptr;
  REQUIRE(celtune_create(&ctx, fx.db.c_str()) == CELTUNE_OK);
  celtune_flce_args a{};
  a.tokens = 4096, a.hidden = 4096, a.vocab = 128256, a.dtype = CELTUNE_BF16, a.target_dtype = CELTUNE_INT64;
  celtune_loss_defaults(&a.options);
  a.mode = CELTUNE_FORWARD_BACKWARD;
  char json[512], tag[32];
  REQUIRE(celtune_flce_config(ctx, &a, json, sizeof json, tag, sizeof tag) == CELTUNE_OK);
  // Without a device the context's device is "none": no database tier applies.
  CHECK(std::string(tag) == "default");
  a.config_json = "{\"block_size\": 1024}";
  REQUIRE(celtune_flce_config(ctx, &a, json, sizeof json, tag, sizeof tag) == CELTUNE_OK);
  CHECK(std::string(tag) == "explicit");
  CHECK(std::string(json).find("\"block_size\":1024") != std::string::npos);
  a.config_json = nullptr;
  if (std::string(celtune_last_error(ctx)).empty()) {
    // Kernel calls: no device here (or pointers missing where there is one).
    CHECK(celtune_flce(ctx, &a, nullptr) != CELTUNE_OK);
    CHECK(std::string(celtune_last_error(ctx)).size() > 0);
  }
  a.tokens = 0;
  CHECK(celtune_flce_config(ctx, &a, json, sizeof json, tag, sizeof tag) == CELTUNE_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(celtune_last_error(ctx)).find("tokens") != std::string::npos);
  a.tokens = 8, a.dtype = static_cast<celtune_dtype>(9);
  CHECK(celtune_flce_config(ctx, &a, json, sizeof json, tag, sizeof tag) == CELTUNE_ERROR_INVALID_ARGUMENT);
  const int minus_one = -1;  // as a C caller's int lands in the enum field
  std::memcpy(&a.dtype, &minus_one, sizeof a.dtype);  // said as written, not as 4294967295
  CHECK(celtune_flce_config(ctx, &a, json, sizeof json, tag, sizeof tag) == CELTUNE_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(celtune_last_error(ctx)).find("invalid dtype -1") != std::string::npos);
  a.dtype = CELTUNE_BF16;
  CHECK(celtune_flce_config(nullptr, &a, json, sizeof json, tag, sizeof tag) == CELTUNE_ERROR_INVALID_ARGUMENT);
  CHECK(celtune_flce_config(ctx, nullptr, json, sizeof json, tag, sizeof tag) == CELTUNE_ERROR_INVALID_ARGUMENT);
  celtune_destroy(ctx);
  CHECK(celtune_create(nullptr, nullptr) == CELTUNE_ERROR_INVALID_ARGUMENT);
}

TEST_CASE("a context shared by threads gives every thread the same answers") {
  Fixture fx;
  celtune_context* ctx = nullptr;
  REQUIRE(celtune_create(&ctx, fx.db.c_str()) == CELTUNE_OK);
  std::vector<std::thread> pool;
  std::atomic<int> bad{0};
  for (int t = 0; t < 8; ++t)
    pool.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) {
        celtune_flce_args a{};
        a.tokens = 1024 << ((t + i) % 5), a.hidden = 4096, a.vocab = 128256;
        a.dtype = CELTUNE_BF16, a.target_dtype = CELTUNE_INT64, a.mode = CELTUNE_FORWARD_BACKWARD;
        celtune_loss_defaults(&a.options);
        char json[512], tag[32];
        if (celtune_flce_config(ctx, &a, json, sizeof json, tag, sizeof tag) != CELTUNE_OK) ++bad;
        Problem p = Fixture::problem(a.tokens);
        if (std::string(json) != nlohmann::json(default_config(p)).dump()) ++bad;
      }
    });
  for (auto& th : pool) th.join();
  CHECK(bad == 0);
  celtune_destroy(ctx);
}

TEST_CASE("a context shared by threads: each thread reads its own last error, and a success clears only its own") {
  // One string for all threads let a thread read another's message, or "" after
  // another thread's success, and was read unlocked while calls rewrote it.
  celtune_context* ctx = nullptr;
  REQUIRE(celtune_create_cpu(&ctx, "") == CELTUNE_OK);
  std::vector<std::thread> pool;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 8; ++t)
    pool.emplace_back([&, t] {
      for (int i = 0; i < 300; ++i) {
        celtune_flce_args a{};
        a.hidden = 64, a.vocab = 1000, a.dtype = CELTUNE_BF16, a.target_dtype = CELTUNE_INT64;
        a.mode = CELTUNE_FORWARD_BACKWARD;
        celtune_loss_defaults(&a.options);
        a.tokens = -(1000 * (t + 1) + i);  // refused, naming this thread's own value
        if (celtune_flce_config(ctx, &a, nullptr, 0, nullptr, 0) != CELTUNE_ERROR_INVALID_ARGUMENT) ++wrong;
        const std::string mine = celtune_last_error(ctx);
        if (mine.find("got " + std::to_string(a.tokens)) == std::string::npos) ++wrong;
        a.tokens = 8;
        if (celtune_flce_config(ctx, &a, nullptr, 0, nullptr, 0) != CELTUNE_OK) ++wrong;
        if (std::string(celtune_last_error(ctx)) != "") ++wrong;
      }
    });
  for (auto& th : pool) th.join();
  CHECK(wrong == 0);
  celtune_destroy(ctx);
}

namespace {
// Args the C API refuses (tokens = -1) before any database or kernel is touched.
celtune_flce_args refused_args() {
  celtune_flce_args a{};
  a.hidden = 64, a.vocab = 1000, a.dtype = CELTUNE_BF16, a.target_dtype = CELTUNE_INT64;
  celtune_loss_defaults(&a.options);
  a.tokens = -1;
  return a;
}
}  // namespace

TEST_CASE("a new thread starts with no last error, whatever an ended thread left; a new context too") {
  // Keyed by std::thread::id, a thread read the error of a joined thread whose
  // id glibc had given it again (each thread here is joined before the next
  // starts, so ids do repeat).
  celtune_context* ctx = nullptr;
  REQUIRE(celtune_create_cpu(&ctx, "") == CELTUNE_OK);
  int wrong = 0;
  for (int i = 0; i < 20; ++i) {
    std::thread([&] {
      const celtune_flce_args a = refused_args();
      if (celtune_flce_config(ctx, &a, nullptr, 0, nullptr, 0) != CELTUNE_ERROR_INVALID_ARGUMENT) ++wrong;
    }).join();
    std::thread([&] {
      if (std::string(celtune_last_error(ctx)) != "") ++wrong;  // made no call
    }).join();
  }
  CHECK(wrong == 0);
  // A context created where a failed one was freed starts clean in this thread.
  const celtune_flce_args a = refused_args();
  REQUIRE(celtune_flce_config(ctx, &a, nullptr, 0, nullptr, 0) == CELTUNE_ERROR_INVALID_ARGUMENT);
  celtune_destroy(ctx);
  REQUIRE(celtune_create_cpu(&ctx, "") == CELTUNE_OK);
  CHECK(std::string(celtune_last_error(ctx)) == "");
  celtune_destroy(ctx);
}

namespace {
celtune_context* g_at_exit_ctx = nullptr;
// Runs as the child process ends (atexit): after exit() has destroyed the main
// thread's thread_local objects.
void fail_at_exit() {
  const celtune_flce_args a = refused_args();
  const bool refused = celtune_flce_config(g_at_exit_ctx, &a, nullptr, 0, nullptr, 0) == CELTUNE_ERROR_INVALID_ARGUMENT;
  const bool said = std::string(celtune_last_error(g_at_exit_ctx)) != "";
  celtune_destroy(g_at_exit_ctx);
  if (!refused || !said) _exit(3);
}
}  // namespace

TEST_CASE("C API: a call failing as the process ends (an atexit handler) returns its status and message") {
  // The errors lived in a thread_local map, which exit() destroys before the
  // atexit handlers and static destructors run: a failing call there wrote
  // into freed memory (a segfault every run, found by the C API probe).
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    if (celtune_create_cpu(&g_at_exit_ctx, "") != CELTUNE_OK) _exit(4);
    const celtune_flce_args a = refused_args();  // a failure first, so this thread's map exists when exit() begins
    if (celtune_flce_config(g_at_exit_ctx, &a, nullptr, 0, nullptr, 0) != CELTUNE_ERROR_INVALID_ARGUMENT) _exit(5);
    std::atexit(fail_at_exit);
    std::exit(0);
  }
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  CHECK_MESSAGE(WIFEXITED(status), "the child ended on signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0));
  CHECK(WEXITSTATUS(status) == 0);
}

TEST_CASE("the shipped database answers for each GPU it was tuned on, with this build's kernels") {
  const char* shipped = std::getenv("CELTUNE_SHIPPED_DB");
  REQUIRE(shipped != nullptr);
  // Each GPU's rows and whether they were tuned with this build's kernels. A
  // kernel change without re-tuning makes every shipped entry stale: this fails
  // then, until db/tuned/ is re-tuned and re-exported for each GPU. A GPU set
  // false here has stale rows only: the runtime skips them and borrows another
  // GPU's of the same arch. The H200's rows are re-tuned with every kernel
  // change (docs/results.md names the session and the hash); the H100's are
  // feb64adb236a6f01's, stale since no H100 has been lent, so an H100 borrows
  // the H200's until its next re-tune.
  const std::pair<const char*, bool> gpus[] = {{"NVIDIA H100 80GB HBM3", false}, {"NVIDIA H200", true}};
  for (const auto& [gpu, current] : gpus) {
    CAPTURE(gpu);
    DeviceInfo dev;
    dev.name = gpu, dev.arch = "sm_90", dev.cublaslt_version = 130100;
    std::ostringstream warn;
    runtime::Resolver r(shipped, dev, kKernelSourceHash, warn);
    Problem p;
    p.tokens = 4096, p.hidden = 4096, p.vocab = 128256;  // llama3-8b
    const auto exact = r.resolve(p, nullptr);
    CAPTURE(exact.skipped.size());
    using runtime::Source;
    CHECK(exact.source == (current ? Source::exact : Source::same_arch));
    if (!current) {  // another GPU's row of this build's kernels, same arch
      REQUIRE(exact.entry);
      CHECK(exact.entry->device.name != gpu);
      CHECK(exact.entry->device.arch == "sm_90");
      CHECK(exact.entry->kernel_hash == kKernelSourceHash);
    }
    CHECK(r.resolve(p.with_tokens(1024), nullptr).source == (current ? Source::exact : Source::same_arch));
    CHECK(r.resolve(p.with_tokens(6000), nullptr).source == (current ? Source::nearest : Source::same_arch));
    p.hidden = 2304, p.vocab = 256000, p.loss.softcap = 30;  // gemma2-2b
    CHECK(r.resolve(p.with_tokens(16384), nullptr).source == (current ? Source::exact : Source::same_arch));
    // Every other preset, at both ends of the tuned token range and in both
    // modes: a preset whose rows a re-tune left out shows here.
    p.loss.softcap = 0;
    for (const auto& [h, v] : {std::pair<int64_t, int64_t>{8192, 128256}, {3584, 152064}, {4096, 32768}}) {
      p.hidden = h, p.vocab = v;
      CAPTURE(p.hidden);
      CAPTURE(p.vocab);
      for (const Mode m : {Mode::forward_backward, Mode::forward}) {
        p.mode = m;
        for (const int64_t n : {int64_t{1024}, int64_t{32768}})
          CHECK(r.resolve(p.with_tokens(n), nullptr).source == (current ? Source::exact : Source::same_arch));
      }
    }
    CHECK(warn.str().empty());
  }
}

// ---- issue 12 -------------------------------------------------------------

namespace {
// An environment variable set for one scope, restored after.
struct ScopedEnv {
  std::string name;
  std::optional<std::string> old;
  ScopedEnv(const char* n, const char* v) : name(n) {
    if (const char* o = std::getenv(n)) old = o;
    if (v) setenv(n, v, 1); else unsetenv(n);
  }
  ~ScopedEnv() {
    if (old) setenv(name.c_str(), old->c_str(), 1); else unsetenv(name.c_str());
  }
};

// A small CPU problem (the fixture's shape scaled down), stored for the CPU device.
Problem cpu_problem(int64_t n) {
  Problem p;
  p.tokens = n, p.hidden = 32, p.vocab = 2000;
  return p;
}

void put_cpu(const std::string& path, const Problem& p, int block_size) {
  db::Store s(path, db::Access::read_write);
  db::BestEntry b;
  b.device = cpu::device_info(), b.problem = p;
  b.config.block_size = block_size, b.config.v_chunk = 0, b.config.row_chunk = 0, b.config.threads = 128;
  b.stats = {1.0, 0.9, 1.1, 20, 0.2};
  b.default_ms = 1.2, b.speedup = 1.2, b.celtune_version = "0.1.0", b.kernel_hash = kKernelSourceHash;
  b.created_at = "2026-11-22T00:00:00Z";
  s.put_best(b);
}

celtune_flce_args cpu_args(int64_t n) {
  celtune_flce_args a{};
  a.tokens = n, a.hidden = 32, a.vocab = 2000, a.dtype = CELTUNE_BF16, a.target_dtype = CELTUNE_INT64;
  celtune_loss_defaults(&a.options);
  a.mode = CELTUNE_FORWARD_BACKWARD;
  return a;
}

std::string tag_of(const char* db_path, const celtune_flce_args& a, std::string* json_out = nullptr) {
  celtune_context* ctx = nullptr;
  REQUIRE(celtune_create(&ctx, db_path) == CELTUNE_OK);
  char json[512] = {}, tag[32] = {};
  const auto st = celtune_flce_config(ctx, &a, json, sizeof json, tag, sizeof tag);
  CHECK_MESSAGE(st == CELTUNE_OK, celtune_last_error(ctx));
  celtune_destroy(ctx);
  if (json_out) *json_out = json;
  return tag;
}
}  // namespace

TEST_CASE("C API: options keyed alike from floats and doubles; cpu rows found without a GPU") {
  Fixture fx;
  const std::string path = (fx.dir / "cpu.sqlite").string();
  Problem p = cpu_problem(64);
  p.loss.label_smoothing = 0.1, p.loss.z_loss = 1e-4, p.loss.softcap = 30;  // as the CLI parses them
  put_cpu(path, p, 256);
  ScopedEnv no_env("CELTUNE_DB", nullptr), no_user("XDG_DATA_HOME", fx.dir.c_str());
  celtune_flce_args a = cpu_args(64);
  a.options.label_smoothing = 0.1f, a.options.z_loss = 1e-4f, a.options.softcap = 30.0f;
  CHECK(tag_of(path.c_str(), a) == "exact");
  Problem from_floats = p;
  from_floats.loss.label_smoothing = 0.1f, from_floats.loss.z_loss = 1e-4f;
  CHECK(from_floats.key() == p.key());
  CHECK(p.key().find(":ls0.1:") != std::string::npos);
  CHECK(Problem::from_key(p.key()).key() == p.key());
}

TEST_CASE("database order: explicit > CELTUNE_DB > the user's database > shipped; rows from the first that has them") {
  Fixture fx;
  const std::string expl = (fx.dir / "explicit.sqlite").string(), env = (fx.dir / "env.sqlite").string();
  fs::create_directories(fx.dir / "xdg" / "celtune");
  const std::string user = (fx.dir / "xdg" / "celtune" / "celtune.sqlite").string();
  put_cpu(user, cpu_problem(64), 64);
  put_cpu(user, cpu_problem(128), 64);
  put_cpu(env, cpu_problem(64), 128);
  put_cpu(expl, cpu_problem(32), 256);  // no N=64 entry here: its nearest is N=32
  ScopedEnv xdg("XDG_DATA_HOME", (fx.dir / "xdg").c_str());
  std::string json;
  {
    ScopedEnv no_env("CELTUNE_DB", nullptr);
    // What `celtune tune` wrote by default is what the runtime finds.
    CHECK(tag_of(nullptr, cpu_args(64), &json) == "exact");
    CHECK(json.find("\"block_size\":64") != std::string::npos);
  }
  ScopedEnv set_env("CELTUNE_DB", env.c_str());
  CHECK(tag_of(nullptr, cpu_args(64), &json) == "exact");
  CHECK(json.find("\"block_size\":128") != std::string::npos);
  // The explicit database has rows for this shape (N=32): they come first, as nearest.
  CHECK(tag_of(expl.c_str(), cpu_args(64), &json) == "nearest");
  CHECK(json.find("\"block_size\":256") != std::string::npos);
  // A shape only the user's database holds is still found behind the others.
  auto other = cpu_args(64);
  other.vocab = 3000;
  put_cpu(user, [] { Problem q = cpu_problem(64); q.vocab = 3000; return q; }(), 64);
  CHECK(tag_of(expl.c_str(), other) == "exact");
  // `celtune lookup`'s resolver reads the same list.
  const auto dbs = runtime::find_databases(expl);
  REQUIRE(dbs.size() >= 3);
  CHECK(dbs[0].path == expl);
  CHECK(dbs[1].path == env);
  CHECK(dbs[2].path == user);
}

TEST_CASE("a borrowed config is re-checked against the target's scratch budget; too big falls to the next tier") {
  Fixture fx;
  const std::string path = (fx.dir / "near.sqlite").string();
  put_cpu(path, cpu_problem(64), 256);  // one row chunk and the whole vocabulary: tiny at N=64
  std::ostringstream warn;
  std::shared_ptr<const Backend> cpu = open_backend("cpu");
  runtime::Resolver r(path, cpu->device(), kKernelSourceHash, warn, runtime::backend_checks(cpu));
  CHECK(r.resolve(cpu_problem(100), nullptr).source == runtime::Source::nearest);
  // At N = 10^6 the same config is a 10^6 x 2000 fp32 tile (7.6 GiB): refused.
  const auto big = r.resolve(cpu_problem(1000000), nullptr);
  CHECK(big.source == runtime::Source::default_config);
  REQUIRE(big.skipped.size() == 1);
  CHECK(big.skipped[0].find("budget") != std::string::npos);
  // The exact entry is what the tuner chose for this very problem: kept.
  CHECK(r.resolve(cpu_problem(64), nullptr).source == runtime::Source::exact);
}

TEST_CASE("CELTUNE_MAX_SCRATCH: the default keeps to it, a stored row over it is passed over; bad values refused") {
  Fixture fx;
  const std::string path = (fx.dir / "budget.sqlite").string();
  const Problem p = cpu_problem(16384);
  put_cpu(path, p, 256);  // one chunk and the whole vocabulary: a 125 MiB fp32 tile on the CPU backend
  std::shared_ptr<const Backend> cpu = open_backend("cpu");
  std::ostringstream warn;
  auto resolver = [&] { return runtime::Resolver(path, cpu->device(), kKernelSourceHash, warn, runtime::backend_checks(cpu)); };
  unsetenv("CELTUNE_MAX_SCRATCH");
  CHECK(resolver().resolve(p, nullptr).source == runtime::Source::exact);  // unset: the exact row, whatever it takes
  constexpr size_t kBudget = size_t{64} << 20;
  REQUIRE(setenv("CELTUNE_MAX_SCRATCH", "64MiB", 1) == 0);
  {
    runtime::Resolver r = resolver();
    const runtime::Resolved got = r.resolve(p, nullptr);
    CHECK(got.source == runtime::Source::default_config);
    REQUIRE(got.skipped.size() == 1);
    CHECK(got.skipped[0].find("over CELTUNE_MAX_SCRATCH's 64.0 MiB") != std::string::npos);
    CHECK(got.config == default_config(p, kBudget));
    CHECK_FALSE(got.config == default_config(p));  // the rule's chunks, smaller
    CHECK(cpu->scratch_bytes(p, got.config) <= kBudget);
    CHECK(warn.str().empty());
    // An explicit config is taken as given: the caller chose it.
    CHECK(r.resolve(p, "{\"row_chunk\": 0}").source == runtime::Source::explicit_config);
  }
  for (const char* bad : {"12XB", "63MiB", "-5", "1.2.3MiB"}) {
    CAPTURE(bad);
    REQUIRE(setenv("CELTUNE_MAX_SCRATCH", bad, 1) == 0);
    CHECK_THROWS_AS(resolver(), Error);
    CHECK_THROWS_AS(env_max_scratch(), Error);
    // Through the C API the context is refused, and its message outlives it:
    // celtune_last_error(NULL) (the Python package raised "status 2" alone).
    celtune_context* ctx = nullptr;
    CHECK(celtune_create_cpu(&ctx, path.c_str()) == CELTUNE_ERROR_INVALID_ARGUMENT);
    CHECK(ctx == nullptr);
    CHECK(std::string(celtune_last_error(nullptr)).find("CELTUNE_MAX_SCRATCH") != std::string::npos);
  }
  // A message past the creation buffer (1023 bytes) is cut on a whole \xNN
  // escape and says so: 600 bytes 0xff, escaped to 2400, ended "\xff\x'".
  for (size_t pad = 0; pad < 4; ++pad) {
    CAPTURE(pad);
    REQUIRE(setenv("CELTUNE_MAX_SCRATCH", (std::string(pad, 'a') + std::string(600, '\xff')).c_str(), 1) == 0);
    celtune_context* ctx = nullptr;
    CHECK(celtune_create_cpu(&ctx, path.c_str()) == CELTUNE_ERROR_INVALID_ARGUMENT);
    const std::string m = celtune_last_error(nullptr);
    REQUIRE(m.size() > 8);
    CHECK(m.size() <= 1023);
    CHECK(m.ends_with("\\xff\u2026"));
  }
  unsetenv("CELTUNE_MAX_SCRATCH");
  {
    celtune_context* ctx = nullptr;
    REQUIRE(celtune_create_cpu(&ctx, path.c_str()) == CELTUNE_OK);
    CHECK(std::string(celtune_last_error(nullptr)) == "null context");  // a success clears the creation error
    celtune_destroy(ctx);
  }
  // The excess is said apart: 4 KiB over read "needs 64 MiB, over … 64 MiB".
  CHECK(scratch_over_budget(kBudget + 4096, kBudget) ==
        "needs 64.0 MiB of scratch, 4.0 KiB over CELTUNE_MAX_SCRATCH's 64.0 MiB");
  REQUIRE(setenv("CELTUNE_MAX_SCRATCH", "1GiB", 1) == 0);
  CHECK(env_max_scratch() == size_t{1} << 30);
  unsetenv("CELTUNE_MAX_SCRATCH");
  CHECK_FALSE(env_max_scratch().has_value());
}

TEST_CASE("C API: a small buffer is its own status with the size needed; sizes that overflow are refused") {
  Fixture fx;
  ScopedEnv no_env("CELTUNE_DB", nullptr), no_user("XDG_DATA_HOME", fx.dir.c_str());
  celtune_context* ctx = nullptr;
  REQUIRE(celtune_create(&ctx, fx.db.c_str()) == CELTUNE_OK);
  celtune_flce_args a = cpu_args(64);
  char json[8], tag[32];
  CHECK(celtune_flce_config(ctx, &a, json, sizeof json, tag, sizeof tag) == CELTUNE_ERROR_BUFFER_TOO_SMALL);
  CHECK(std::string(celtune_last_error(ctx)).find("needs") != std::string::npos);
  CHECK(std::strlen(json) == sizeof json - 1);
  char tiny_tag[3];
  char big_json[512];
  CHECK(celtune_flce_config(ctx, &a, big_json, sizeof big_json, tiny_tag, sizeof tiny_tag) ==
        CELTUNE_ERROR_BUFFER_TOO_SMALL);
  CHECK(celtune_flce_config(ctx, &a, nullptr, 0, nullptr, 0) == CELTUNE_OK);
  a.tokens = int64_t{1} << 62, a.hidden = 16, a.vocab = 500;
  CHECK(celtune_flce_config(ctx, &a, big_json, sizeof big_json, tag, sizeof tag) == CELTUNE_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(celtune_last_error(ctx)).find("too large") != std::string::npos);
  celtune_destroy(ctx);
}

TEST_CASE("CELTUNE_LOG=1 logs configs from the call and from CELTUNE_CONFIG, once per problem") {
  Fixture fx;
  ScopedEnv log("CELTUNE_LOG", "1"), cfg("CELTUNE_CONFIG", "{\"block_size\": 512}");
  std::ostringstream warn;
  runtime::Resolver r(fx.db, fx.h100, kKernelSourceHash, warn);
  r.resolve(Fixture::problem(4096), nullptr);
  r.resolve(Fixture::problem(4096), nullptr);
  CHECK(warn.str().find("[env]") != std::string::npos);
  r.resolve(Fixture::problem(4096), "{\"block_size\": 256}");
  CHECK(warn.str().find("[explicit]") != std::string::npos);
  const std::string w = warn.str();
  CHECK(std::count(w.begin(), w.end(), '\n') == 2);
}
