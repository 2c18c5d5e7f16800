// A problem is one call of a kernel family: its shape, dtypes and loss options.
// Everything that changes which config is fastest, or whether a config is valid,
// belongs here; its key() is what the database indexes on.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "types.hpp"

namespace celtune {

// The loss options of flce-math.md, with PyTorch's defaults.
struct LossOptions {
  int64_t ignore_index = -100;
  Reduction reduction = Reduction::mean;
  double label_smoothing = 0.0;  // ε in [0, 1]
  double softcap = 0.0;          // s > 0, or 0 for off
  double z_loss = 0.0;           // λ = 0 or in [FLT_MIN, kMaxZLoss]

  bool operator==(const LossOptions&) const = default;
};

// The largest z-loss scale λ a problem may take. The kernels form the
// gradient's factor 1 + 2λ·LSE in fp32: at λ near FLT_MAX it overflowed for any
// LSE above 1, and 0·inf made NaN of gradients whose exact value is finite
// (`--z-loss 3.4e38`). Up to 1e6 it stays finite for every |LSE| < 1.7e32, and
// published runs use 1e-4.
constexpr double kMaxZLoss = 1e6;

struct Problem {
  Family family = Family::flce;
  int64_t tokens = 0;  // N
  int64_t hidden = 0;  // H (0 for the ce family, which receives logits)
  int64_t vocab = 0;   // V
  DType dtype = DType::bf16;
  TargetType target_type = TargetType::i64;
  LossOptions loss;
  bool bias = false;  // flce only
  Mode mode = Mode::forward_backward;

  bool operator==(const Problem&) const = default;

  // Throws Error(usage) naming the first thing wrong. Shapes are checked here for
  // what every backend needs; a backend adds its own limits (alignment) on top.
  void validate() const;

  // Stable textual key, e.g.
  //   flce:N4096:H4096:V128256:bf16:int64:ign-100:mean:ls0:cap0:z0:nobias:fwdbwd
  // Loss options print as canonical_option(v), the shortest decimal of the float
  // they are computed with, so the CLI's doubles and the C API's floats key the
  // same problem alike, and key → problem → key is the identity. Compare problems
  // by key where one side may come from the C API. Changing this format
  // invalidates every stored database.
  std::string key() const;
  static Problem from_key(const std::string& key);

  // The same problem at another token count (the tuner's correctness gate and the
  // runtime's nearest-shape lookup both need this).
  Problem with_tokens(int64_t n) const {
    Problem p = *this;
    p.tokens = n;
    return p;
  }
};

void to_json(nlohmann::json&, const Problem&);
void from_json(const nlohmann::json&, Problem&);

std::string format_double(double v);  // for messages: shortest decimal, a float's where v is exactly one

// A loss option as the problem key spells it: rounded to float (the precision
// the kernels use), then read back from that float's shortest decimal.
double canonical_option(double v);

// The largest tensor a problem may imply (as fp32): 2^48 bytes, the virtual
// address space of x86-64 and CUDA's unified addressing. Past it no allocation
// can succeed and, further out, element counts overflow int64.
constexpr int64_t kMaxTensorBytes = int64_t{1} << 48;
static_assert(kMaxTensorBytes <= (int64_t{1} << 62) / 16,
              "sums of a few legal tensors' byte counts (scratch, workspaces) cannot overflow int64");
// rows x cols, or Error(usage) naming `what` and the limit when a tensor of that
// many fp32 elements would exceed kMaxTensorBytes (overflow included).
int64_t checked_tensor_elements(int64_t rows, int64_t cols, const char* what);

}  // namespace celtune
