// Output for every subcommand: an aligned text table for people, and the same
// content as JSON (--json) or CSV (--csv) for programs.
#pragma once

#include <sys/types.h>

#include <csignal>
#include <functional>
#include <iosfwd>
#include <string>
#include <vector>

#include "model/types.hpp"  // human_bytes

namespace celtune::cli {

class Table {
 public:
  explicit Table(std::vector<std::string> header) : header_(std::move(header)) {}
  void add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  void print(std::ostream& out) const;
  void print_csv(std::ostream& out) const;
  bool empty() const { return rows_.empty(); }

 private:
  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;
};

std::string fmt(const char* format, double v);  // printf-style for one number

// The longest file name the folder of `path` takes (pathconf; NAME_MAX where
// it does not say).
size_t name_max(const std::string& path);
// A mkstemp template for a temporary beside `path`: its name and ".XXXXXX",
// the name cut short where the whole, and `room` bytes more (a suffix SQLite
// adds), would pass name_max (a legal 250-byte name failed: too long).
std::string temp_template(const std::string& path, size_t room);

// Writes `path` atomically: `body` fills a temporary file beside it, which is
// renamed over `path` only once every byte is written and flushed, so a failure
// (a full disk, a file-size limit) leaves what was there untouched and removes
// the temporary. Refuses a path that exists and is not a regular file (a
// symlink, a FIFO, a device). The file gets the mode of the one it replaces, or
// 0666 less the umask when new (mkstemp's 0600 made exports unreadable to others).
void write_file_atomic(const std::string& path, const std::function<void(std::ostream&)>& body);
// The two halves of it, for several files that change together (report's
// plots): stage_file writes, syncs and sets the mode of a temporary beside path
// and returns its name; commit_file renames it over path (removing it if the
// rename fails). A caller that fails between the two removes what it staged.
std::string stage_file(const std::string& path, const std::function<void(std::ostream&)>& body);
// The mode a new file gets: 0666 less the umask (mkstemp's 0600 is for the
// temporary, not for what it becomes).
mode_t new_file_mode();
void commit_file(const std::string& tmp, const std::string& path);
// The signals after which this process removes the files it has not finished
// (stage_file's temporaries, NewDatabase's database), and the one way their
// handler goes in: a signal the parent ignored (SIGINT in a shell's background
// job, SIGHUP under nohup) stays ignored. `previous`, where given, receives
// what each signal did before, in kCleanupSignals' order, for a restore.
inline constexpr int kCleanupSignals[] = {SIGINT, SIGTERM, SIGHUP};
using SignalHandler = void (*)(int);
void install_cleanup_handler(SignalHandler handler, SignalHandler (*previous)[3] = nullptr);
// Removes a temporary stage_file made that will not be committed.
void discard_staged(const std::string& tmp);
// Unlinks every temporary stage_file made that is neither committed nor
// discarded: async-signal-safe, for signal handlers (stage_file installs one
// for SIGINT, SIGTERM and SIGHUP; NewDatabase's calls this too).
void remove_staged_files() noexcept;
// "1 problem", "3 problems": a count with its noun, singular for one.
std::string counted(size_t n, const std::string& one, const std::string& many);

// Points std::cout at a buffer over descriptor 1 that keeps the first failed
// write's errno, so the errors below can say why; main() calls it first.
void install_stdout();
// Flushes standard output: "" when all that was written arrived, else the
// message saying it did not, and why (a full disk, a closed pipe).
std::string stdout_error();
// The same as Error(environment). main() calls it after every command; a
// command whose output must arrive before it commits calls it then too.
void flush_stdout();

}  // namespace celtune::cli
