#include "bench/pareto_svg.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>

#include "common/error.h"

namespace nibble::bench {
namespace {

constexpr double kWidth = 800, kHeight = 520;
constexpr double kLeft = 80, kRight = 200, kTop = 50, kBottom = 60;  // margins; the legend sits on the right
constexpr std::array<const char*, 6> kColors = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf"};

// The smallest 1, 2 or 5 x 10^k step that divides [0, max] into at most 8 intervals.
double nice_step(double max) {
  if (max <= 0) return 1;
  const double raw = max / 8;
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (m * magnitude >= raw) return m * magnitude;
  }
  return 10 * magnitude;
}

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

}  // namespace

std::vector<CurvePoint> pareto_frontier(const std::vector<CurvePoint>& points) {
  std::vector<CurvePoint> front;
  for (const CurvePoint& p : points) {
    const bool dominated = std::any_of(points.begin(), points.end(), [&](const CurvePoint& q) {
      return q.per_user >= p.per_user && q.per_gpu >= p.per_gpu && (q.per_user > p.per_user || q.per_gpu > p.per_gpu);
    });
    if (!dominated) front.push_back(p);
  }
  std::sort(front.begin(), front.end(), [](const CurvePoint& a, const CurvePoint& b) { return a.per_user < b.per_user; });
  return front;
}

Curve curve_from_json(const nlohmann::json& j) {
  NIBBLE_CHECK(j.is_object() && j.contains("kind"), "not a nibble bench JSON (no \"kind\")");
  auto point = [](const nlohmann::json& run) {
    return CurvePoint{.per_user = run.at("output_tokens_per_s_per_user").get<double>(),
                      .per_gpu = run.at("output_tokens_per_s_per_gpu").get<double>(),
                      .concurrency = run.at("requested_concurrency").get<int>(),
                      .verdict = run.value("verdict", "")};
  };
  Curve c;
  c.label = j.value("label", "");
  try {
    if (j["kind"] == "nibble-bench-sweep") {
      for (const nlohmann::json& run : j.at("runs")) c.points.push_back(point(run));
    } else if (j["kind"] == "nibble-bench-run") {
      c.points.push_back(point(j));
    } else {
      NIBBLE_FAIL("unknown nibble bench JSON kind {}", j["kind"].dump());
    }
  } catch (const nlohmann::json::exception& e) {
    NIBBLE_FAIL("nibble bench JSON is missing a field: {}", e.what());
  }
  return c;
}

std::string pareto_svg(const std::vector<Curve>& curves, const std::string& title) {
  double max_x = 0, max_y = 0;
  for (const Curve& c : curves) {
    for (const CurvePoint& p : c.points) {
      max_x = std::max(max_x, p.per_user);
      max_y = std::max(max_y, p.per_gpu);
    }
  }
  const double step_x = nice_step(max_x), step_y = nice_step(max_y);
  const double axis_x = std::max(step_x, std::ceil(max_x / step_x) * step_x);
  const double axis_y = std::max(step_y, std::ceil(max_y / step_y) * step_y);
  const double plot_w = kWidth - kLeft - kRight, plot_h = kHeight - kTop - kBottom;
  auto px = [&](double x) { return kLeft + x / axis_x * plot_w; };
  auto py = [&](double y) { return kTop + plot_h - y / axis_y * plot_h; };

  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      "<text x=\"{2}\" y=\"28\" font-size=\"16\">{3}</text>\n",
      kWidth, kHeight, kLeft, escape(title));
  for (double x = 0; x <= axis_x + step_x / 2; x += step_x) {
    svg += fmt::format("<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\" stroke=\"#ddd\"/>"
                       "<text x=\"{0:.1f}\" y=\"{3:.1f}\" text-anchor=\"middle\">{4:g}</text>\n",
                       px(x), py(0), py(axis_y), py(0) + 16, x);
  }
  for (double y = 0; y <= axis_y + step_y / 2; y += step_y) {
    svg += fmt::format("<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{2:.1f}\" y2=\"{1:.1f}\" stroke=\"#ddd\"/>"
                       "<text x=\"{3:.1f}\" y=\"{4:.1f}\" text-anchor=\"end\">{5:g}</text>\n",
                       px(0), py(y), px(axis_x), px(0) - 6, py(y) + 4, y);
  }
  svg += fmt::format("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"none\" stroke=\"black\"/>\n",
                     kLeft, kTop, plot_w, plot_h);
  svg += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">output tokens/s per user</text>\n",
                     kLeft + plot_w / 2, kHeight - 15);
  svg += fmt::format("<text transform=\"translate(20 {:.1f}) rotate(-90)\" text-anchor=\"middle\">output tokens/s per GPU</text>\n",
                     kTop + plot_h / 2);
  for (size_t i = 0; i < curves.size(); ++i) {
    const char* color = kColors[i % kColors.size()];
    const std::vector<CurvePoint> front = pareto_frontier(curves[i].points);
    std::string path;
    for (const CurvePoint& p : front) path += fmt::format("{}{:.1f},{:.1f}", path.empty() ? "" : " ", px(p.per_user), py(p.per_gpu));
    svg += fmt::format("<polyline points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\"/>\n", path, color);
    for (const CurvePoint& p : curves[i].points) {
      svg += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"4\" fill=\"{}\"><title>c={} {}</title></circle>"
                         "<text x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"10\" fill=\"{}\">{}</text>\n",
                         px(p.per_user), py(p.per_gpu), color, p.concurrency, escape(p.verdict), px(p.per_user) + 6,
                         py(p.per_gpu) - 6, color, p.concurrency);
    }
    const double ly = kTop + 20 + 20 * static_cast<double>(i);
    svg += fmt::format("<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{2:.1f}\" y2=\"{1:.1f}\" stroke=\"{3}\" stroke-width=\"3\"/>"
                       "<text x=\"{4:.1f}\" y=\"{5:.1f}\">{6}</text>\n",
                       kWidth - kRight + 15, ly, kWidth - kRight + 40, color, kWidth - kRight + 46, ly + 4,
                       escape(curves[i].label.empty() ? fmt::format("run {}", i + 1) : curves[i].label));
  }
  svg += "</svg>\n";
  return svg;
}

}  // namespace nibble::bench
