#include "svg.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "model/error.hpp"

namespace celtune::cli {
namespace {

constexpr int kW = 900, kH = 520, kLeft = 90, kRight = 200, kTop = 60, kBottom = 120;
const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"};

std::string esc(const std::string& s) {
  // An XML file is UTF-8 without control characters (but tab and newline) or
  // U+FFFE and U+FFFF: a device name holding ESC, a byte 0xff or U+FFFF made
  // the file unreadable to XML tools. Once salvaged the text is UTF-8, so
  // EF BF BE and EF BF BF can only be those two.
  const std::string t = unprintable_as(s, '?');
  std::string o;
  for (size_t i = 0; i < t.size(); ++i) {
    const char c = t[i];
    if (c == '<') o += "&lt;";
    else if (c == '>') o += "&gt;";
    else if (c == '&') o += "&amp;";
    else if (t.compare(i, 2, "\xef\xbf") == 0 && i + 2 < t.size() && static_cast<unsigned char>(t[i + 2]) >= 0xbe)
      o += '?', i += 2;
    else o += c;
  }
  return o;
}

// A bar's value: two decimals, the precision a speedup is read at ("%.3g"
// printed 1.0 as "1"); from 1000 up, three digits and an exponent, to stay short.
std::string num(double v) {
  char b[32];
  std::snprintf(b, sizeof b, v >= 1000 ? "%.3g" : "%.2f", v);
  return b;
}

// Axis range with a little headroom, "nice" tick steps, and the tick count.
struct Axis {
  double lo, hi, step;
  int ticks;  // lo + i·step for i in [0, ticks]
};

Axis nice_axis(double lo, double hi) {
  // Values closer than a thousandth of their size plot as one level: two
  // medians one ulp apart gave a tick step that no longer moved the tick
  // (v + step == v), and the tick loop ran until memory ran out.
  const double mag_v = std::max(std::fabs(lo), std::fabs(hi));
  const double min_span = mag_v > 0 ? 1e-3 * mag_v : 1.0;
  if (!(hi - lo >= min_span)) hi = lo + min_span;
  const double raw = (hi - lo) / 5;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0})
    if (raw <= m * mag) {
      step = m * mag;
      break;
    }
  const double a = std::floor(lo / step) * step, b = std::ceil(hi / step) * step;
  return {a, b, step, static_cast<int>(std::lround((b - a) / step))};
}

// A tick's label with the decimals its step needs: "%.3g" (and "%.0f" from
// 100) printed the ticks 162.2, 162.4, ... as "162" each.
std::string tick_label(double v, double step) {
  int decimals = static_cast<int>(std::max(0.0, -std::floor(std::log10(step) + 1e-9)));
  const double in_units = step * std::pow(10.0, decimals);  // 2.5 needs one decimal more
  if (std::fabs(in_units - std::round(in_units)) > 1e-6) ++decimals;
  char b[64];
  std::snprintf(b, sizeof b, "%.*f", std::min(decimals, 15), std::fabs(v) < step * 1e-9 ? 0.0 : v);
  return b;
}

// The plot area: the canvas less its margins (a bar chart's canvas grows with
// its bars and their labels).
struct Canvas {
  int w = kW, h = kH, bottom = kBottom;
  int plot_w() const { return w - kLeft - kRight; }
  int plot_h() const { return h - kTop - bottom; }
};

void frame(std::ostringstream& o, const Canvas& c, const std::string& title, const std::string& y_label,
           const Axis& ax) {
  o << "<svg xmlns='http://www.w3.org/2000/svg' width='" << c.w << "' height='" << c.h
    << "' font-family='DejaVu Sans, Arial, sans-serif' font-size='13'>\n"
    << "<rect width='100%' height='100%' fill='white'/>\n"
    << "<text x='" << c.w / 2 << "' y='30' text-anchor='middle' font-size='17' font-weight='bold'>" << esc(title)
    << "</text>\n";
  const int ph = c.plot_h();
  for (int i = 0; i <= ax.ticks; ++i) {
    const double v = ax.lo + i * ax.step;
    const double y = kTop + ph * (1 - (v - ax.lo) / (ax.hi - ax.lo));
    o << "<line x1='" << kLeft << "' x2='" << c.w - kRight << "' y1='" << y << "' y2='" << y
      << "' stroke='#e5e5e5'/>\n<text x='" << kLeft - 8 << "' y='" << y + 4 << "' text-anchor='end'>"
      << tick_label(v, ax.step) << "</text>\n";
  }
  o << "<line x1='" << kLeft << "' x2='" << kLeft << "' y1='" << kTop << "' y2='" << c.h - c.bottom
    << "' stroke='black'/>\n<line x1='" << kLeft << "' x2='" << c.w - kRight << "' y1='" << c.h - c.bottom << "' y2='"
    << c.h - c.bottom << "' stroke='black'/>\n"
    << "<text transform='translate(22," << kTop + ph / 2 << ") rotate(-90)' text-anchor='middle'>" << esc(y_label)
    << "</text>\n";
}

}  // namespace

