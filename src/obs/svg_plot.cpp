#include "obs/svg_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

namespace ddptrain {
namespace {

constexpr double kW = 480, kH = 300, kLeft = 62, kRight = 16, kTop = 34, kBottom = 40;
const char* const kPalette[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2"};

std::string num(double v) {
  char buf[32];
  if (v != 0 && (std::fabs(v) >= 1e5 || std::fabs(v) < 1e-3))
    std::snprintf(buf, sizeof(buf), "%.2e", v);
  else
    std::snprintf(buf, sizeof(buf), "%.4g", v);
  return buf;
}

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else if (c == '&')
      out += "&amp;";
    else
      out += c;
  }
  return out;
}

std::string panel_svg(const Panel& p, double ox, double oy) {
  double x0 = std::numeric_limits<double>::infinity(), x1 = -x0, y0 = x0, y1 = -x0;
  for (const auto& l : p.lines)
    for (auto [x, y] : l.xy) {
      if (!std::isfinite(x) || !std::isfinite(y)) continue;
      x0 = std::min(x0, x), x1 = std::max(x1, x), y0 = std::min(y0, y), y1 = std::max(y1, y);
    }
  std::string s = "<g transform=\"translate(" + num(ox) + "," + num(oy) + ")\">\n";
  s += "<text x=\"" + num(kW / 2) +
       "\" y=\"20\" text-anchor=\"middle\" font-size=\"14\" font-weight=\"bold\">" + escape(p.title) +
       "</text>\n";
  const double pw = kW - kLeft - kRight, ph = kH - kTop - kBottom;
  s += "<rect x=\"" + num(kLeft) + "\" y=\"" + num(kTop) + "\" width=\"" + num(pw) + "\" height=\"" +
       num(ph) + "\" fill=\"none\" stroke=\"#999\"/>\n";
  if (!std::isfinite(x0)) {
    s += "<text x=\"" + num(kW / 2) + "\" y=\"" + num(kTop + ph / 2) +
         "\" text-anchor=\"middle\" fill=\"#999\">no data</text>\n</g>\n";
    return s;
  }
  if (x1 == x0) x1 = x0 + 1;
  if (y1 == y0) y1 = y0 + (y0 == 0 ? 1 : std::fabs(y0) * 0.1);
  auto X = [&](double x) { return kLeft + (x - x0) / (x1 - x0) * pw; };
  auto Y = [&](double y) { return kTop + ph - (y - y0) / (y1 - y0) * ph; };
  for (double yv : nice_ticks(y0, y1, 4, false)) {  // ticks at their values, and grid
    s += "<line x1=\"" + num(kLeft) + "\" x2=\"" + num(kLeft + pw) + "\" y1=\"" + num(Y(yv)) + "\" y2=\"" +
         num(Y(yv)) + "\" stroke=\"#eee\"/>\n";
    s += "<text x=\"" + num(kLeft - 4) + "\" y=\"" + num(Y(yv) + 4) +
         "\" text-anchor=\"end\" font-size=\"10\">" + num(yv) + "</text>\n";
  }
  for (double xv : nice_ticks(x0, x1, 5, true))
    s += "<text x=\"" + num(X(xv)) + "\" y=\"" + num(kTop + ph + 14) +
         "\" text-anchor=\"middle\" font-size=\"10\">" + num(xv) + "</text>\n";
  s += "<text x=\"" + num(kLeft + pw / 2) + "\" y=\"" + num(kH - 6) +
       "\" text-anchor=\"middle\" font-size=\"11\">optimizer step</text>\n";
  int row = 0;
  for (const auto& l : p.lines) {
    if (l.xy.empty()) continue;
    const char* color = kPalette[static_cast<size_t>(l.color) % (sizeof(kPalette) / sizeof(kPalette[0]))];
    std::string pts;
    for (auto [x, y] : l.xy)
      if (std::isfinite(x) && std::isfinite(y)) pts += num(X(x)) + "," + num(Y(y)) + " ";
    s += std::string("<polyline fill=\"none\" stroke=\"") + color + "\" stroke-width=\"1.6\"" +
         (l.dashed ? " stroke-dasharray=\"5,3\"" : "") + " points=\"" + pts + "\"/>\n";
    if (l.xy.size() <= 20)  // few points (per-epoch values): mark each one
      for (auto [x, y] : l.xy)
        if (std::isfinite(x) && std::isfinite(y))
          s += "<circle cx=\"" + num(X(x)) + "\" cy=\"" + num(Y(y)) + "\" r=\"3\" fill=\"" + color + "\"/>\n";
    const double ly = kTop + 12 + 14 * row++;  // legend, top right
    s += std::string("<line x1=\"") + num(kLeft + pw - 150) + "\" x2=\"" + num(kLeft + pw - 130) +
         "\" y1=\"" + num(ly - 4) + "\" y2=\"" + num(ly - 4) + "\" stroke=\"" + color + "\"" +
         (l.dashed ? " stroke-dasharray=\"5,3\"" : "") + "/>\n";
    s += "<text x=\"" + num(kLeft + pw - 126) + "\" y=\"" + num(ly) + "\" font-size=\"10\">" +
         escape(l.label) + "</text>\n";
  }
  return s + "</g>\n";
}

}  // namespace

std::vector<double> nice_ticks(double lo, double hi, int target, bool integer_axis) {
  if (!(hi > lo)) return {lo};
  const double raw = (hi - lo) / std::max(target, 1);
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double norm = raw / mag;
  double step = (norm < 1.5 ? 1 : norm < 3 ? 2 : norm < 7 ? 5 : 10) * mag;
  if (integer_axis) step = std::max(step, 1.0);
  std::vector<double> ticks;
  const double first = std::ceil(lo / step - 1e-9) * step;
  for (int i = 0; first + i * step <= hi + step * 1e-9; ++i) {
    const double v = first + i * step;
    ticks.push_back(std::fabs(v) < step * 1e-9 ? 0.0 : v);  // no "-0"
  }
  return ticks;
}

std::string render_svg(const std::vector<Panel>& panels, int columns) {
  const int rows =
      static_cast<int>((panels.size() + static_cast<size_t>(columns) - 1) / static_cast<size_t>(columns));
  std::string s =
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" +
      num(kW * columns) + "\" height=\"" + num(kH * rows) + "\" font-family=\"sans-serif\">\n";
  s += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  for (size_t i = 0; i < panels.size(); ++i)
    s += panel_svg(panels[i], kW * static_cast<double>(i % static_cast<size_t>(columns)),
                   kH * static_cast<double>(i / static_cast<size_t>(columns)));
  return s + "</svg>\n";
}

}  // namespace ddptrain
