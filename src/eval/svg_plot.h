#pragma once
// A small SVG line-chart writer for the eval reports: linear axes with "nice" ticks (1, 2, 5 x 10^k),
// one polyline with point markers per series, a legend. No dependencies; the output is a complete
// standalone SVG document.
#include <string>
#include <vector>

namespace nibble::eval {

struct PlotSeries {
  std::string name{};
  std::vector<double> x{};  // [points]
  std::vector<double> y{};  // [points], same length as x; non-finite points are skipped
};

struct LineChart {
  std::string title{};
  std::string x_label{};
  std::string y_label{};
  std::vector<PlotSeries> series{};
  bool y_from_zero = true;  // include 0 in the y range
  int width = 720;          // pixels
  int height = 420;
};

// Plot area inside the canvas (pixels), exposed so tests can map data to pixels.
struct PlotArea {
  double left = 70, top = 40, right = 0, bottom = 0;  // right/bottom: set from width/height
};
PlotArea plot_area(const LineChart& chart);

// Ticks covering [lo, hi]: multiples of a 1/2/5 x 10^k step, about `target` of them.
std::vector<double> nice_ticks(double lo, double hi, int target = 6);

// The SVG document. Throws nibble::Error when a series' x and y lengths differ.
std::string render_svg(const LineChart& chart);

// Escapes &, <, >, " for SVG text and attributes.
std::string xml_escape(const std::string& text);

}  // namespace nibble::eval
