#include "problem_args.hpp"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <set>
#include <sstream>
#include <thread>

#include "model/error.hpp"

namespace celtune::cli {

const std::vector<ModelPreset>& model_presets() {
  // Classifier shapes of the models people train with large vocabularies.
  static const std::vector<ModelPreset> p{
      {"llama3-8b", 4096, 128256, 0.0},  {"llama3-70b", 8192, 128256, 0.0}, {"qwen2.5-7b", 3584, 152064, 0.0},
      {"gemma2-2b", 2304, 256000, 30.0}, {"mistral-7b", 4096, 32768, 0.0},
  };
  return p;
}

namespace {

int64_t parse_i64(const std::string& s, const char* what) {
  int64_t v = 0;
  auto r = std::from_chars(s.data(), s.data() + s.size(), v);
  if (r.ec == std::errc::result_out_of_range)
    fail_usage(std::string(what) + " '" + s + "' is out of range (a 64-bit integer)");
  if (s.empty() || r.ec != std::errc() || r.ptr != s.data() + s.size())
    fail_usage(std::string("malformed ") + what + " '" + s + "': expected an integer");
  return v;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string part; std::getline(ss, part, sep);) out.push_back(part);
  if (!s.empty() && s.back() == sep) out.push_back("");
  return out;
}

// A value that lists names, comma-separated (--dtype bf16,fp16). CLI11's own
// delimiter dropped empty items, so "bf16,,fp16" and "fwd," were taken as
// "bf16,fp16" and "fwd"; here every item must be one of `names`.
CLI::Validator comma_list_of(const std::vector<std::string>& names) {
  std::string all;
  for (const auto& n : names) all += (all.empty() ? "" : ", ") + n;
  return CLI::Validator(
      [names, all](const std::string& s) -> std::string {
        const auto items = split(s, ',');
        const bool empty_item =
            s.empty() || std::any_of(items.begin(), items.end(), [](const std::string& x) { return x.empty(); });
        if (empty_item) return "an empty item in '" + s + "': expected " + all + ", comma-separated";
        for (const auto& x : items)
          if (std::find(names.begin(), names.end(), x) == names.end())
            return "'" + x + "' is not one of " + all;
        return "";
      },
      "{" + all + "}[,…]");
}

}  // namespace

std::vector<int64_t> parse_tokens(const std::string& s) {
  std::vector<int64_t> out;
  const auto dots = s.find("..");
  if (dots != std::string::npos) {
    const int64_t lo = parse_i64(s.substr(0, dots), "token range start");
    const int64_t hi = parse_i64(s.substr(dots + 2), "token range end");
    if (lo <= 0 || hi < lo) fail_usage("token range '" + s + "' must be positive and ascending");
    // Doubling stops before it could pass hi: n·2 overflowed int64 for hi ≥ 2^62
    // and the range never ended.
    for (int64_t n = lo;; n *= 2) {
      out.push_back(n);
      if (n > hi / 2) break;
    }
    return out;
  }
  for (const auto& part : split(s, ',')) {
    // "5," read "malformed token count ''", naming nothing; --dtype's list says this.
    if (part.empty()) fail_usage("an empty item in token list '" + s + "': expected counts, comma-separated");
    const int64_t n = parse_i64(part, "token count");
    if (n <= 0) fail_usage("token count must be positive, got " + part);
    out.push_back(n);
  }
  if (out.empty()) fail_usage("empty token list");
  return out;
}

CLI::Validator whole_number(const std::string& name, uint64_t min, uint64_t max) {
  return CLI::Validator(
      [min, max](std::string& v) {
        uint64_t x = 0;
        const auto r = std::from_chars(v.data(), v.data() + v.size(), x);
        if (v.empty() || r.ec != std::errc() || r.ptr != v.data() + v.size() || x < min || x > max)
          return "expected a whole number from " + std::to_string(min) + " to " + std::to_string(max) + ", got '" + v +
                 "'";
        // Rewritten in canonical decimal: CLI11's own conversion reads a leading
        // 0 as octal and 0x as hex (--hidden 010 tuned H = 8, --vocab 0500 V = 320).
        v = std::to_string(x);
        return std::string();
      },
      name);
}

CLI::Validator representable_real() {
  return CLI::Validator(
      [](std::string& v) -> std::string {
        char* end = nullptr;
        errno = 0;
        const double x = std::strtod(v.c_str(), &end);
        // Decimal, as every whole-number option is: strtod took 0x1p-1 as 0.5
        // where --vocab 0x1f4 is refused.
        if (v.find_first_of("xX") != std::string::npos) return "expected a decimal number, got " + v;
        // Text that is no number is left to the option's own conversion and check.
        if (v.empty() || *end != '\0' || errno != ERANGE) return {};
        // 1e-400 read as 0 turned a softcap or a z-loss off without a word, and
        // 1e400 was refused as "inf": both are out of range as written.
        if (x == 0.0 || std::isinf(x)) return v + " is out of the range of a double";
        return {};  // subnormal: a number, which the problem's own range check judges
      },
      "");
}

