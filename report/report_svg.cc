#include "report/report_svg.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

namespace tessera::report {

double speedup(double before, double after) { return after > 0 ? before / after : 1.0; }

std::string xml_escape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", std::isfinite(v) ? v : 0.0);
  std::string s = buf;
  while (s.back() == '0') s.pop_back();
  if (s.back() == '.') s.pop_back();
  return s == "-0" ? "0" : s;
}

std::string fit_text(const std::string& s, double width) {
  // The report's sans-serif at 10 px averages under 6 px a character.
  size_t max = static_cast<size_t>(std::max(4.0, width / 5.9));
  return s.size() <= max ? s : s.substr(0, max - 3) + "...";
}

std::string svg_text(double x, double y, const std::string& text, const std::string& cls, const std::string& anchor) {
  std::ostringstream os;
  os << "<text class=\"" << cls << "\" x=\"" << num(x) << "\" y=\"" << num(y) << "\"";
  if (anchor != "start") os << " text-anchor=\"" << anchor << "\"";
  os << ">" << xml_escape(text) << "</text>";
  return os.str();
}

std::string time_str(double s) {
  char buf[32];
  if (s >= 1)
    std::snprintf(buf, sizeof buf, "%.3g s", s);
  else if (s >= 1e-3)
    std::snprintf(buf, sizeof buf, "%.3g ms", s * 1e3);
  else
    std::snprintf(buf, sizeof buf, "%.3g us", s * 1e6);
  return buf;
}

std::string bytes_str(int64_t b) {
  char buf[32];
  const auto v = static_cast<double>(b);
  if (b < 1000)
    std::snprintf(buf, sizeof buf, "%lld B", static_cast<long long>(b));
  else
    std::snprintf(buf, sizeof buf, b >= 1000000 ? "%.1f MB" : "%.1f kB", b >= 1000000 ? v / 1e6 : v / 1e3);
  return buf;
}

std::string bar_chart_svg(const std::vector<BarGroup>& groups, const std::vector<std::string>& series) {
  const double label_w = 170, bar_max = 560, bar_h = 11, value_w = 90;
  const double group_h = static_cast<double>(series.size()) * (bar_h + 2) + 8;
  double top = 0;
  for (const BarGroup& g : groups)
    for (double v : g.values) top = std::max(top, v);
  const double legend_h = 22;
  const double width = label_w + bar_max + value_w + 20;
  const double height = legend_h + static_cast<double>(groups.size()) * group_h + 8;
  std::ostringstream os;
  os << "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"chart\" width=\"" << num(width) << "\" height=\""
     << num(height) << "\" viewBox=\"0 0 " << num(width) << " " << num(height) << "\">\n";
  for (size_t k = 0; k < series.size(); ++k) {
    double x = label_w + static_cast<double>(k) * 200;
    os << "<rect class=\"series" << k << "\" x=\"" << num(x) << "\" y=\"5\" width=\"12\" height=\"10\"/>"
       << svg_text(x + 16, 14, series[k], "legend") << "\n";
  }
  for (size_t i = 0; i < groups.size(); ++i) {
    double y = legend_h + static_cast<double>(i) * group_h;
    os << svg_text(label_w - 8, y + group_h / 2 + 2, fit_text(groups[i].label, label_w - 10), "bar-label", "end")
       << "\n";
    for (size_t k = 0; k < groups[i].values.size(); ++k) {
      double v = groups[i].values[k];
      double w = top > 0 ? bar_max * v / top : 0;
      double by = y + 4 + static_cast<double>(k) * (bar_h + 2);
      os << "<rect class=\"series" << k << "\" x=\"" << num(label_w) << "\" y=\"" << num(by) << "\" width=\""
         << num(std::max(w, v > 0 ? 1.0 : 0.0)) << "\" height=\"" << num(bar_h) << "\"><title>"
         << xml_escape(groups[i].label + ", " + series[k] + ": " + time_str(v)) << "</title></rect>"
         << svg_text(label_w + w + 4, by + bar_h - 2, time_str(v), "bar-value") << "\n";
    }
  }
  os << "</svg>\n";
  return os.str();
}

std::string degree_curve_svg(const std::vector<CurvePoint>& points) {
  const double w = 600, h = 260, left = 70, right = 110, top = 24, bottom = 44;
  double ymax = 0, xmax = 1;
  for (const CurvePoint& p : points) ymax = std::max(ymax, p.seconds), xmax = std::max(xmax, p.devices);
  if (!(ymax > 0)) ymax = 1;
  // log2 of the devices from 1 to the largest; one degree alone in the middle.
  const double lx = std::log2(xmax);
  auto X = [&](double d) {
    return lx > 0 ? left + (w - left - right) * std::log2(std::max(1.0, d)) / lx : left + (w - left - right) / 2;
  };
  auto Y = [&](double s) { return top + (h - top - bottom) * (1 - s / (ymax * 1.1)); };
  std::ostringstream os;
  os << "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"chart\" width=\"" << num(w) << "\" height=\"" << num(h)
     << "\" viewBox=\"0 0 " << num(w) << " " << num(h) << "\">\n";
  os << "<path class=\"axis\" d=\"M" << num(left) << " " << num(top) << " V" << num(h - bottom) << " H"
     << num(w - 20) << "\"/>\n";
  for (int k = 0; k <= 4; ++k) {
    double s = ymax * 1.1 * k / 4;
    os << "<path class=\"grid\" d=\"M" << num(left) << " " << num(Y(s)) << " H" << num(w - 20) << "\"/>"
       << svg_text(left - 6, Y(s) + 3, time_str(s), "axis-label", "end") << "\n";
  }
  std::string line;
  for (const CurvePoint& p : points)
    line += (line.empty() ? "M" : " L") + num(X(p.devices)) + " " + num(Y(p.seconds));
  if (!line.empty()) os << "<path class=\"curve\" d=\"" << line << "\"/>\n";
  for (const CurvePoint& p : points) {
    os << "<g class=\"point" << (p.chosen ? " chosen" : "") << (p.fits ? "" : " no-fit") << "\"><title>"
       << xml_escape(p.label + ": " + time_str(p.seconds) + (p.fits ? "" : " (does not fit in memory)") +
                     (p.chosen ? " (chosen)" : ""))
       << "</title><circle cx=\"" << num(X(p.devices)) << "\" cy=\"" << num(Y(p.seconds)) << "\" r=\""
       << (p.chosen ? 6 : 4) << "\"/></g>"
       << svg_text(X(p.devices), h - bottom + 16, p.label, "axis-label", "middle")
       << svg_text(X(p.devices) + 8, Y(p.seconds) - 9, time_str(p.seconds) + (p.chosen ? " (chosen)" : ""),
                   "point-label")
       << "\n";
  }
  os << svg_text(left + (w - left - right) / 2, h - 8, "devices (tp degree)", "axis-title", "middle") << "\n";
  os << "</svg>\n";
  return os.str();
}

}  // namespace tessera::report
