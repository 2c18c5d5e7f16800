// The SQLite store: open (creating and migrating when writable), write
// measurements and best configs, read them back, import/export JSON lines.
//
// Every statement is prepared with bound parameters; nothing is built by pasting
// input into SQL. Every write runs inside one IMMEDIATE transaction, retried when
// another writer holds the lock (WAL lets readers go on meanwhile), so concurrent
// tuners lose nothing. A database that cannot be used throws Error(environment).
#pragma once

#include <chrono>
#include <functional>
#include <iosfwd>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "records.hpp"

struct sqlite3;

namespace celtune::db {

enum class Access { read_only, read_write };
enum class Offered { added, replaced, refused };

class Store {
 public:
  static constexpr int kSchemaVersion = 1;

  // read_write creates the file and schema if needed and migrates older schemas;
  // read_only never creates or changes a file. Both refuse a newer schema.
  // busy_ms: the busy timeout (busy_timeout_ms() when not given).
  Store(const std::string& path, Access access);
  Store(const std::string& path, Access access, int busy_ms);
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  const std::string& path() const { return path_; }

  // Fails (exit 3) unless SQLite's integrity_check finds every page and every
  // index sound. The CLI's readers ask before they list, export, merge, report
  // or validate a file's rows, or take it as a prior: a copy short by its last
  // 100 bytes (an index then missing a row) did all of those with exit 0 and no
  // word, where writers refused it. The runtime does not ask: its lookup warns
  // and falls back at the first row it cannot read.
  void check_sound() const;

  // Runs fn inside one write transaction (retried as a whole on contention).
  void write(const std::function<void()>& fn);

  // Inserts or replaces the measurement with the same (device, problem, config,
  // kernel hash): tune's own new measurement (--force re-measures). Call inside
  // write() to batch, or alone.
  void record(const Measurement& m);
  // Inserts m unless a measurement with the same key is stored; true when added.
  // Imports and merges: a row already here is never replaced by another
  // database's (a merged copy whose rows read "failed" turned every stored "ok"
  // into "failed", and the next tune found nothing that passed).
  bool add_measurement(const Measurement& m);
  // Stores b unless the entry for the same (device, problem) is better: one
  // measured with `current_hash` (the kernels of this build, which the runtime
  // serves) beats one from other kernels, which lookup skips; otherwise the
  // faster wins, ties keep what is stored. Says whether b was added (none was
  // stored), replaced the stored entry, or was refused.
  Offered offer_best(const BestEntry& b, const std::string& current_hash);
  // Stores b, replacing any entry for the same (device, problem).
  void put_best(const BestEntry& b);

  // Every best entry, ordered by device and problem key; every measurement, by
  // device, problem and config. A damaged row (its problem key or config does
  // not parse, its problem row disagrees with its key, it refers to a missing
  // row) fails the read, Error(environment). With `unreadable`, each such row is
  // named there ("KIND DEVICE KEY: why", or by row id) and left out instead:
  // how export --skip-damaged saves the rest of a damaged database.
  std::vector<BestEntry> best_entries(std::vector<std::string>* unreadable = nullptr) const;
  // Best entries whose problem has p's family, hidden, vocab, dtype and mode
  // (any device, any token count): what the runtime's lookup tiers choose from.
  std::vector<BestEntry> best_for_shape(const Problem& p) const;
  std::vector<Measurement> measurements(std::vector<std::string>* unreadable = nullptr) const;
  std::optional<Measurement> find_measurement(const DeviceInfo& d, const Problem& p, const KernelConfig& c,
                                              const std::string& kernel_hash) const;

 private:
  bool insert_measurement(const Measurement& m, bool replace);
  // Problem rows whose key does not parse or whose shape columns disagree with
  // it: key -> why. check_references fails on the first; salvaging readers skip
  // the rows that refer to them.
  std::map<std::string, std::string> damaged_problems() const;
  // `table`'s rows (best or measurements) that refer to a missing device,
  // problem or config, each named "KIND row ID": the readers' joins drop them.
  std::vector<std::string> dangling_rows(const char* table, const char* kind) const;
  // The readers' shared loop over `s` (columns as kDeviceCols, then p.key):
  // every row through `read`, or, with `unreadable`, the damaged ones named there.
  // `table` is where the rows live, `kind` how they are named ("best", "measurement").
  template <typename Row, typename Read>
  std::vector<Row> read_rows(const char* table, const char* kind, const char* sql, Read read,
                             std::vector<std::string>* unreadable) const;
  int64_t device_id(const DeviceInfo& d);
  int64_t problem_id(const Problem& p);
  int64_t config_id(const KernelConfig& c);
  void migrate();
  // Runs fn, retrying it whole while another process holds the lock, until one
  // deadline (busy_ms_ from the first try, or `until`) passes; then
  // Error(environment) naming the lock. Nested calls share the outermost deadline.
  void retry_busy(const std::function<void()>& fn,
                  std::optional<std::chrono::steady_clock::time_point> until = std::nullopt);
  [[noreturn]] void fail_locked() const;
  void commit();  // inside retry_busy: COMMIT, retried alone until the deadline
  // Error(environment) when a row refers to a missing device, problem or config
  // row (the readers' joins would drop it without a word); once per Store.
  void check_references() const;
  // Error(environment) unless SQLite's integrity_check finds the file sound;
  // run once when a writer opens an existing database.
  void check_structure() const;

