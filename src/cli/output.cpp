#include "output.hpp"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <ostream>
#include <streambuf>

#include "model/error.hpp"

namespace celtune::cli {

void Table::print(std::ostream& out) const {
  // Cells echo what databases hold: a damaged one's device name put a raw
  // escape sequence on the terminal. Written as error messages are.
  std::vector<std::vector<std::string>> rows = rows_;
  for (auto& r : rows)
    for (auto& cell : r) cell = printable_message(cell, false);
  std::vector<size_t> w(header_.size(), 0);
  auto widen = [&](const std::vector<std::string>& r) {
    for (size_t i = 0; i < r.size() && i < w.size(); ++i) w[i] = std::max(w[i], r[i].size());
  };
  widen(header_);
  for (const auto& r : rows) widen(r);
  auto line = [&](const std::vector<std::string>& r) {
    for (size_t i = 0; i < w.size(); ++i) {
      const std::string cell = i < r.size() ? r[i] : "";
      out << cell;
      if (i + 1 < w.size()) out << std::string(w[i] - cell.size() + 2, ' ');
    }
    out << '\n';
  };
  line(header_);
  size_t total = 0;
  for (size_t x : w) total += x + 2;
  out << std::string(total > 2 ? total - 2 : 0, '-') << '\n';
  for (const auto& r : rows) line(r);
}

void Table::print_csv(std::ostream& out) const {
  auto line = [&](const std::vector<std::string>& r) {
    for (size_t i = 0; i < r.size(); ++i) {
      const bool quote = r[i].find_first_of(",\"\n") != std::string::npos;
      if (i) out << ',';
      if (!quote) {
        out << r[i];
        continue;
      }
      out << '"';
      for (char c : r[i]) out << (c == '"' ? "\"\"" : std::string(1, c));
      out << '"';
    }
    out << '\n';
  };
  line(header_);
  for (const auto& r : rows_) line(r);
}

std::string fmt(const char* format, double v) {
  // Sized by a first pass: a 64-byte buffer cut a 1e62 speedup to its first 63
  // digits, silently, and dropped the "x" after them.
  const int n = std::snprintf(nullptr, 0, format, v);
  if (n < 0) return "?";  // an encoding error: not with the formats we pass
  std::string out(static_cast<size_t>(n) + 1, '\0');
  std::snprintf(out.data(), out.size(), format, v);
  out.resize(static_cast<size_t>(n));
  return out;
}

std::string counted(size_t n, const std::string& one, const std::string& many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

namespace {
// An output stream buffer over a file descriptor that keeps the errno of the
// first write(2) that failed. Over stdio or a filebuf the reason is gone by the
// time a check sees the stream bad: an export of 549 rows to /dev/full said only
// "error writing standard output", the write that failed having been an
// earlier buffer's, not the final flush's.
class FdBuf : public std::streambuf {
 public:
  explicit FdBuf(int fd) : fd_(fd) { setp(buf_, buf_ + sizeof buf_); }
  int error() const { return error_; }

 protected:
  int_type overflow(int_type c) override {
    if (!drain()) return traits_type::eof();
    if (!traits_type::eq_int_type(c, traits_type::eof())) {
      *pptr() = traits_type::to_char_type(c);
      pbump(1);
    }
    return traits_type::not_eof(c);
  }
  int sync() override { return drain() ? 0 : -1; }

 private:
  bool drain() {
    const char* p = pbase();
    while (p < pptr()) {
      const ssize_t n = ::write(fd_, p, static_cast<size_t>(pptr() - p));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        if (!error_) error_ = n < 0 ? errno : EIO;
        setp(buf_, buf_ + sizeof buf_);  // what did not go is dropped; the stream is bad from here on
        return false;
      }
      p += n;
    }
    setp(buf_, buf_ + sizeof buf_);
    return error_ == 0;
  }

  int fd_;
  int error_ = 0;
  char buf_[1 << 16];
};

// Standard output's buffer, once install_stdout() has run; never freed, as
// std::cout may flush into it during exit.
FdBuf* g_stdout = nullptr;

std::string write_error(int err) { return err ? std::string(": ") + std::strerror(err) : ""; }
}  // namespace

void install_stdout() {
  if (g_stdout) return;
  g_stdout = new FdBuf(STDOUT_FILENO);
  std::cout.rdbuf(g_stdout);
  // A terminal sees each line as it comes, as it did through stdio.
  if (::isatty(STDOUT_FILENO)) std::cout.setf(std::ios::unitbuf);
}

std::string stdout_error() {
  errno = 0;
  if (std::cout.flush()) return "";
  return "error writing standard output" + write_error(g_stdout && g_stdout->error() ? g_stdout->error() : errno);
}

void flush_stdout() {
  if (const std::string why = stdout_error(); !why.empty()) fail_env(why);
}

mode_t new_file_mode() {
  const mode_t mask = ::umask(0);  // read it back: umask has no getter
  ::umask(mask);
  return 0666 & ~mask;
}

size_t name_max(const std::string& path) {
  const auto parent = std::filesystem::path(path).parent_path();
  const long n = ::pathconf(parent.empty() ? "." : parent.c_str(), _PC_NAME_MAX);
  return n > 0 ? static_cast<size_t>(n) : NAME_MAX;
}

std::string temp_template(const std::string& path, size_t room) {
  const std::filesystem::path p(path);
  const std::string name = p.filename().string();
  const size_t limit = name_max(path), suffix = 7;  // ".XXXXXX"
  if (name.size() + suffix + room <= limit || limit < suffix + room + 1) return path + ".XXXXXX";
  // Cut on a UTF-8 boundary (some file systems refuse other names), and where
  // the name goes on with '.', separate with '~': the template then never
  // spells the name itself, which mkstemp could otherwise create.
  size_t cut = limit - room - suffix;
  while (cut > 0 && (static_cast<unsigned char>(name[cut]) & 0xc0) == 0x80) --cut;
  const char sep = name[cut] == '.' ? '~' : '.';
  return (p.parent_path() / (name.substr(0, cut) + sep + "XXXXXX")).string();
}

namespace {
// The temporaries stage_file has made and nobody has renamed or removed yet: a
// signal (SIGINT, SIGTERM, SIGHUP) removes them before it takes its course. An
// interrupted export left its partial OUT.XXXXXX, and a report up to a hundred
// *.svg.XXXXXX, which no later run removed. Each name is a heap copy, in its
// slot before the count covers it and out of it before it is freed; the
// handler calls only unlink, signal and raise (async-signal-safe). Past
// kMaxStaged at once a temporary is not tracked (a report of that many plots).
constexpr int kMaxStaged = 4096;
char* volatile g_staged[kMaxStaged];
volatile sig_atomic_t g_staged_count = 0;

extern "C" void remove_staged_and_die(int sig) {
  remove_staged_files();
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

void track_staged(const std::string& tmp) {
  static const bool installed = (install_cleanup_handler(remove_staged_and_die), true);
  (void)installed;
  const int n = g_staged_count;
  if (n >= kMaxStaged) return;
  g_staged[n] = ::strdup(tmp.c_str());
  g_staged_count = n + 1;
}

void untrack_staged(const std::string& tmp) {
  int n = g_staged_count;
  for (int i = 0; i < n; ++i)
    if (char* name = g_staged[i]; name && tmp == name) {
      g_staged[i] = nullptr;
      std::free(name);
      break;
    }
  while (n > 0 && g_staged[n - 1] == nullptr) --n;
  g_staged_count = n;
}
}  // namespace

void install_cleanup_handler(SignalHandler handler, SignalHandler (*previous)[3]) {
  for (int i = 0; i < 3; ++i) {
    const SignalHandler before = ::signal(kCleanupSignals[i], handler);
    if (before == SIG_IGN) ::signal(kCleanupSignals[i], SIG_IGN);
    if (previous) (*previous)[i] = before;
  }
}

void remove_staged_files() noexcept {
  for (int i = 0; i < g_staged_count; ++i)
    if (const char* name = g_staged[i]) ::unlink(name);
}

void discard_staged(const std::string& tmp) {
  std::error_code ec;
  std::filesystem::remove(tmp, ec);
  untrack_staged(tmp);
}

std::string stage_file(const std::string& path, const std::function<void(std::ostream&)>& body) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const auto st = fs::symlink_status(path, ec);
  const bool exists = !ec && fs::exists(st);
  if (exists && !fs::is_regular_file(st))
    fail_usage("refusing to write " + path + ": it exists and is " +
               (fs::is_symlink(st) ? "a symbolic link (name the file it points to)" : "not a regular file"));
  struct stat old {};
  const mode_t mode = exists && ::stat(path.c_str(), &old) == 0 ? old.st_mode & 07777 : new_file_mode();
  std::string tmp = temp_template(path, 0);
  // The temporary exists from mkstemp on, and the handler removes it only once
  // it is tracked (and the first tracking installs the handler): the cleanup
  // signals wait, blocked, until it is. The cli test's interrupted exports left
  // an OUT.XXXXXX in one of three runs of the fifty-third session; this is the
  // one window found where a signal could leave one.
  sigset_t cleanup, before;
  ::sigemptyset(&cleanup);
  for (const int sig : kCleanupSignals) ::sigaddset(&cleanup, sig);
  ::pthread_sigmask(SIG_BLOCK, &cleanup, &before);
  const int fd = ::mkstemp(tmp.data());
  const int err = errno;
  if (fd >= 0) track_staged(tmp);
  ::pthread_sigmask(SIG_SETMASK, &before, nullptr);
  if (fd < 0) {
    const auto parent = std::filesystem::path(path).parent_path();
    std::error_code dir_ec;
    if (err == ENOENT && !parent.empty() && !std::filesystem::exists(parent, dir_ec))
      fail_env("cannot write " + path + ": its folder " + parent.string() + " does not exist");
    fail_env("cannot create a temporary file beside " + path + ": " + std::strerror(err));
  }
  bool fd_open = true;
  try {
    {
      // Written through mkstemp's own descriptor, which is why the mode can
      // come after: the old file's 0444 set on a name reopened for writing failed.
      FdBuf buf(fd);
      std::ostream f(&buf);
      body(f);
      if (!f.flush())
        fail_env("error writing " + tmp + write_error(buf.error()) + "; " + path + " is unchanged");
    }
    if (::fchmod(fd, mode) != 0) fail_env("cannot set the mode of " + tmp + ": " + std::strerror(errno));
    // On disk before the rename, so a crash leaves the old file or the whole new one.
    if (::fsync(fd) != 0) fail_env("cannot flush " + tmp + " to disk: " + std::strerror(errno));
    fd_open = false;
    if (::close(fd) != 0) fail_env("error writing " + tmp + ": " + std::strerror(errno));
  } catch (...) {
    if (fd_open) ::close(fd);
    discard_staged(tmp);
    throw;
  }
  return tmp;
}

void commit_file(const std::string& tmp, const std::string& path) {
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    discard_staged(tmp);
    fail_env("cannot rename " + tmp + " to " + path + ": " + ec.message());
  }
  untrack_staged(tmp);
}

void write_file_atomic(const std::string& path, const std::function<void(std::ostream&)>& body) {
  commit_file(stage_file(path, body), path);
}

}  // namespace celtune::cli
