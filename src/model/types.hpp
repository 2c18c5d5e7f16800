// Enumerations of the problem's vocabulary: dtypes, reductions, modes, families.
// Types, not ints or strings, so a wrong combination does not compile; the string
// forms are what the CLI, the JSON and the database key use.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace celtune {

enum class Family { ce, flce };
enum class DType { bf16, fp16, fp32 };
enum class TargetType { i32, i64 };
enum class Reduction { mean, sum, none };
enum class Mode { forward, forward_backward };

// "512 B", "1.5 KiB", "255.8 MiB": sizes as messages and tables print them.
std::string human_bytes(double bytes);

std::string_view to_string(Family);
std::string_view to_string(DType);
std::string_view to_string(TargetType);
std::string_view to_string(Reduction);
std::string_view to_string(Mode);

// Parsers return nullopt for unknown names; callers turn that into a usage error
// with the list of accepted names.
std::optional<Family> parse_family(std::string_view);
std::optional<DType> parse_dtype(std::string_view);
std::optional<TargetType> parse_target_type(std::string_view);
std::optional<Reduction> parse_reduction(std::string_view);
std::optional<Mode> parse_mode(std::string_view);

inline int dtype_bytes(DType t) { return t == DType::fp32 ? 4 : 2; }
inline int target_bytes(TargetType t) { return t == TargetType::i32 ? 4 : 8; }

}  // namespace celtune
