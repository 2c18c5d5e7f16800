// Checked integer reads from JSON that came from outside (configs, imports).
// nlohmann's get<int>() on a number like 2e120 casts a double out of range,
// which is undefined behaviour (found by fuzzing): read integers only as
// integers, and only within the target type's range.
#pragma once

#include <cmath>
#include <limits>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include <nlohmann/json.hpp>

#include "error.hpp"

namespace celtune {

template <typename T>
T json_int(const nlohmann::json& j, const char* key) {
  const nlohmann::json& v = j.at(key);
  if (!v.is_number_integer()) {
    // A whole number past 64 bits reaches here as a double (99999999999999999999
    // read "must be an integer, got 1e+20"): out of range, not a fraction.
    if (v.is_number_float()) {
      const double d = v.get<double>();
      if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) >= 0x1p63)
        fail_usage(std::string("'") + key + "' is out of range: " + v.dump().substr(0, 40));
    }
    fail_usage(std::string("'") + key + "' must be an integer, got " + v.dump().substr(0, 40));
  }
  if (v.is_number_unsigned()) {
    const auto u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<T>::max()))
      fail_usage(std::string("'") + key + "' is out of range: " + v.dump().substr(0, 40));
    return static_cast<T>(u);
  }
  const auto s = v.get<int64_t>();
  if (s < static_cast<int64_t>(std::numeric_limits<T>::min()) || s > static_cast<int64_t>(std::numeric_limits<T>::max()))
    fail_usage(std::string("'") + key + "' is out of range: " + v.dump().substr(0, 40));
  return static_cast<T>(s);
}

// nlohmann's message for people: without its "[json.exception.parse_error.101] "
// tag, which names the library's internals, and a missing key said as a field
// ("key 'record' not found" → "no 'record' field").
inline std::string json_error_text(const nlohmann::json::exception& e) {
  std::string w = e.what();
  if (w.rfind("[json.exception.", 0) == 0)
    if (const auto end = w.find("] "); end != std::string::npos) w.erase(0, end + 2);
  const std::string head = "key '", tail = "' not found";
  if (w.size() > head.size() + tail.size() && w.rfind(head, 0) == 0 &&
      w.compare(w.size() - tail.size(), tail.size(), tail) == 0)
    w = "no '" + w.substr(head.size(), w.size() - head.size() - tail.size()) + "' field";
  return w;
}

// JSON text from outside, parsed with one more check than nlohmann's: a key that
// appears twice in one object is Error(usage), where nlohmann keeps the last and
// a hand-edited record or config would silently mean something else.
// A NUL byte is refused too: nlohmann's lexer takes it for the end of input, so
// whatever followed it on an imported line was silently dropped. And so is
// nesting deeper than kMaxJsonDepth (celtune's records nest 3 deep): whatever
// walks a value recursively (dump, comparison, conversion) would overflow the
// stack at a depth the parser itself takes.
inline constexpr int kMaxJsonDepth = 32;
inline nlohmann::json parse_json_strict(const std::string& text) {
  if (text.find('\0') != std::string::npos)
    fail_usage("a NUL byte in JSON text (JSON is UTF-8 text: a UTF-16 file holds one beside every ASCII character)");
  std::vector<std::set<std::string>> open;  // the keys seen, per enclosing object
  return nlohmann::json::parse(text, [&](int depth, nlohmann::json::parse_event_t ev, nlohmann::json& v) {
    using E = nlohmann::json::parse_event_t;
    if ((ev == E::object_start || ev == E::array_start) && depth >= kMaxJsonDepth)
      fail_usage("JSON nested deeper than " + std::to_string(kMaxJsonDepth) + " levels");
    if (ev == E::object_start) open.emplace_back();
    if (ev == E::object_end && !open.empty()) open.pop_back();
    if (ev == E::key && !open.empty() && !open.back().insert(v.get<std::string>()).second)
      fail_usage("duplicate key '" + v.get<std::string>().substr(0, 40) + "'");
    return true;
  });
}

template <typename T>
T json_int_or(const nlohmann::json& j, const char* key, T fallback) {
  return j.contains(key) ? json_int<T>(j, key) : fallback;
}

// What a field of type T must be, as the errors below say it.
template <typename T>
constexpr const char* json_type_name() {
  if constexpr (std::is_same_v<T, std::string>) return "a string";
  else if constexpr (std::is_same_v<T, bool>) return "true or false";
  else if constexpr (std::is_same_v<T, std::vector<std::string>>) return "an array of strings";
  else return "a number";
}

// A field of type T (a string, a number, a bool, an array of strings) from JSON
// that came from outside. A wrong type is Error(usage) naming the field, where
// nlohmann's type_error names only the types ("type must be number, but is
// string": which of a record's forty fields?). A missing field stays nlohmann's
// out_of_range, whose message names the key.
template <typename T>
T json_field(const nlohmann::json& j, const char* key) {
  const nlohmann::json& v = j.at(key);
  try {
    return v.get<T>();
  } catch (const nlohmann::json::type_error&) {
    fail_usage(std::string("'") + key + "' must be " + json_type_name<T>() + ", got " + v.dump().substr(0, 40));
  }
}
template <typename T>
T json_field_or(const nlohmann::json& j, const char* key, T fallback) {
  return j.contains(key) ? json_field<T>(j, key) : fallback;
}

// A nested object (a record's device, problem, config, stats) read with its own
// from_json: an error inside names the object as well ("problem: 'softcap' must
// be a number, got "abc"").
template <typename T>
T json_object(const nlohmann::json& j, const char* key) {
  const nlohmann::json& v = j.at(key);
  try {
    return v.get<T>();
  } catch (const Error& e) {
    throw Error(e.status(), std::string(key) + ": " + e.what());
  } catch (const nlohmann::json::exception& e) {
    if (!v.is_object()) fail_usage(std::string("'") + key + "' must be an object, got " + v.dump().substr(0, 40));
    fail_usage(std::string(key) + ": " + json_error_text(e));
  }
}

}  // namespace celtune