  std::string path_;
  Access access_;
  sqlite3* db_ = nullptr;
  int tx_depth_ = 0;
  mutable bool references_checked_ = false;
  int busy_ms_;
  std::optional<std::chrono::steady_clock::time_point> deadline_;
};

// Whether path is a regular file that starts with SQLite's header. Reads only a
// regular file: opening a FIFO waits for a writer.
bool is_sqlite_file(const std::string& path);

// CELTUNE_BUSY_TIMEOUT_MS, default kDefaultBusyTimeoutMs; Error(usage) when malformed.
inline constexpr int kDefaultBusyTimeoutMs = 10000;
int busy_timeout_ms();

// The rule of validate_config that `c` breaks for its stored problem `p`, or ""
// when it keeps them all. import never stores such a config, so one found was
// edited by hand or damaged; the runtime skips its row (src/runtime/resolve.cpp).
std::string broken_rule(const Problem& p, const KernelConfig& c);
// The rule of check_record that the stored row b breaks (its config's, or a time
// that is not positive: a median of −1 ms), or "": import never stores such a
// row, so one found was edited by hand or damaged, and the runtime skips it.
std::string broken_record(const BestEntry& b);
// The same for a measurement row (a status that is neither ok nor failed, a
// missing median): list counts such rows, report leaves them out of its plots,
// and export and merge refuse the database that holds one.
std::string broken_record(const Measurement& m);
// "database PATH: the best config stored for DEVICE PROBLEM breaks a rule (RULE)"
// when b breaks one, else "": how list, report and tune name such a row.
std::string broken_best_note(const std::string& path, const BestEntry& b);

// What an export changed or left out, one "KIND DEVICE KEY…" per row.
struct ExportReport {
  // Text that was not UTF-8 or held control characters, exported with '?' in
  // place of each (merge refuses such rows; export is how they are saved).
  std::vector<std::string> replaced;
  // Rows import would refuse, left out (skip_damaged only), with the rule each breaks.
  std::vector<std::string> skipped;
};
// One JSON object per line: {"record":"best",…} or {"record":"measurement",…},
// sorted, so that an export is a stable, reviewable text file. A row import
// would refuse is Error(environment) and nothing is written; with skip_damaged
// it is left out instead, and named in the report: how the sound rows of a
// damaged database are saved.
ExportReport export_jsonl(const Store& s, std::ostream& out, bool skip_damaged = false);

// Error(usage) naming what is impossible in a record: a problem or config that
// fails validation, times that are not positive and finite, p20 ≤ median ≤ p80
// broken. Import checks every line with these; nothing else writes foreign rows.
void check_record(const BestEntry& b);
void check_record(const Measurement& m);

// JSON text of a record: bytes that are not UTF-8 (only a hand-damaged database
// holds them: import refuses them) come out as U+FFFD instead of an exception.
std::string dump_text(const nlohmann::json& j, int indent = -1);

// The records of an import or a merge, each checked (check_record), in order.
struct Records {
  std::vector<Measurement> measurements;
  std::vector<BestEntry> best;
  bool empty() const { return measurements.empty() && best.empty(); }
};

// All or nothing: a malformed line throws Error(usage) naming its line number.
Records read_jsonl(std::istream& in);
// Every row of each of `from`, in order; a row import would refuse throws
// Error(environment): that database is damaged, and nothing is merged. Offered
// at once (offer_records), a key that two databases share counts as one row.
Records read_rows(const std::vector<const Store*>& from);

// What became of each record offered, each counted in exactly one field.
struct ImportCounts {
  int64_t measurements_added = 0;
  int64_t measurements_stored = 0;    // one with its key was stored before: that one is kept
  int64_t measurements_repeated = 0;  // its key came earlier in the records: the first counts
  int64_t best_added = 0;             // stored where none was stored for its device and problem
  int64_t best_replaced = 0;          // stored in place of the entry stored before
  int64_t best_kept_stored = 0;       // not stored: the entry stored before is better (offer_best)
  int64_t best_beaten = 0;            // not stored: another of the records for its device and problem is
  int64_t records() const {
    return measurements_added + measurements_stored + measurements_repeated + best_added + best_replaced +
           best_kept_stored + best_beaten;
  }
};

// Stores the records in one transaction (the caller's, when inside one): each
// measurement unless its key is stored (add_measurement), each best entry as
// offer_best decides against `current_hash`.
ImportCounts offer_records(Store& s, const Records& r, const std::string& current_hash);

// read_jsonl, then offer_records: nothing from the file is stored unless all of it is.
ImportCounts import_jsonl(Store& s, std::istream& in, const std::string& current_hash);

}  // namespace celtune::db
