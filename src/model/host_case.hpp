// One set of random inputs for a problem, held on the host, plus the outputs any
// implementation (fp64 reference, CPU backend, GPU backend) produces from them.
//
// Inputs are floats whose values are exactly representable in the problem's dtype,
// so every implementation sees the same numbers whatever its storage type.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "problem.hpp"

namespace celtune {

// How the targets and magnitudes of a case are drawn; validate's case matrix
// uses these to reach the edges (all ignored, targets at 0 and V−1, |z| > 100).
struct CaseSpec {
  uint64_t seed = 1;
  double logit_scale = 4.0;      // typical |logit|; > 100 for the large-logit cases
  double ignore_fraction = 0.1;  // share of tokens set to ignore_index
  bool edge_targets = true;      // force targets 0 and V−1 onto some tokens
  // > 0: every counted token's target logit sits this many nats above the
  // log-sum-exp of the row's other logits, so p of the target is 1 − ~e^−margin.
  // A kernel that rounds p to 16 bits before subtracting the target's 1
  // (flce-math.md's pitfall) then writes a dZ of 0 or ±2^−8 there, not ≈ −e^−margin.
  double confident_margin = 0.0;
};

struct HostCase {
  std::vector<float> logits;   // [N,V] (ce family)
  std::vector<float> x;        // [N,H] (flce)
  std::vector<float> w;        // [V,H] (flce)
  std::vector<float> b;        // [V]   (flce with bias)
  std::vector<int64_t> targets;  // [N]
  float grad_scale = 1.0f;       // upstream g for mean/sum
  std::vector<float> grad_tokens;  // upstream g_i for reduction none [N]
  int64_t n_valid = 0;
};

// Error(environment) with the sizes when p's host copies (inputs in fp32,
// targets, upstream gradients) would take more than a quarter of this machine's
// memory. make_case checks it; a command checks its cases first, so a shape too
// big for the machine is the environment's verdict, not a failed case.
void require_host_memory(const Problem& p);
HostCase make_case(const Problem& p, const CaseSpec& spec);

// Outputs in float; which vectors are filled depends on family and mode.
// grad_logits is dZ (ce); dx, dw, db are the flce gradients. Values of the
// gradient outputs are representable in the problem's dtype.
struct HostOutputs {
  float loss = 0.0f;              // mean/sum: the reduced loss; none: Σ ℓ_i (for display)
  std::vector<float> token_loss;  // [N]
  std::vector<float> lse;         // [N]
  std::vector<float> grad_logits; // [N,V]
  std::vector<float> dx, dw, db;
};

// The fp64 reference's outputs.
struct RefOutputs {
  double loss = 0.0;
  std::vector<double> token_loss, lse, grad_logits, dx, dw, db;
};

// The per-token scale c_i of flce-math.md (0 for ignored tokens).
double token_grad_scale(const Problem& p, const HostCase& c, int64_t i);

// Throws Error(usage) naming the first target outside [0, V) that is not
// ignore_index: the references refuse such a case as the kernels do.
void check_targets(const Problem& p, const HostCase& c);

// A small, fast, portable generator so a printed seed replays the same inputs on
// any platform (std:: distributions are implementation-defined).
class Rng {
 public:
  explicit Rng(uint64_t seed) : s_(seed * 0x9E3779B97F4A7C15ull + 0xD1B54A32D192ED03ull) {}
  uint64_t next() {  // splitmix64
    uint64_t z = (s_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }  // [0,1)
  double normal();
  int64_t below(int64_t n) { return static_cast<int64_t>(next() % static_cast<uint64_t>(n)); }

 private:
  uint64_t s_;
};

}  // namespace celtune