CpuWork cpu_work(double ops) {
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  const double minutes = ops / (1e9 * cores) / 60.0;
  // snprintf, not output.hpp's fmt: the fuzz targets link this file alone.
  char text[160];
  std::snprintf(text, sizeof text, "about %.3g operations on this machine's CPU (%u cores), roughly %.0f minutes", ops,
                cores, minutes);
  return {minutes, text};
}

void limit_cpu_work(double ops, bool asked, const std::string& doing, const std::string& verb,
                    const std::string& bound, bool quiet) {
  const CpuWork work = cpu_work(ops);
  if (work.minutes <= 10.0) return;
  if (!asked)
    fail_usage("no CUDA GPU was found, and " + doing + " on the CPU needs " + bound + work.what + "; pass --device cpu to " +
               verb + " them here anyway, or a smaller --tokens or --shape");
  if (!quiet) std::cerr << "note: " << doing << " needs " << bound << work.what << '\n';
}

double call_ops(const Problem& p) {
  const double nv = static_cast<double>(p.tokens) * static_cast<double>(p.vocab);
  // The CE work over the logits (~20 an element) is flce's too: at small H it is
  // most of the call (H = 1, V = 65536, N = 8192 ran 2 min 19 s on the CPU where
  // the GEMMs alone counted 1e9 operations).
  const double ce = 20.0 * nv;
  if (p.family == Family::ce) return ce;
  return (p.mode == Mode::forward ? 2.0 : 6.0) * nv * static_cast<double>(p.hidden) + ce;
}

void add_problem_options(CLI::App* app, ProblemArgs& a, const char* mode_default) {
  app->add_option("--family", a.family, "Kernel family: flce (fused linear CE) or ce (CE on logits)")
      ->check(CLI::IsMember({"flce", "ce"}))
      ->capture_default_str();
  app->add_option("--shape", a.shape,
                  "Problem shape N,H,V (tokens, hidden, vocab; H is 0 for ce); not with --model, --tokens, --hidden "
                  "or --vocab");
  app->add_option("--tokens", a.tokens, "Token counts: a list (4096,8192) or a range A..B doubling from A (1024..32768)");
  app->add_option("--hidden", a.hidden, "Hidden size H")->transform(whole_number("H", 0, INT64_MAX));
  app->add_option("--vocab", a.vocab, "Vocabulary size V")->transform(whole_number("V", 0, INT64_MAX));
  std::string names;
  for (const auto& m : model_presets()) names += std::string(names.empty() ? "" : ", ") + m.name;
  app->add_option("--model", a.model,
                  "Model preset giving H, V and softcap: " + names + " (--hidden, --vocab, --softcap override it)");
  app->add_option("--dtype", a.dtypes, "Input dtype(s): bf16, fp16, fp32 (default bf16)")
      ->check(comma_list_of({"bf16", "fp16", "fp32"}));
  app->add_option("--target-dtype", a.target_type, "Target index dtype: int32 or int64")
      ->check(CLI::IsMember({"int32", "int64"}))
      ->capture_default_str();
  app->add_option("--ignore-index", a.ignore_index, "Target value whose token is ignored (an int64)")
      ->capture_default_str();
  app->add_option("--reduction", a.reduction, "Loss reduction: mean, sum or none")
      ->check(CLI::IsMember({"mean", "sum", "none"}))
      ->capture_default_str();
  // CLI11's Range said "Value abc not in range 0.000000 to 1.000000" of text
  // that is no number, and printed the bounds to six places.
  app->add_option("--label-smoothing", a.label_smoothing, "Label smoothing ε in [0, 1]")
      ->check(representable_real())
      ->check(CLI::Validator(
          [](const std::string& s) -> std::string {
            char* end = nullptr;
            const double v = std::strtod(s.c_str(), &end);
            return !s.empty() && *end == '\0' && v >= 0.0 && v <= 1.0 ? "" : "expected a number in [0, 1], got " + s;
          },
          "FLOAT in [0, 1]"))
      ->capture_default_str();
  // Range checks live in Problem::validate, whose messages name the value as
  // given (CLI11's NonNegativeNumber printed DBL_MAX in 300 digits).
  app->add_option("--softcap", a.softcap,
                  "Logit softcap s (0 = off): z ↦ s·tanh(z/s); default: the model preset's, else 0")
      ->check(representable_real());
  app->add_option("--z-loss", a.z_loss, "z-loss scale λ, 0 or up to 1e6 (adds λ·LSE² per token)")
      ->check(representable_real())
      ->capture_default_str();
  app->add_flag("--bias", a.bias, "Add a bias b [V] to the logits (flce)");
  app->add_option("--mode", a.modes,
                  std::string("fwd (forward only) and/or fwdbwd (forward+backward); default ") + mode_default)
      ->check(comma_list_of({"fwd", "fwdbwd"}));
}