std::string line_chart(const std::string& title, const std::string& x_label, const std::string& y_label,
                       const std::vector<std::string>& xs, const std::vector<Series>& series) {
  double lo = INFINITY, hi = -INFINITY;
  for (const auto& s : series)
    for (double v : s.y)
      if (std::isfinite(v)) lo = std::min(lo, v), hi = std::max(hi, v);
  if (!std::isfinite(lo)) lo = 0, hi = 1;
  const Axis ax = nice_axis(std::max(0.0, lo - 0.05 * (hi - lo)), hi + 0.05 * (hi - lo));
  std::ostringstream o;
  const Canvas c;
  frame(o, c, title, y_label, ax);
  const int pw = c.plot_w(), ph = c.plot_h();
  auto X = [&](size_t i) { return kLeft + pw * (xs.size() == 1 ? 0.5 : (0.05 + 0.9 * double(i) / double(xs.size() - 1))); };
  auto Y = [&](double v) { return kTop + ph * (1 - (v - ax.lo) / (ax.hi - ax.lo)); };
  for (size_t i = 0; i < xs.size(); ++i)
    o << "<text x='" << X(i) << "' y='" << c.h - c.bottom + 20 << "' text-anchor='middle'>" << esc(xs[i]) << "</text>\n";
  o << "<text x='" << kLeft + pw / 2 << "' y='" << c.h - c.bottom + 48 << "' text-anchor='middle'>" << esc(x_label)
    << "</text>\n";
  for (size_t s = 0; s < series.size(); ++s) {
    const char* col = kColors[s % 8];
    std::string path;
    for (size_t i = 0; i < series[s].y.size() && i < xs.size(); ++i) {
      const double v = series[s].y[i];
      if (!std::isfinite(v)) continue;
      path += (path.empty() ? "M" : " L") + std::to_string(X(i)) + "," + std::to_string(Y(v));
      o << "<circle cx='" << X(i) << "' cy='" << Y(v) << "' r='4' fill='" << col << "'/>\n";
    }
    if (!path.empty()) o << "<path d='" << path << "' fill='none' stroke='" << col << "' stroke-width='2'/>\n";
    const int ly = kTop + 10 + 22 * static_cast<int>(s);
    o << "<rect x='" << c.w - kRight + 20 << "' y='" << ly - 9 << "' width='14' height='4' fill='" << col
      << "'/><text x='" << c.w - kRight + 40 << "' y='" << ly - 3 << "'>" << esc(series[s].name) << "</text>\n";
  }
  o << "</svg>\n";
  return o.str();
}

std::string bar_chart(const std::string& title, const std::string& y_label, const std::vector<std::string>& labels,
                      const std::vector<double>& values, double reference_line) {
  double hi = reference_line;
  for (double v : values) hi = std::max(hi, v);
  const Axis ax = nice_axis(0, hi * 1.1);
  // At least kMinSlot pixels a bar: the labels, 60° from the axis and 11 px
  // high, stand kMinSlot·sin 60° apart; a fixed width had 120 bars' labels
  // 5 px apart, over each other, and the longest ran off the bottom.
  constexpr double kMinSlot = 18, kLabelCharPx = 6.7, kSin60 = 0.866;
  size_t longest = 0;  // characters: UTF-8 lead bytes
  for (const auto& l : labels)
    longest = std::max<size_t>(longest, std::count_if(l.begin(), l.end(), [](char ch) { return (ch & 0xc0) != 0x80; }));
  // In double, capped, then int: a canvas past 10^7 pixels is no picture anyway.
  auto px = [](double v) { return static_cast<int>(std::min(std::ceil(v), 1e7)); };
  Canvas c;
  c.w = std::max(kW, kLeft + kRight + px(kMinSlot * double(values.size())));
  c.bottom = std::max(kBottom, 14 + px(kLabelCharPx * kSin60 * double(longest)) + 16);
  c.h = kH - kBottom + c.bottom;
  std::ostringstream o;
  frame(o, c, title, y_label, ax);
  const int pw = c.plot_w(), ph = c.plot_h();
  auto Y = [&](double v) { return kTop + ph * (1 - (v - ax.lo) / (ax.hi - ax.lo)); };
  const double slot = double(pw) / std::max<size_t>(values.size(), 1);
  // A value above its bar, across it where the bar is wide enough, else along it.
  const bool upright = slot >= 40;
  for (size_t i = 0; i < values.size(); ++i) {
    const double x = kLeft + slot * double(i) + slot * 0.15, w = slot * 0.7;
    o << "<rect x='" << x << "' y='" << Y(values[i]) << "' width='" << w << "' height='" << Y(0) - Y(values[i])
      << "' fill='" << (values[i] >= reference_line ? "#2ca02c" : "#d62728") << "'/>\n";
    if (upright)
      o << "<text x='" << x + w / 2 << "' y='" << Y(values[i]) - 5 << "' text-anchor='middle'>";
    else
      o << "<text transform='translate(" << x + w / 2 + 4 << "," << Y(values[i]) - 5
        << ") rotate(-90)' font-size='11'>";
    o << num(values[i]) << "×</text>\n"
      << "<text transform='translate(" << x + w / 2 << "," << c.h - c.bottom + 14 << ") rotate(60)' font-size='11'>"
      << esc(labels[i]) << "</text>\n";
  }
  o << "<line x1='" << kLeft << "' x2='" << c.w - kRight << "' y1='" << Y(reference_line) << "' y2='"
    << Y(reference_line) << "' stroke='black' stroke-dasharray='6,4'/>\n<text x='" << c.w - kRight + 6 << "' y='"
    << Y(reference_line) + 4 << "'>default</text>\n</svg>\n";
  return o.str();
}

}  // namespace celtune::cli
