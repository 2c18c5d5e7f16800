#include "output.hpp"

#include <algorithm>
#include <cstdio>
#include <ostream>

namespace celtune::cli {

void Table::print(std::ostream& out) const {
  std::vector<size_t> w(header_.size(), 0);
  auto widen = [&](const std::vector<std::string>& r) {
    for (size_t i = 0; i < r.size() && i < w.size(); ++i) w[i] = std::max(w[i], r[i].size());
  };
  widen(header_);
  for (const auto& r : rows_) widen(r);
  auto line = [&](const std::vector<std::string>& r) {
    for (size_t i = 0; i < w.size(); ++i) {
      const std::string cell = i < r.size() ? r[i] : "";
      out << cell;
      if (i + 1 < w.size()) out << std::string(w[i] - cell.size() + 2, ' ');
    }
    out << '\n';
  };
  line(header_);
  size_t total = 0;
  for (size_t x : w) total += x + 2;
  out << std::string(total > 2 ? total - 2 : 0, '-') << '\n';
  for (const auto& r : rows_) line(r);
}

void Table::print_csv(std::ostream& out) const {
  auto line = [&](const std::vector<std::string>& r) {
    for (size_t i = 0; i < r.size(); ++i) {
      const bool quote = r[i].find_first_of(",\"\n") != std::string::npos;
      if (i) out << ',';
      if (!quote) {
        out << r[i];
        continue;
      }
      out << '"';
      for (char c : r[i]) out << (c == '"' ? "\"\"" : std::string(1, c));
      out << '"';
    }
    out << '\n';
  };
  line(header_);
  for (const auto& r : rows_) line(r);
}

std::string fmt(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) b /= 1024, ++u;
  return fmt(u ? "%.1f " : "%.0f ", b) + units[u];
}

}  // namespace celtune::cli
