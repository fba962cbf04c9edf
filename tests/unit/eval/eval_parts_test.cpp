// The pieces of the eval harness that need no model: configuration parsing, per-position metrics
// against a brute-force KL, the SVG writer's data-to-pixel mapping, and the summaries' statistics.
#include <gtest/gtest.h>

#include <cmath>
#include <regex>

#include "common/error.h"
#include "eval/kv_config.h"
#include "eval/passkey_summary.h"
#include "eval/svg_plot.h"
#include "eval/token_metrics.h"

namespace nibble::eval {
namespace {

TEST(KvConfig, ParsesDtypeAndHadamard) {
  const KvConfig a = parse_kv_config("nvfp4+hadamard");
  EXPECT_EQ(a.dtype, quant::KvDtype::kNVFP4);
  EXPECT_EQ(a.rotation, quant::Rotation::kHadamard);
  EXPECT_EQ(a.name, "nvfp4+hadamard");
  EXPECT_EQ(file_stem(a), "nvfp4_hadamard");
  const std::vector<KvConfig> list = parse_kv_configs("f32, bf16,fp8,nvfp4,nvfp4+hadamard,k8v4");
  ASSERT_EQ(list.size(), 6u);
  EXPECT_EQ(list[1].name, "bf16");
  EXPECT_EQ(list[5].dtype, quant::KvDtype::kK8V4);
  EXPECT_EQ(list[5].rotation, quant::Rotation::kNone);
}

TEST(KvConfig, RejectsBadSpellings) {
  EXPECT_THROW(parse_kv_config("nvfp5"), Error);
  EXPECT_THROW(parse_kv_config("fp8+rotate"), Error);
  EXPECT_THROW(parse_kv_config(""), Error);
  EXPECT_THROW(parse_kv_configs("fp8,,bf16"), Error);
  EXPECT_THROW(parse_kv_configs("fp8,bf16,fp8"), Error);
}

TEST(KvConfig, HeadDimSuitability) {
  EXPECT_FALSE(unsuitable_reason(parse_kv_config("nvfp4"), 64).has_value());
  EXPECT_FALSE(unsuitable_reason(parse_kv_config("fp8"), 8).has_value());
  const auto why = unsuitable_reason(parse_kv_config("nvfp4"), 8);
  ASSERT_TRUE(why.has_value());
  EXPECT_NE(why->find("16"), std::string::npos) << *why;
  EXPECT_TRUE(unsuitable_reason(parse_kv_config("bf16+hadamard"), 48).has_value());  // not a power of two
  EXPECT_TRUE(unsuitable_reason(parse_kv_config("k8v4"), 8).has_value());            // nvfp4 values
}

TEST(TokenMetrics, KlMatchesBruteForce) {
  const std::vector<float> ref = {1.0f, 2.0f, 0.5f, -1.0f}, cfg = {1.1f, 1.8f, 0.7f, -1.0f};
  // Brute force: softmaxes by hand, KL = sum p log(p/q).
  double zp = 0, zq = 0;
  for (int i = 0; i < 4; ++i) zp += std::exp(double(ref[i])), zq += std::exp(double(cfg[i]));
  double kl = 0;
  for (int i = 0; i < 4; ++i) {
    const double p = std::exp(double(ref[i])) / zp, q = std::exp(double(cfg[i])) / zq;
    kl += p * std::log(p / q);
  }
  const std::vector<double> ref_lp = log_softmax(ref);
  const PositionMetrics m = compare_position(ref_lp, argmax(ref), cfg, 2);
  EXPECT_NEAR(m.kl, kl, 1e-14);
  EXPECT_NEAR(m.logprob, std::log(std::exp(0.7) / zq), 1e-7);
  EXPECT_NEAR(m.ref_logprob, std::log(std::exp(0.5) / zp), 1e-7);
  EXPECT_TRUE(m.top1_agree);  // both argmax at index 1
  const PositionMetrics flipped = compare_position(ref_lp, argmax(ref), std::vector<float>{3.0f, 1.0f, 0.0f, 0.0f}, 0);
  EXPECT_FALSE(flipped.top1_agree);
}

TEST(TokenMetrics, IdenticalRowsGiveExactlyZero) {
  const std::vector<float> row = {0.3f, -2.0f, 7.5f, 7.5f, 1e-3f};
  const PositionMetrics m = compare_position(log_softmax(row), argmax(row), row, 4);
  EXPECT_EQ(m.kl, 0.0);
  EXPECT_TRUE(m.top1_agree);
  EXPECT_EQ(argmax(row), 2);  // the first of two equal maxima
}

TEST(SvgPlot, MapsDataCornersToThePlotCorners) {
  // x in [0, 10], y in [0, 1] are already "nice" ranges, so (0,0) is the bottom-left corner of the
  // plot area and (10,1) the top-right.
  LineChart chart{.title = "a < b", .x_label = "x", .y_label = "y",
                  .series = {{.name = "s&1", .x = {0, 5, 10}, .y = {0, 0.5, 1}}}};
  const std::string svg = render_svg(chart);
  const PlotArea a = plot_area(chart);
  EXPECT_NE(svg.find(fmt::format("points=\"{:.2f},{:.2f} {:.2f},{:.2f} {:.2f},{:.2f}\"", a.left, a.bottom,
                                 (a.left + a.right) / 2, (a.top + a.bottom) / 2, a.right, a.top)),
            std::string::npos)
      << svg;
  EXPECT_NE(svg.find("a &lt; b"), std::string::npos);
  EXPECT_NE(svg.find("s&amp;1"), std::string::npos);
  EXPECT_EQ(svg.rfind("</svg>\n"), svg.size() - 7);
  const std::regex circle("<circle ");
  EXPECT_EQ(std::distance(std::sregex_iterator(svg.begin(), svg.end(), circle), std::sregex_iterator()), 3);
  EXPECT_THROW(render_svg({.series = {{.name = "bad", .x = {1, 2}, .y = {1}}}}), Error);
}

TEST(SvgPlot, NiceTicks) {
  const std::vector<double> unit = nice_ticks(0, 1, 5);
  const std::vector<double> expected = {0, 0.2, 0.4, 0.6, 0.8, 1.0};
  ASSERT_EQ(unit.size(), expected.size());
  for (size_t i = 0; i < unit.size(); ++i) EXPECT_NEAR(unit[i], expected[i], 1e-12);
  const std::vector<double> t = nice_ticks(3, 97, 6);
  EXPECT_EQ(t.front(), 0);
  EXPECT_EQ(t.back(), 100);
  EXPECT_EQ(t[1] - t[0], 20);
}

TEST(PasskeySummary, McNemarAgainstTheReference) {
  // 10 items; the reference passes 0-8, the config passes 0-1 and 9: b = 7 (0..8 minus 0,1), c = 1.
  std::vector<PasskeyItem> items(10);
  for (int i = 0; i < 10; ++i) items[i] = {.length = i < 5 ? 64 : 128, .depth = 0.5, .sample = i % 5};
  std::vector<PasskeyOutcome> ref(10), cfg(10);
  for (int i = 0; i < 9; ++i) ref[i].pass = true;
  cfg[0].pass = cfg[1].pass = cfg[9].pass = true;
  const PasskeySummary s = summarize_passkey(items, {"f32", "nvfp4"}, {ref, cfg});
  ASSERT_EQ(s.configs.size(), 2u);
  EXPECT_EQ(s.configs[0].passed, 9);
  EXPECT_FALSE(s.configs[0].vs_reference.has_value());
  const ConfigPasskeySummary& c = s.configs[1];
  ASSERT_TRUE(c.vs_reference.has_value());
  EXPECT_EQ(c.vs_reference->both_pass, 2);
  EXPECT_EQ(c.vs_reference->only_a, 7);
  EXPECT_EQ(c.vs_reference->only_b, 1);
  EXPECT_EQ(c.vs_reference->both_fail, 0);
  // 2 * (C(8,0) + C(8,1)) / 2^8 = 18/256.
  EXPECT_NEAR(c.mcnemar_p, 18.0 / 256.0, 1e-15);
  ASSERT_TRUE(c.resolution.has_value());
  EXPECT_NEAR(c.resolution->difference, -0.6, 1e-15);
  EXPECT_NEAR(c.resolution->sigma, std::sqrt(8.0) / 10.0, 1e-15);
  EXPECT_TRUE(c.resolution->resolvable);  // 0.6 >= 1.96 * 0.283
  ASSERT_EQ(c.cells.size(), 2u);            // (64, 0.5) and (128, 0.5)
  EXPECT_EQ(c.cells[0].passed, 2);
  EXPECT_EQ(c.cells[1].passed, 1);
  EXPECT_EQ(c.cells[1].items, 5);
}

}  // namespace
}  // namespace nibble::eval
