// celtune's one error policy.
//
// Everything that can go wrong outside a programming bug throws celtune::Error,
// which carries a Status. The CLI catches it once in main() and maps the status to
// its exit code; the C API (later) maps it to a status code plus a message. CUDA and
// cuBLASLt failures come through the same type (see kernels/cuda_check.hpp), so no
// caller has to know which layer failed.
#pragma once

#include <cstdio>
#include <stdexcept>
#include <string>
#include <string_view>

namespace celtune {

enum class Status : int {
  ok = 0,
  failure = 1,      // a validation or tuning verdict failed
  usage = 2,        // the caller asked for something malformed or out of range
  environment = 3,  // no such device, CUDA error, unusable database, I/O
};

class Error : public std::runtime_error {
 public:
  Error(Status status, const std::string& message)
      : std::runtime_error(message), status_(status) {}
  Status status() const noexcept { return status_; }

 private:
  Status status_;
};

[[noreturn]] inline void fail_usage(const std::string& m) { throw Error(Status::usage, m); }
[[noreturn]] inline void fail_env(const std::string& m) { throw Error(Status::environment, m); }

// The length of the UTF-8 sequence that starts at s[i] (1–4), or 0 where none
// does (a stray continuation byte, an invalid lead, a sequence cut short).
inline size_t utf8_sequence_length(std::string_view s, size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  const size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 0;
  if (n == 0 || i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k)
    if ((static_cast<unsigned char>(s[i + k]) & 0xc0) != 0x80) return 0;
  return n;
}

// A message as it is printed: messages echo what they were given (a flag's
// value, a file's name), so bytes that are not UTF-8 and control characters
// other than newline and tab are written as \xNN, never raw to the terminal.
inline std::string printable_message(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const size_t n = utf8_sequence_length(s, i);
    if (n == 0 || ((c < 0x20 || c == 0x7f) && c != '\n' && c != '\t')) {
      char hex[5];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      out += hex, ++i;
    } else {
      out.append(s, i, n), i += n;
    }
  }
  return out;
}

}  // namespace celtune
