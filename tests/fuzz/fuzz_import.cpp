// libFuzzer target: `celtune db import` on arbitrary bytes. Either the lines are
// stored (and export reads them back) or celtune::Error says why; anything else
// (a crash, another exception, a sanitizer report) is a bug. Each input runs in
// one transaction that is rolled back, so the database stays empty and every
// execution costs the same.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <string>

#include "db/store.hpp"
#include "model/error.hpp"

namespace {
struct Rollback {};
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // A file, as every name is to Store (":memory:" too: it used to land in the
  // working directory, the source tree's root under meson test): where fuzz.sh
  // puts its builds.
  static const char* const path = std::getenv("CELTUNE_FUZZ_DB");
  static celtune::db::Store store(path ? path : "fuzz_import.sqlite", celtune::db::Access::read_write);
  std::istringstream in(std::string(reinterpret_cast<const char*>(data), size));
  try {
    store.write([&] {
      celtune::db::import_jsonl(store, in, "abc123");
      std::ostringstream out;
      celtune::db::export_jsonl(store, out);  // what was stored must read back
      // Nothing impossible gets in (issue 12): every stored record passes the
      // checks import applies, or the fuzzer found a way around them.
      try {
        for (const auto& b : store.best_entries()) celtune::db::check_record(b);
        for (const auto& m : store.measurements()) celtune::db::check_record(m);
      } catch (const celtune::Error&) {
        __builtin_trap();
      }
      throw Rollback{};
    });
  } catch (const Rollback&) {
  } catch (const celtune::Error&) {
  }
  return 0;
}
