// The tune loop: for one problem on one device, enumerate the family's space,
// gate each candidate on correctness, time it, keep every measurement, re-measure
// the finalists interleaved, and store the best config with its provenance. The
// only writer of the database.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "db/store.hpp"
#include "kernels/backend.hpp"
#include "measure.hpp"
#include "strategy.hpp"

namespace celtune {

struct TuneOptions {
  Strategy strategy = Strategy::guided;
  size_t budget = 0;  // random: evaluations; guided: cap (0: 30% of the candidates, at least 12)
  size_t max_scratch = SIZE_MAX;
  // The budget the runtime's built-in default keeps to where this runs
  // (CELTUNE_MAX_SCRATCH, else the shipped one): the default measured first.
  size_t default_budget = kDefaultScratchBudget;
  bool force = false;  // re-measure even when the database holds a measurement
  TimingPlan plan;
  uint64_t seed = 1;
  // cuBLASLt candidates per GEMM role tried after the search (the heuristic's
  // first k); 0 or 1 keeps the heuristic's choice and the config version-free.
  int gemm_algos = 4;
  // Databases besides the one tuned into (opened read-only by the caller) whose
  // best configs for this device and problem are measured first, as the tuned
  // database's own are: see tune_problem.
  std::vector<const db::Store*> priors;
  // Told, once per row, of an earlier winner passed over because its stored
  // config breaks a rule of the model (a damaged row; see db::broken_best_note).
  // Called from the tuning thread: the caller serialises its output.
  std::function<void(const std::string&)> warn;
};

struct TuneProgress {
  size_t done = 0, total = 0;
  double best_ms = 0;
  std::string best;
};

struct TuneResult {
  Problem problem;
  KernelConfig best;
  db::Stats stats;
  double default_ms = 0, speedup = 0;
  size_t candidates = 0, evaluated = 0, reused = 0, failed = 0;
  size_t algo_evaluated = 0;  // configs with tuned cuBLASLt algorithms measured
  size_t prior = 0;           // earlier winners measured: in the grid (first) or the default
  double seconds = 0;
};

// The limits a search on this backend keeps to: max_scratch, the backend's
// scratch per config, and its check(). tune_problem enumerates under them, and
// tune's CPU-time estimate counts the same candidates.
SpaceLimits backend_limits(Backend& backend, size_t max_scratch);

const char* kernel_source_hash();
const char* celtune_version();

// Guided search measures, right after the built-in default, the configs that
// won before for this device (by name) and problem: the tuned database's best
// entry and each prior database's, whatever kernels they were tuned with. After
// a kernel change (a celtune upgrade) the old winner is the likeliest new one,
// so a small budget re-tunes well. gemm_algos are dropped (the algorithm stage
// searches them again); a config no longer in the grid is skipped, the
// default is measured anyway. A stored config that breaks a rule is not used:
// o.warn names the row and the rule.
// Throws Error(failure) when no candidate passes the gate.
TuneResult tune_problem(Backend& backend, db::Store& store, const Problem& p, const TuneOptions& o,
                        const std::function<void(const TuneProgress&)>& progress = {});

}  // namespace celtune
