// Output for every subcommand: an aligned text table for people, and the same
// content as JSON (--json) or CSV (--csv) for programs.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

namespace celtune::cli {

class Table {
 public:
  explicit Table(std::vector<std::string> header) : header_(std::move(header)) {}
  void add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  void print(std::ostream& out) const;
  void print_csv(std::ostream& out) const;
  bool empty() const { return rows_.empty(); }

 private:
  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;
};

std::string fmt(const char* format, double v);  // printf-style for one number
std::string human_bytes(double bytes);

}  // namespace celtune::cli
