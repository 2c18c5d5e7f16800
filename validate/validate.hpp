// Validation: run a backend on a case and judge each output against the truth.
//
// The truth is the fp64 reference. The yardstick is a plain low-precision path:
// the unfused one (logits rounded to the input dtype, as PyTorch eager computes
// them) and, for flce judged against fp64, the kernel-rounding one (the rounding
// points of celtune's kernels: x·w rounded before the bias joins in fp32, fp32
// sums). A kernel passes an output when its error is no worse than either path's
// error plus a small margin, and within an absolute bound for the dtype that is
// never tighter than that path's own error (the criterion of Apple's Cut
// Cross-Entropy tests). Failing that, an output passes where its error beyond
// the reach of an fp32 LSE does (the kernels' L = m + log d is one fp32 number,
// so a confident token's loss and gradient are only as good as L's last bits).
// NaN or Inf where the truth is finite fails.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
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

// The plain paths an output can be judged against (OutputVerdict::baseline_path).
inline constexpr const char* kUnfusedPath = "unfused";                  // x·w + b rounded once, fp64 sums
inline constexpr const char* kKernelRoundingPath = "kernel-rounding";  // x·w rounded, + b in fp32, fp32 sums

struct OutputVerdict {
  std::string name;  // loss, token_loss, lse, dz, dx, dw, db
  ErrorStats kernel, baseline;
  std::string baseline_path = kUnfusedPath;  // the path `baseline` measured
  // `kernel` measured the error left beyond an fp32 LSE's reach (each element's
  // error shrunk by what an LSE formed in fp32 moves it: validate.cpp's
  // lse_reach); kernel_raw then holds the error itself
  bool beyond_lse_reach = false;
  ErrorStats kernel_raw;
  bool pass = false;
  std::string why;  // the failed criterion, empty on pass
};

struct ValidationCase {
  std::string name;
  Problem problem;
  KernelConfig config;
  CaseSpec spec;
};

// Which reference is the truth. fp64 (CPU) is exact but costs N·V·H multiply-adds
// in double; the GPU reference (kernels/reference/gpu.hpp, fp32) judges shapes
// beyond that. automatic picks the GPU reference when a GPU is present and the
// fp64 reference would do more than kFp64Budget operations.
enum class Truth { automatic, fp64, gpu };
inline constexpr double kFp64Budget = 0x1p33;  // about two seconds on 16 cores
double fp64_cost(const Problem& p);
// Whether `choice` judges p by the GPU reference (else fp64 on the CPU).
bool gpu_truth(const Problem& p, Truth choice, bool have_gpu);
Truth parse_truth(std::string_view s);  // "auto", "fp64", "gpu"; Error(usage) otherwise

struct CaseResult {
  ValidationCase vcase;
  std::string truth;  // "fp64" or "gpu-fp32": what the outputs were judged against
  // With the GPU reference: its own check against fp64 at a small shape with the
  // same options (empty when it was not needed, or "pass").
  std::string reference_check;
  std::vector<OutputVerdict> outputs;
  bool deterministic = true;
  bool pass = false;
  std::string error;  // set when the backend refused or failed to run the case
  double seconds = 0;
};

// Runs the backend twice (determinism) and judges each output.
CaseResult validate_case(Backend& backend, const ValidationCase& vc, Truth truth = Truth::automatic);

// The GPU reference against fp64 at a small shape with p's options: every output
// within fp32 accuracy. Empty string on pass, else the reason. validate runs it
// before trusting the GPU reference with a shape fp64 cannot reach.
std::string check_gpu_reference(const Problem& p, const CaseSpec& spec, int ordinal);

// The default matrix: each family × dtype × option set, shapes that do not
// divide by the block and chunk sizes, one and two passes, a single token, all
// tokens ignored, targets 0 and V−1, large logits, combined options. With
// gpu_cases, also a flce case whose one tile holds N·V > 2^31 logits (64-bit
// indexing), judged against the GPU reference: too large for the CPU backend.
std::vector<ValidationCase> default_matrix(uint64_t seed, bool gpu_cases = false);

// The same config and loss options at a shape small enough for the fp64
// reference, keeping the code paths the config takes at the full shape: one pass
// or two (v_chunk kept when it is narrower than V), one row chunk or several
// (dW accumulation), the tile width, threads and the fused variant. The tuner's
// correctness gate and validate --all-configs / --from-db use it.
ValidationCase reduced_case(const Problem& p, const KernelConfig& c, uint64_t seed);

void to_json(nlohmann::json&, const CaseResult&);

}  // namespace celtune
