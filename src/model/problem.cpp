#include "problem.hpp"

#include <charconv>
#include <cfloat>
#include <cmath>
#include <sstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "error.hpp"
#include "json_get.hpp"

namespace celtune {

std::string format_double(double v) {
  char buf[64];
  // A value that is exactly a float (the C API's options arrive as floats) is
  // said as the float's shortest decimal, the number its caller wrote: -0.1f
  // reads "-0.1", not "-0.10000000149011612"; read as a float, it gives v back.
  const bool is_float = std::fabs(v) <= FLT_MAX && static_cast<double>(static_cast<float>(v)) == v;
  auto r = is_float ? std::to_chars(buf, buf + sizeof buf, static_cast<float>(v)) : std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

namespace {

double parse_double_field(const std::string& s, const std::string& what) {
  double v = 0;
  auto r = std::from_chars(s.data(), s.data() + s.size(), v);
  if (r.ec != std::errc() || r.ptr != s.data() + s.size())
    fail_usage("problem key: bad number '" + s + "' for " + what);
  return v;
}

int64_t parse_int_field(const std::string& s, const std::string& what) {
  int64_t v = 0;
  auto r = std::from_chars(s.data(), s.data() + s.size(), v);
  if (r.ec != std::errc() || r.ptr != s.data() + s.size())
    fail_usage("problem key: bad integer '" + s + "' for " + what);
  return v;
}

// Returns the rest of `field` after `prefix`, or fails.
std::string after(const std::string& field, const std::string& prefix) {
  if (field.rfind(prefix, 0) != 0)
    fail_usage("problem key: expected '" + prefix + "…', found '" + field + "'");
  return field.substr(prefix.size());
}

template <typename E>
E parse_enum(std::optional<E> v, const std::string& s, const char* what) {
  if (!v) fail_usage(std::string("unknown ") + what + " '" + s + "'");
  return *v;
}

}  // namespace

double canonical_option(double v) {
  // −0 is 0: `--softcap=-0` must name the entry `--softcap 0` does.
  if (v == 0.0) return 0.0;
  // The kernels and the C API carry loss options as float; the CLI parses
  // doubles. Both must name the same stored entry, so an option is significant
  // to float precision and keyed by the shortest decimal of that float:
  // 0.1 (double) and 0.1f (0.10000000149011612 as a double) both key as "0.1".
  const auto f = static_cast<float>(v);
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, f);
  double d = 0;
  std::from_chars(buf, r.ptr, d);
  return d;
}

int64_t checked_tensor_elements(int64_t rows, int64_t cols, const char* what) {
  // One size rule for every path (CLI, C API, import): each tensor a problem
  // implies, counted as fp32 (the widest any path holds: references, dW
  // accumulation), stays within kMaxTensorBytes. Checked multiplication, so a
  // shape like 2^62 x 500 is refused instead of wrapping into a small product.
  int64_t elements = 0, bytes = 0;
  if (__builtin_mul_overflow(rows, cols, &elements) || __builtin_mul_overflow(elements, int64_t{4}, &bytes) ||
      bytes > kMaxTensorBytes)
    fail_usage(std::string("problem too large: ") + what + " = " + std::to_string(rows) + " x " +
               std::to_string(cols) + " elements exceeds the limit of 2^46 elements (2^48 bytes in fp32) per tensor");
  return elements;
}

void Problem::validate() const {
  if (tokens <= 0) fail_usage("tokens (N) must be positive, got " + std::to_string(tokens));
  if (vocab <= 0) fail_usage("vocab (V) must be positive, got " + std::to_string(vocab));
  if (family == Family::flce && hidden <= 0)
    fail_usage("hidden (H) must be positive for flce, got " + std::to_string(hidden));
  if (family == Family::ce && hidden != 0) fail_usage("hidden (H) must be 0 for the ce family");
  if (family == Family::ce && bias) fail_usage("bias applies to flce only");
  checked_tensor_elements(tokens, vocab, "N x V (logits)");
  if (family == Family::flce) {
    checked_tensor_elements(tokens, hidden, "N x H (inputs)");
    checked_tensor_elements(vocab, hidden, "V x H (weights)");
  }
  const auto& o = loss;
  // The kernels take the options as float: beyond FLT_MAX they would be inf, and
  // below FLT_MIN a positive value is a float denormal or 0: --softcap 1e-46
  // keyed as "cap0" (no softcap) while the fp64 reference applied it, so its
  // failed measurements blocked the plain problem's next tune.
  auto tiny = [](double v) { return v > 0.0 && v < FLT_MIN; };
  if (!(o.label_smoothing >= 0.0 && o.label_smoothing <= 1.0) || tiny(o.label_smoothing))
    fail_usage("label smoothing must be in [0, 1] (positive values from 1.2e-38), got " + format_double(o.label_smoothing));
  if (!(o.softcap >= 0.0) || !(o.softcap <= FLT_MAX) || tiny(o.softcap))
    fail_usage("softcap must be 0 (off) or a positive number from 1.2e-38 up to 3.4e38, got " +
               format_double(o.softcap));
  if (!(o.z_loss >= 0.0) || !(o.z_loss <= kMaxZLoss) || tiny(o.z_loss))
    fail_usage("z-loss scale must be 0 or from 1.2e-38 up to " + format_double(kMaxZLoss) + ", got " +
               format_double(o.z_loss));
  if (o.ignore_index >= 0 && o.ignore_index < vocab)
    fail_usage("ignore_index " + std::to_string(o.ignore_index) +
               " lies inside [0, V): it would hide real targets");
  if (target_type == TargetType::i32 &&
      (vocab > INT32_MAX || o.ignore_index < INT32_MIN || o.ignore_index > INT32_MAX))
    fail_usage("int32 targets cannot hold this vocab or ignore_index");
}

std::string Problem::key() const {
  // Appends and to_chars, no streams: the runtime builds this key on every call
  // to look up its cached config, so it must cost well under a microsecond.
  std::string k;
  k.reserve(96);
  char buf[32];
  auto num = [&](int64_t v) { k.append(buf, std::to_chars(buf, buf + sizeof buf, v).ptr); };
  auto dbl = [&](double v) { k.append(buf, std::to_chars(buf, buf + sizeof buf, canonical_option(v)).ptr); };
  k += to_string(family), k += ":N", num(tokens), k += ":H", num(hidden), k += ":V", num(vocab);
  k += ':', k += to_string(dtype), k += ':', k += to_string(target_type), k += ":ign", num(loss.ignore_index);
  k += ':', k += to_string(loss.reduction), k += ":ls", dbl(loss.label_smoothing), k += ":cap", dbl(loss.softcap);
  k += ":z", dbl(loss.z_loss), k += bias ? ":bias:" : ":nobias:", k += to_string(mode);
  return k;
}

Problem Problem::from_key(const std::string& key) {
  std::vector<std::string> f;
  std::stringstream ss(key);
  for (std::string part; std::getline(ss, part, ':');) f.push_back(part);
  if (f.size() != 13) fail_usage("problem key '" + key + "' does not have 13 fields");
  Problem p;
  p.family = parse_enum(parse_family(f[0]), f[0], "family");
  p.tokens = parse_int_field(after(f[1], "N"), "N");
  p.hidden = parse_int_field(after(f[2], "H"), "H");
  p.vocab = parse_int_field(after(f[3], "V"), "V");
  p.dtype = parse_enum(parse_dtype(f[4]), f[4], "dtype");
  p.target_type = parse_enum(parse_target_type(f[5]), f[5], "target type");
  p.loss.ignore_index = parse_int_field(after(f[6], "ign"), "ignore_index");
  p.loss.reduction = parse_enum(parse_reduction(f[7]), f[7], "reduction");
  p.loss.label_smoothing = parse_double_field(after(f[8], "ls"), "label smoothing");
  p.loss.softcap = parse_double_field(after(f[9], "cap"), "softcap");
  p.loss.z_loss = parse_double_field(after(f[10], "z"), "z-loss");
  if (f[11] != "bias" && f[11] != "nobias") fail_usage("problem key: bad bias field '" + f[11] + "'");
  p.bias = f[11] == "bias";
  p.mode = parse_enum(parse_mode(f[12]), f[12], "mode");
  if (p.key() != key) fail_usage("problem key '" + key + "' is not in canonical form");
  return p;
}

void to_json(nlohmann::json& j, const Problem& p) {
  j = nlohmann::json{{"family", to_string(p.family)},
                     {"tokens", p.tokens},
                     {"hidden", p.hidden},
                     {"vocab", p.vocab},
                     {"dtype", to_string(p.dtype)},
                     {"target_type", to_string(p.target_type)},
                     {"ignore_index", p.loss.ignore_index},
                     {"reduction", to_string(p.loss.reduction)},
                     {"label_smoothing", p.loss.label_smoothing},
                     {"softcap", p.loss.softcap},
                     {"z_loss", p.loss.z_loss},
                     {"bias", p.bias},
                     {"mode", to_string(p.mode)},
                     {"key", p.key()}};
}

void from_json(const nlohmann::json& j, Problem& p) {
  auto str = [&](const char* k) { return json_field<std::string>(j, k); };
  p.family = parse_enum(parse_family(str("family")), str("family"), "family");
  p.tokens = json_int<int64_t>(j, "tokens");
  p.hidden = json_int<int64_t>(j, "hidden");
  p.vocab = json_int<int64_t>(j, "vocab");
  p.dtype = parse_enum(parse_dtype(str("dtype")), str("dtype"), "dtype");
  p.target_type = parse_enum(parse_target_type(str("target_type")), str("target_type"), "target type");
  p.loss.ignore_index = json_int<int64_t>(j, "ignore_index");
  p.loss.reduction = parse_enum(parse_reduction(str("reduction")), str("reduction"), "reduction");
  p.loss.label_smoothing = json_field<double>(j, "label_smoothing");
  p.loss.softcap = json_field<double>(j, "softcap");
  p.loss.z_loss = json_field<double>(j, "z_loss");
  p.bias = json_field<bool>(j, "bias");
  p.mode = parse_enum(parse_mode(str("mode")), str("mode"), "mode");
}

}  // namespace celtune
