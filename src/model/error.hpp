// celtune's one error policy.
//
// Everything that can go wrong outside a programming bug throws celtune::Error,
// which carries a Status. The CLI catches it once in main() and maps the status to
// its exit code; the C API (later) maps it to a status code plus a message. CUDA and
// cuBLASLt failures come through the same type (see kernels/cuda_check.hpp), so no
// caller has to know which layer failed.
#pragma once

#include <stdexcept>
#include <string>

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

}  // namespace celtune
