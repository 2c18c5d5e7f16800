// Validation: run a backend on a case and judge each output against the truth.
//
// The truth is the fp64 reference. The yardstick is the unfused low-precision
// path (logits rounded to the input dtype, as PyTorch eager computes them): a
// kernel passes an output when its error is no worse than that path's error plus
// a small margin, and within an absolute bound for the dtype (the criterion of
// Apple's Cut Cross-Entropy tests). NaN or Inf where the truth is finite fails.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "compare.hpp"
#include "kernels/backend.hpp"
#include "model/config.hpp"
#include "model/host_case.hpp"
#include "model/problem.hpp"

namespace celtune {

// Tolerances of one dtype, with the reasoning in validate.cpp.
struct Tolerance {
  double baseline_factor;  // kernel error may be this multiple of the baseline's …
  double margin;           // … plus this (relative L2)
  double max_margin;       // max abs: 2 × the baseline's worst plus this × max|ref|
  double bound;            // and never above this relative L2
  double rtol;             // per-element, for counting mismatches
};
Tolerance tolerance_for(DType t);

struct OutputVerdict {
  std::string name;  // loss, token_loss, lse, dz, dx, dw, db
  ErrorStats kernel, baseline;
  bool pass = false;
  std::string why;  // the failed criterion, empty on pass
};

struct ValidationCase {
  std::string name;
  Problem problem;
  KernelConfig config;
  CaseSpec spec;
};

struct CaseResult {
  ValidationCase vcase;
  std::vector<OutputVerdict> outputs;
  bool deterministic = true;
  bool pass = false;
  std::string error;  // set when the backend refused or failed to run the case
  double seconds = 0;
};

// Runs the backend twice (determinism) and judges each output.
CaseResult validate_case(Backend& backend, const ValidationCase& vc);

// The default matrix: each family × dtype × option set, shapes that do not
// divide by the block and chunk sizes, one and two passes, a single token, all
// tokens ignored, targets 0 and V−1, large logits, combined options.
std::vector<ValidationCase> default_matrix(uint64_t seed);

// The same config and loss options at a shape small enough for the fp64
// reference, keeping the code paths the config takes at the full shape: one pass
// or two (v_chunk kept when it is narrower than V), one row chunk or several
// (dW accumulation), the tile width, threads and the fused variant. The tuner's
// correctness gate and validate --all-configs / --from-db use it.
ValidationCase reduced_case(const Problem& p, const KernelConfig& c, uint64_t seed);

void to_json(nlohmann::json&, const CaseResult&);

}  // namespace celtune
