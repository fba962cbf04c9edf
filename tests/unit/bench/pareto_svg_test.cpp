// The Pareto frontier by hand, the SVG's content, and curves read back from run/sweep JSON.
#include <gtest/gtest.h>

#include "bench/pareto_svg.h"
#include "common/error.h"

namespace nibble::bench {
namespace {

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t i = s.find(what); i != std::string::npos; i = s.find(what, i + 1)) ++n;
  return n;
}

TEST(Pareto, FrontierDropsDominatedPoints) {
  const std::vector<CurvePoint> points = {{.per_user = 20, .per_gpu = 80, .concurrency = 2},
                                          {.per_user = 10, .per_gpu = 100, .concurrency = 1},
                                          {.per_user = 15, .per_gpu = 70, .concurrency = 3},   // below (20, 80)
                                          {.per_user = 5, .per_gpu = 100, .concurrency = 4}};  // left of (10, 100)
  const auto front = pareto_frontier(points);
  ASSERT_EQ(front.size(), 2u);
  EXPECT_EQ(front[0].concurrency, 1);
  EXPECT_EQ(front[1].concurrency, 2);
}

TEST(Pareto, SvgHasEveryPointAndEscapedLabels) {
  const std::vector<Curve> curves = {
      {.label = "nvfp4 <kv>", .points = {{10, 100, 1, ""}, {20, 80, 2, ""}, {15, 70, 3, ""}}},
      {.label = "fp8", .points = {{12, 50, 1, ""}}}};
  const std::string svg = pareto_svg(curves, "t & t");
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  EXPECT_EQ(count(svg, "<circle"), 4u);
  EXPECT_EQ(count(svg, "<polyline"), 2u);
  EXPECT_NE(svg.find("nvfp4 &lt;kv&gt;"), std::string::npos);
  EXPECT_NE(svg.find("t &amp; t"), std::string::npos);
  EXPECT_EQ(svg.find("nan"), std::string::npos);
}

TEST(Pareto, CurvesFromRunAndSweepJson) {
  const nlohmann::json run = {{"kind", "nibble-bench-run"}, {"label", "a"}, {"output_tokens_per_s_per_user", 3.5},
                              {"output_tokens_per_s_per_gpu", 40.0}, {"requested_concurrency", 4}, {"verdict", "client-limited"}};
  const Curve one = curve_from_json(run);
  ASSERT_EQ(one.points.size(), 1u);
  EXPECT_DOUBLE_EQ(one.points[0].per_gpu, 40);
  EXPECT_EQ(one.points[0].concurrency, 4);
  const nlohmann::json sweep = {{"kind", "nibble-bench-sweep"}, {"label", "b"}, {"runs", {run, run}}};
  EXPECT_EQ(curve_from_json(sweep).points.size(), 2u);
  EXPECT_EQ(curve_from_json(sweep).label, "b");
  EXPECT_THROW(curve_from_json(nlohmann::json{{"kind", "other"}}), Error);
  EXPECT_THROW(curve_from_json(nlohmann::json{{"kind", "nibble-bench-run"}}), Error);
  EXPECT_THROW(curve_from_json(nlohmann::json::array()), Error);
}

}  // namespace
}  // namespace nibble::bench