bool names_problem(const ProblemArgs& a) {
  return !a.shape.empty() || !a.model.empty() || !a.tokens.empty() || a.hidden.has_value() || a.vocab.has_value();
}

namespace {
// Two ways of saying the same thing must not silently pick one.
void refuse_conflicts(const ProblemArgs& a) {
  if (a.shape.empty()) return;
  if (!a.model.empty()) fail_usage("--shape and --model both give the shape; use one");
  if (!a.tokens.empty()) fail_usage("--shape and --tokens both give the token count; use one");
  if (a.hidden.has_value() || a.vocab.has_value())
    fail_usage("--shape and --hidden/--vocab both give the shape; use one");
}
}  // namespace

std::vector<Problem> build_problems(const ProblemArgs& a) {
  refuse_conflicts(a);
  Problem base;
  base.family = *parse_family(a.family);
  std::vector<int64_t> tokens;
  if (!a.model.empty()) {
    const ModelPreset* m = nullptr;
    for (const auto& p : model_presets())
      if (a.model == p.name) m = &p;
    if (!m) {
      std::string names;
      for (const auto& p : model_presets()) names += std::string(names.empty() ? "" : ", ") + p.name;
      fail_usage("unknown model preset '" + a.model + "' (known: " + names + ")");
    }
    // ce takes the logits, not the hidden states: a preset gives it V only.
    base.hidden = base.family == Family::ce ? 0 : m->hidden, base.vocab = m->vocab, base.loss.softcap = m->softcap;
  }
  if (!a.shape.empty()) {
    const auto f = split(a.shape, ',');
    if (f.size() != 3) fail_usage("malformed --shape '" + a.shape + "': expected N,H,V");
    // The whole shape named: "malformed H in --shape ''" did not say which.
    const std::string in = " in --shape " + a.shape;
    tokens.push_back(parse_i64(f[0], ("N" + in).c_str()));
    base.hidden = parse_i64(f[1], ("H" + in).c_str());
    base.vocab = parse_i64(f[2], ("V" + in).c_str());
  }
  if (a.hidden) base.hidden = *a.hidden;
  if (a.vocab) base.vocab = *a.vocab;
  if (!a.tokens.empty()) tokens = parse_tokens(a.tokens);
  if (tokens.empty()) fail_usage("no token count: give --tokens or --shape N,H,V");
  if (a.vocab && *a.vocab <= 0) fail_usage("--vocab (V) must be positive, got " + std::to_string(*a.vocab));
  if (a.shape.empty() && base.vocab <= 0) fail_usage("no vocabulary size: give --vocab, --shape or --model");
  // flce needs H too: "hidden (H) must be positive, got 0" named a value
  // nobody gave.
  if (a.shape.empty() && !a.hidden && base.family == Family::flce && base.hidden <= 0)
    fail_usage("no hidden size: give --hidden, --shape or --model (or --family ce for logits)");
  base.target_type = *parse_target_type(a.target_type);
  base.loss.ignore_index = parse_i64(a.ignore_index, "--ignore-index");
  base.loss.reduction = *parse_reduction(a.reduction);
  base.loss.label_smoothing = a.label_smoothing;
  if (a.softcap) base.loss.softcap = *a.softcap;
  base.loss.z_loss = a.z_loss;
  base.bias = a.bias;
  std::vector<DType> dtypes;
  for (const auto& list : a.dtypes)
    for (const auto& d : split(list, ',')) dtypes.push_back(*parse_dtype(d));
  if (dtypes.empty()) dtypes.push_back(DType::bf16);
  std::vector<Mode> modes;
  for (const auto& list : a.modes)
    for (const auto& m : split(list, ',')) modes.push_back(*parse_mode(m));
  if (modes.empty()) modes.push_back(Mode::forward_backward);
  // A value given twice (--dtype bf16,bf16) names one problem: tuned once, and
  // --shard counts it once.
  std::vector<Problem> out;
  std::set<std::string> seen;
  for (int64_t n : tokens)
    for (DType d : dtypes)
      for (Mode m : modes) {
        Problem p = base;
        p.tokens = n, p.dtype = d, p.mode = m;
        p.validate();
        if (seen.insert(p.key()).second) out.push_back(p);
      }
  return out;
}

}  // namespace celtune::cli
