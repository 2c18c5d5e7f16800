// A small SVG plot writer for celtune report: line charts over categorical x
// positions and bar charts, with axes, ticks, labels and a legend. Enough for a
// person to read; no dependency for two kinds of chart.
#pragma once

#include <string>
#include <vector>

namespace celtune::cli {

struct Series {
  std::string name;
  std::vector<double> y;  // one per x category; NaN for a gap
};

std::string line_chart(const std::string& title, const std::string& x_label, const std::string& y_label,
                       const std::vector<std::string>& x_categories, const std::vector<Series>& series);
std::string bar_chart(const std::string& title, const std::string& y_label, const std::vector<std::string>& labels,
                      const std::vector<double>& values, double reference_line);

}  // namespace celtune::cli
