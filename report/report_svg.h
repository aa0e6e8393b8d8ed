// Small pieces of the HTML report's markup: escaping, numbers, SVG text and
// the two charts (horizontal bars, a curve over the mesh degrees).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tessera::report {

// &, <, >, " and ' as entities: safe in text and in attribute values.
std::string xml_escape(const std::string& s);
// A coordinate or a length: at most two decimals, no exponent.
std::string num(double v);
// `s` shortened with "..." to about `width` pixels of the report's 10 px font.
std::string fit_text(const std::string& s, double width);
std::string svg_text(double x, double y, const std::string& text, const std::string& cls,
                     const std::string& anchor = "start");
// before / after, 1 when after is 0.
double speedup(double before, double after);
// "1.234 ms", "56.7 us", "2.1 s".
std::string time_str(double seconds);
// "640 B", "12.3 kB", "4.5 MB".
std::string bytes_str(int64_t bytes);

struct BarGroup {
  std::string label;
  std::vector<double> values;  // one per series
};
// Horizontal bars, one group per row, one bar per series (the legend names
// them). Values in seconds.
std::string bar_chart_svg(const std::vector<BarGroup>& groups, const std::vector<std::string>& series);

struct CurvePoint {
  std::string label;  // "tp=2"
  double devices = 1;
  double seconds = 0;
  bool chosen = false;
  bool fits = true;
};
// Predicted time against the number of devices (log2 axis), the chosen
// degree marked.
std::string degree_curve_svg(const std::vector<CurvePoint>& points);

}  // namespace tessera::report
