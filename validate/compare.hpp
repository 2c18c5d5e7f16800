// The one comparison helper: validate, tune's correctness gate, bench and the
// tests all measure error the same way.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace celtune {

struct Mismatch {
  int64_t index;
  double got, ref;
};

struct ErrorStats {
  int64_t count = 0;
  double max_abs = 0;     // max |got − ref|
  double max_rel = 0;     // max |got − ref| / max(|ref|, tiny)
  double rel_l2 = 0;      // ‖got − ref‖₂ / ‖ref‖₂ (‖ref‖₂ = 0: ‖got‖₂)
  double ref_max = 0;     // max |ref|, the scale for absolute tolerances
  int64_t mismatches = 0; // elements outside atol + rtol·|ref|
  int64_t nonfinite = 0;  // NaN/Inf in got where ref is finite (never written, or blown up)
  std::vector<Mismatch> first;  // the first few mismatches, in index order
};

// atol and rtol decide what counts as a mismatch; the statistics do not depend on them.
template <typename Got>
ErrorStats compare(const Got* got, const double* ref, size_t n, double atol, double rtol, size_t keep = 5);

void to_json(nlohmann::json&, const ErrorStats&);

}  // namespace celtune
