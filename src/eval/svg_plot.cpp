#include "eval/svg_plot.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/error.h"

namespace nibble::eval {
namespace {

constexpr const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                                   "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};

std::string tick_label(double v, double step) {
  const int decimals = step >= 1 ? 0 : std::min(6, static_cast<int>(std::ceil(-std::log10(step))));
  if (std::fabs(v) < step * 1e-9) v = 0.0;
  return fmt::format("{:.{}f}", v, decimals);
}

}  // namespace

std::string xml_escape(const std::string& text) {
  std::string out;
  for (char ch : text) {
    switch (ch) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += ch;
    }
  }
  return out;
}

PlotArea plot_area(const LineChart& chart) {
  PlotArea a;
  a.right = chart.width - 170.0;  // room for the legend
  a.bottom = chart.height - 55.0;
  return a;
}

std::vector<double> nice_ticks(double lo, double hi, int target) {
  if (!(hi > lo)) hi = lo + 1.0;
  const double raw = (hi - lo) / std::max(1, target);
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    step = m * mag;
    if (step >= raw) break;
  }
  std::vector<double> ticks;  // start + i * step (not repeated addition, which drifts)
  const double start = std::floor(lo / step + 1e-9) * step;
  for (int i = 0; start + i * step <= hi + step * 1e-9; ++i) ticks.push_back(start + i * step);
  if (ticks.back() < hi - step * 1e-9) ticks.push_back(start + static_cast<double>(ticks.size()) * step);
  return ticks;
}

std::string render_svg(const LineChart& chart) {
  double xmin = std::numeric_limits<double>::infinity(), xmax = -xmin, ymin = xmin, ymax = -xmin;
  for (const PlotSeries& s : chart.series) {
    NIBBLE_CHECK(s.x.size() == s.y.size(), "plot series '{}' has {} x values and {} y values", s.name, s.x.size(),
                 s.y.size());
    for (size_t i = 0; i < s.x.size(); ++i) {
      if (!std::isfinite(s.x[i]) || !std::isfinite(s.y[i])) continue;
      xmin = std::min(xmin, s.x[i]);
      xmax = std::max(xmax, s.x[i]);
      ymin = std::min(ymin, s.y[i]);
      ymax = std::max(ymax, s.y[i]);
    }
  }
  if (!std::isfinite(xmin)) xmin = 0, xmax = 1, ymin = 0, ymax = 1;  // no data: empty axes
  if (chart.y_from_zero) ymin = std::min(ymin, 0.0), ymax = std::max(ymax, 0.0);
  const std::vector<double> xt = nice_ticks(xmin, xmax), yt = nice_ticks(ymin, ymax);
  const double x0 = xt.front(), x1 = xt.back(), y0 = yt.front(), y1 = yt.back();
  const PlotArea a = plot_area(chart);
  auto px = [&](double x) { return a.left + (x - x0) / (x1 - x0) * (a.right - a.left); };
  auto py = [&](double y) { return a.bottom - (y - y0) / (y1 - y0) * (a.bottom - a.top); };

  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n",
      chart.width, chart.height);
  svg += fmt::format("<text x=\"{}\" y=\"22\" text-anchor=\"middle\" font-size=\"15\">{}</text>\n",
                     (a.left + a.right) / 2, xml_escape(chart.title));
  for (double t : xt) {
    svg += fmt::format("<line x1=\"{0:.2f}\" y1=\"{1:.2f}\" x2=\"{0:.2f}\" y2=\"{2:.2f}\" stroke=\"#e0e0e0\"/>\n", px(t),
                       a.top, a.bottom);
    svg += fmt::format("<text x=\"{:.2f}\" y=\"{:.2f}\" text-anchor=\"middle\">{}</text>\n", px(t), a.bottom + 16,
                       tick_label(t, xt[1] - xt[0]));
  }
  for (double t : yt) {
    svg += fmt::format("<line x1=\"{0:.2f}\" y1=\"{1:.2f}\" x2=\"{2:.2f}\" y2=\"{1:.2f}\" stroke=\"#e0e0e0\"/>\n", a.left,
                       py(t), a.right);
    svg += fmt::format("<text x=\"{:.2f}\" y=\"{:.2f}\" text-anchor=\"end\">{}</text>\n", a.left - 6, py(t) + 4,
                       tick_label(t, yt[1] - yt[0]));
  }
  svg += fmt::format("<rect x=\"{:.2f}\" y=\"{:.2f}\" width=\"{:.2f}\" height=\"{:.2f}\" fill=\"none\" stroke=\"black\"/>\n",
                     a.left, a.top, a.right - a.left, a.bottom - a.top);
  svg += fmt::format("<text x=\"{:.2f}\" y=\"{:.2f}\" text-anchor=\"middle\">{}</text>\n", (a.left + a.right) / 2,
                     a.bottom + 38, xml_escape(chart.x_label));
  svg += fmt::format("<text x=\"16\" y=\"{0:.2f}\" text-anchor=\"middle\" transform=\"rotate(-90 16 {0:.2f})\">{1}</text>\n",
                     (a.top + a.bottom) / 2, xml_escape(chart.y_label));
  for (size_t s = 0; s < chart.series.size(); ++s) {
    const PlotSeries& series = chart.series[s];
    const char* color = kColors[s % std::size(kColors)];
    std::string points;
    for (size_t i = 0; i < series.x.size(); ++i) {
      if (!std::isfinite(series.x[i]) || !std::isfinite(series.y[i])) continue;
      points += fmt::format("{}{:.2f},{:.2f}", points.empty() ? "" : " ", px(series.x[i]), py(series.y[i]));
    }
    svg += fmt::format("<g class=\"series\" data-name=\"{}\">\n", xml_escape(series.name));
    svg += fmt::format("<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"2\" points=\"{}\"/>\n", color, points);
    for (size_t i = 0; i < series.x.size(); ++i) {
      if (!std::isfinite(series.x[i]) || !std::isfinite(series.y[i])) continue;
      svg += fmt::format("<circle cx=\"{:.2f}\" cy=\"{:.2f}\" r=\"3\" fill=\"{}\"/>\n", px(series.x[i]), py(series.y[i]),
                         color);
    }
    svg += "</g>\n";
    const double ly = a.top + 10 + 20.0 * static_cast<double>(s);
    svg += fmt::format("<line x1=\"{0:.2f}\" y1=\"{1:.2f}\" x2=\"{2:.2f}\" y2=\"{1:.2f}\" stroke=\"{3}\" stroke-width=\"2\"/>\n",
                       a.right + 14, ly, a.right + 38, color);
    svg += fmt::format("<text x=\"{:.2f}\" y=\"{:.2f}\">{}</text>\n", a.right + 44, ly + 4, xml_escape(series.name));
  }
  svg += "</svg>\n";
  return svg;
}

}  // namespace nibble::eval
