#include "types.hpp"

#include <array>
#include <cstdio>
#include <utility>

namespace celtune {
namespace {

template <typename E, std::size_t K>
using Names = std::array<std::pair<E, std::string_view>, K>;

constexpr Names<Family, 2> kFamily{{{Family::ce, "ce"}, {Family::flce, "flce"}}};
constexpr Names<DType, 3> kDType{{{DType::bf16, "bf16"}, {DType::fp16, "fp16"}, {DType::fp32, "fp32"}}};
constexpr Names<TargetType, 2> kTarget{{{TargetType::i32, "int32"}, {TargetType::i64, "int64"}}};
constexpr Names<Reduction, 3> kReduction{
    {{Reduction::mean, "mean"}, {Reduction::sum, "sum"}, {Reduction::none, "none"}}};
constexpr Names<Mode, 2> kMode{{{Mode::forward, "fwd"}, {Mode::forward_backward, "fwdbwd"}}};

template <typename E, std::size_t K>
std::string_view name_of(const Names<E, K>& names, E e) {
  for (const auto& [v, n] : names)
    if (v == e) return n;
  return "?";
}

template <typename E, std::size_t K>
std::optional<E> parse_of(const Names<E, K>& names, std::string_view s) {
  for (const auto& [v, n] : names)
    if (n == s) return v;
  return std::nullopt;
}

}  // namespace

std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) b /= 1024, ++u;
  char buf[48];
  std::snprintf(buf, sizeof buf, u ? "%.1f %s" : "%.0f %s", b, units[u]);
  return buf;
}

std::string_view to_string(Family e) { return name_of(kFamily, e); }
std::string_view to_string(DType e) { return name_of(kDType, e); }
std::string_view to_string(TargetType e) { return name_of(kTarget, e); }
std::string_view to_string(Reduction e) { return name_of(kReduction, e); }
std::string_view to_string(Mode e) { return name_of(kMode, e); }

std::optional<Family> parse_family(std::string_view s) { return parse_of(kFamily, s); }
std::optional<DType> parse_dtype(std::string_view s) { return parse_of(kDType, s); }
std::optional<TargetType> parse_target_type(std::string_view s) {
  if (s == "i32") return TargetType::i32;
  if (s == "i64") return TargetType::i64;
  return parse_of(kTarget, s);
}
std::optional<Reduction> parse_reduction(std::string_view s) { return parse_of(kReduction, s); }
std::optional<Mode> parse_mode(std::string_view s) {
  if (s == "forward") return Mode::forward;
  if (s == "forward_backward" || s == "forward+backward") return Mode::forward_backward;
  return parse_of(kMode, s);
}

}  // namespace celtune
