#pragma once
// The throughput/interactivity Pareto plot of a concurrency sweep: output tokens/s per GPU (y)
// against output tokens/s per user (x), one curve per run series (server or configuration).
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace nibble::bench {

struct CurvePoint {
  double per_user = 0;  // output tokens/s per user (x)
  double per_gpu = 0;   // output tokens/s per GPU (y)
  int concurrency = 0;  // the point's --max-concurrency, written next to its marker
  std::string verdict;
};

struct Curve {
  std::string label;
  std::vector<CurvePoint> points;
};

// The points no other point beats on both axes (>= on both, > on one), sorted by per_user.
std::vector<CurvePoint> pareto_frontier(const std::vector<CurvePoint>& points);

// A curve from a sweep JSON ({"kind": "nibble-bench-sweep", "label", "runs": [run...]}) or a single
// run's JSON ({"kind": "nibble-bench-run", ...}). Throws nibble::Error on anything else.
Curve curve_from_json(const nlohmann::json& j);

// A standalone SVG document: axes from 0 with "nice" ticks, every point as a marker labelled with its
// concurrency, each curve's Pareto frontier as a line, and a legend.
std::string pareto_svg(const std::vector<Curve>& curves, const std::string& title);

}  // namespace nibble::bench
