// The problem options every subcommand that names a problem shares (validate,
// bench, tune, lookup): one definition, so flags mean the same everywhere.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "model/problem.hpp"

namespace celtune::cli {

struct ProblemArgs {
  std::string family = "flce";
  std::string shape;   // "N,H,V"
  std::string tokens;  // list "1024,2048" or range "1024..32768" (powers of two)
  // Unset unless given: --hidden 0 with a preset once read as "not given" and
  // silently took the preset's H.
  std::optional<int64_t> hidden, vocab;
  std::string model;   // preset
  std::vector<std::string> dtypes;
  std::string target_type = "int64";
  std::string ignore_index = "-100";  // parsed by us: CLI11 saturates integers out of range
  std::string reduction = "mean";
  double label_smoothing = 0, z_loss = 0;
  // Empty: not given, so the model preset's softcap (else 0) applies; a given
  // --softcap, 0 included, wins over the preset. (A NaN sentinel let
  // `--softcap nan` pass as "not given".)
  std::optional<double> softcap;
  bool bias = false;
  std::vector<std::string> modes;
};

// A whole number from `min` to `max`, checked as text: CLI11 clamped
// 99999999999999999999 to the largest value and took "-1" into unsigned types,
// so what ran was not what the user typed; an int64 option takes max = 2^63 − 1
// (--hidden 18446744073709551615 was reported back as 9223372036854775807), an
// option with a range its bounds, so the message states the range that holds.
// `name` is the help text's placeholder.
CLI::Validator whole_number(const std::string& name, uint64_t min = 0, uint64_t max = UINT64_MAX);
// Refuses a real number whose text is out of a double's range (1e400, 1e-400,
// which strtod reads as inf and 0); other text passes to the option's checks.
CLI::Validator representable_real();

// Minutes `ops` operations take on this machine's CPU, at ~1e9 operations a
// second a core (measured here: the CPU backend and the fp64 reference at
// N·V·H = 1e9), and a sentence saying so. validate and bench use it to refuse
// hours of CPU work that nobody asked for.
struct CpuWork {
  double minutes;
  std::string what;
};
CpuWork cpu_work(double ops);
// bench and tune with no GPU found fall back to the CPU backend, which at a
// model's shape runs for hours: past ten minutes of `ops` that is refused (a
// usage error saying how to ask for it) unless the user named the CPU (`asked`),
// and noted on stderr when they did (unless `quiet`). `doing` names the work
// ("timing these problems"), `verb` what --device cpu lets run ("time"),
// `bound` qualifies the estimate ("at least " or "").
void limit_cpu_work(double ops, bool asked, const std::string& doing, const std::string& verb,
                    const std::string& bound, bool quiet);
// Operations of one call of the kernels on problem p: ~20 an element of the
// logits (the CE work), and for flce 2·N·H·V more forward, 6·N·H·V with the
// backward (the GEMMs).
double call_ops(const Problem& p);

// mode_default: what the subcommand does without --mode, for the help text.
void add_problem_options(CLI::App* app, ProblemArgs& a, const char* mode_default = "fwdbwd");

// Whether the user named a problem at all (otherwise validate runs its matrix).
bool names_problem(const ProblemArgs& a);

// Every problem the arguments describe (tokens × dtypes × modes), validated.
// Throws Error(usage) with the offending flag named.
std::vector<Problem> build_problems(const ProblemArgs& a);

// "1024..32768" → 1024, 2048, …, 32768; "1,5,9" → 1, 5, 9.
std::vector<int64_t> parse_tokens(const std::string& s);

struct ModelPreset {
  const char* name;
  int64_t hidden, vocab;
  double softcap;
};
const std::vector<ModelPreset>& model_presets();

}  // namespace celtune::cli
