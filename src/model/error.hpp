// celtune's one error policy.
//
// Everything that can go wrong outside a programming bug throws celtune::Error,
// which carries a Status. The CLI catches it once in main() and maps the status to
// its exit code; the C API (later) maps it to a status code plus a message. CUDA and
// cuBLASLt failures come through the same type (see kernels/cuda_check.hpp), so no
// caller has to know which layer failed.
#pragma once

#include <algorithm>
#include <cstdio>
#include <ostream>
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
// does (a stray continuation byte, an invalid lead, a sequence cut short, an
// overlong form, a surrogate, a code point past U+10FFFF).
inline size_t utf8_sequence_length(std::string_view s, size_t i) {
  auto at = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const unsigned char c = at(0);
  const size_t n = c < 0x80 ? 1 : (c >= 0xc2 && c <= 0xdf) ? 2 : (c >> 4) == 0xe ? 3 : (c >= 0xf0 && c <= 0xf4) ? 4 : 0;
  if (n == 0 || i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k)
    if ((at(k) & 0xc0) != 0x80) return 0;
  // Where the lead byte alone allows them, the second byte's range rules out
  // overlong forms (E0, F0), surrogates (ED) and code points past U+10FFFF (F4).
  if ((c == 0xe0 && at(1) < 0xa0) || (c == 0xed && at(1) > 0x9f) || (c == 0xf0 && at(1) < 0x90) ||
      (c == 0xf4 && at(1) > 0x8f))
    return 0;
  return n;
}

// Whether the n-byte sequence at s[i] is a control character: C0 (below 0x20),
// DEL, or C1 (U+0080–U+009F, which terminals take as CSI, OSC, … as well), or
// an invisible format character that reorders or hides text on a terminal:
// the bidirectional marks, embeddings, overrides and isolates (U+061C,
// U+200E–U+200F, U+202A–U+202E, U+2066–U+2069), the zero-width ones
// (U+200B–U+200D, U+2060–U+2064) and U+FEFF. A device name holding U+202E was
// imported and printed raw, reversing the rest of db list's row (a helper's
// probe, sixty-third session).
inline bool is_control(std::string_view s, size_t i, size_t n) {
  const auto c = static_cast<unsigned char>(s[i]);
  const auto at = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
  if (n == 1) return c < 0x20 || c == 0x7f;
  if (n == 2) return (c == 0xc2 && at(1) < 0xa0) || (c == 0xd8 && at(1) == 0x9c);
  if (n == 3 && c == 0xe2 && at(1) == 0x80) return (at(2) >= 0x8b && at(2) <= 0x8f) || (at(2) >= 0xaa && at(2) <= 0xae);
  if (n == 3 && c == 0xe2 && at(1) == 0x81) return (at(2) >= 0xa0 && at(2) <= 0xa4) || (at(2) >= 0xa6 && at(2) <= 0xa9);
  return n == 3 && c == 0xef && at(1) == 0xbb && at(2) == 0xbf;
}

// s with each byte sequence that is not UTF-8, and each control character, as
// one `c`: text salvaged where it must stay text (export, SVG).
inline std::string unprintable_as(std::string_view s, char c) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    const size_t n = utf8_sequence_length(s, i);
    if (n == 0 || is_control(s, i, n)) {
      out += c, i += n ? n : 1;
    } else {
      out.append(s, i, n), i += n;
    }
  }
  return out;
}

// A message as it is printed: messages echo what they were given (a flag's
// value, a file's name, a database's text), so bytes that are not UTF-8 and
// control characters other than newline and tab are written as \xNN, never raw
// to the terminal. keep_layout = false escapes newline and tab too: for text
// that must stay on its line (a table's cell, a name quoted in a message; a
// device name holding a newline split db list's rows).
inline std::string printable_message(std::string_view s, bool keep_layout = true) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    const size_t n = utf8_sequence_length(s, i);
    const bool layout = keep_layout && (s[i] == '\n' || s[i] == '\t');
    if (n == 0 || (is_control(s, i, n) && !layout)) {
      for (size_t k = 0; k < std::max<size_t>(n, 1); ++k) {
        char hex[5];
        std::snprintf(hex, sizeof hex, "\\x%02x", static_cast<unsigned char>(s[i + k]));
        out += hex;
      }
      i += std::max<size_t>(n, 1);
    } else {
      out.append(s, i, n), i += n;
    }
  }
  return out;
}

// A warning as every layer prints it: its text made printable (it may quote a
// database's or a file's contents).
inline void write_warning(std::ostream& o, std::string_view m) {
  o << "celtune: warning: " << printable_message(m) << '\n';
}

}  // namespace celtune
