// Resolving power against the seed article's numbers, the paired formula against a brute-force
// per-item computation, and Wilson intervals against Newcombe (1998), Table I, method 3.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "common/error.h"
#include "stats/resolving_power.h"

namespace nibble::stats {
namespace {

TEST(ResolvingPower, SeedArticleNoiseBands) {
  // nvfp4-kv-cache-explainer: sqrt(2p(1-p)/n) "0.77 points for GSM8K at n = 1,311 [~96%], 2.84 for
  // GPQA-Diamond at 396, 2.36 for AIME at 60, 2.66 for SWE-bench Verified at 500". The article
  // gives GSM8K's rate (96%) and SWE-bench's counts (381 and 389 of 500 -> p = 0.77); the GPQA and
  // AIME rates (0.80, 0.983) are the ones its rounded sigmas imply.
  EXPECT_NEAR(100 * independent_runs_sigma(0.96, 1311), 0.77, 0.005);
  EXPECT_NEAR(100 * independent_runs_sigma(0.80, 396), 2.84, 0.005);
  EXPECT_NEAR(100 * independent_runs_sigma(0.983, 60), 2.36, 0.005);
  const double swe_p = (381.0 + 389.0) / 1000.0;
  const double swe_sigma = independent_runs_sigma(swe_p, 500);
  EXPECT_NEAR(100 * swe_sigma, 2.66, 0.005);
  // "The largest observed gap, SWE-bench's 1.60, is 0.60 sigma."
  const Resolution swe = resolve((389.0 - 381.0) / 500.0, swe_sigma);
  EXPECT_NEAR(swe.z_score, 0.60, 0.005);
  EXPECT_FALSE(swe.resolvable);
  // "Sixty AIME samples cannot see a two-point regression."
  EXPECT_FALSE(resolve(-0.02, independent_runs_sigma(0.983, 60)).resolvable);
  // "Only GSM8K, at n = 1,311, resolves anything under a point" (sigma below one point).
  EXPECT_LT(100 * independent_runs_sigma(0.96, 1311), 1.0);
  EXPECT_GT(100 * independent_runs_sigma(0.80, 396), 1.0);
}

TEST(ResolvingPower, PairedEqualsIndependentWhenDiscordanceIs2pq) {
  // Two independent runs at p = 0.5 on 100 items: expected table 25/25/25/25, discordance 0.5 =
  // 2p(1-p), so the paired sigma equals the seed's formula.
  const PairedCounts t{.both_pass = 25, .only_a = 25, .only_b = 25, .both_fail = 25};
  EXPECT_NEAR(paired_sigma_null(t), independent_runs_sigma(0.5, 100), 1e-15);
  // Correlated runs (failures coincide): same marginal rates, far fewer discordant items.
  const PairedCounts c{.both_pass = 48, .only_a = 2, .only_b = 2, .both_fail = 48};
  EXPECT_NEAR(paired_sigma_null(c), 0.02, 1e-15);  // sqrt(4)/100
  EXPECT_LT(paired_sigma_null(c), independent_runs_sigma(0.5, 100) / 3);
}

TEST(ResolvingPower, PairedStandardErrorMatchesPerItemDifferences) {
  // Build the per-item d_i in {-1, 0, 1} explicitly; the closed form must equal the population
  // standard deviation of d over sqrt(n), and paired_sigma (n-1 variance) must be sqrt(n/(n-1)) larger.
  const PairedCounts t{.both_pass = 30, .only_a = 7, .only_b = 2, .both_fail = 11};
  std::vector<double> d;
  for (int i = 0; i < 30 + 11; ++i) d.push_back(0);
  for (int i = 0; i < 7; ++i) d.push_back(-1);
  for (int i = 0; i < 2; ++i) d.push_back(+1);
  const double n = d.size();
  double mean = 0, ss = 0;
  for (double x : d) mean += x;
  mean /= n;
  for (double x : d) ss += (x - mean) * (x - mean);
  EXPECT_NEAR(mean, (2.0 - 7.0) / 50.0, 1e-15);
  EXPECT_NEAR(paired_standard_error(t), std::sqrt(ss / n) / std::sqrt(n), 1e-15);
  EXPECT_NEAR(paired_sigma(d), std::sqrt(ss / (n - 1)) / std::sqrt(n), 1e-15);
  EXPECT_NEAR(paired_sigma_null(t), 3.0 / 50.0, 1e-15);
}

TEST(ResolvingPower, MinimumDetectableDifference) {
  const Resolution r = resolve(0.03, 0.01);
  EXPECT_NEAR(r.minimum_detectable, 0.0196, 1e-12);
  EXPECT_NEAR(r.z_score, 3.0, 1e-12);
  EXPECT_TRUE(r.resolvable);
  EXPECT_FALSE(resolve(0.019, 0.01).resolvable);
  EXPECT_TRUE(resolve(-0.02, 0.01).resolvable);
  EXPECT_NEAR(resolve(0.0, 0.01, {.z_alpha = 1.96, .z_power = 0.84}).minimum_detectable, 0.028, 1e-12);
  EXPECT_FALSE(resolve(0.0, 0.0).resolvable);
  EXPECT_TRUE(std::isinf(resolve(0.5, 0.0).z_score));
  EXPECT_THROW(resolve(0.1, -1.0), Error);
}

TEST(NormalQuantile, TableValues) {
  EXPECT_NEAR(normal_quantile_two_sided(0.95), 1.959963985, 1e-9);
  EXPECT_NEAR(normal_quantile_two_sided(0.99), 2.575829304, 1e-9);
  EXPECT_NEAR(normal_quantile(0.8), 0.841621234, 1e-9);
  EXPECT_NEAR(normal_quantile(0.5), 0.0, 1e-12);
  EXPECT_THROW(normal_quantile(1.0), Error);
}

TEST(Wilson, NewcombeTableOneScoreMethod) {
  // Newcombe RG (1998), Stat Med 17:857-872, Table I, method 3 (score, no continuity correction).
  struct Row { int64_t s, n; double lo, hi; };
  for (const Row& r : {Row{81, 263, 0.2553, 0.3662}, Row{15, 148, 0.0624, 0.1605}, Row{0, 20, 0.0, 0.1611},
                       Row{1, 29, 0.0061, 0.1718}}) {
    const ProportionInterval ci = wilson_interval(r.s, r.n);
    EXPECT_NEAR(ci.lower, r.lo, 5e-5) << r.s << "/" << r.n;
    EXPECT_NEAR(ci.upper, r.hi, 5e-5) << r.s << "/" << r.n;
    EXPECT_NEAR(ci.estimate, double(r.s) / r.n, 1e-15);
  }
  // n/n mirrors 0/n.
  const ProportionInterval all = wilson_interval(20, 20);
  EXPECT_NEAR(all.lower, 1.0 - 0.1611, 5e-5);
  EXPECT_DOUBLE_EQ(all.upper, 1.0);
}

TEST(Wilson, RejectsBadInput) {
  EXPECT_THROW(wilson_interval(3, 0), Error);
  EXPECT_THROW(wilson_interval(5, 4), Error);
  EXPECT_THROW(wilson_interval(-1, 4), Error);
  EXPECT_THROW(wilson_interval(1, 4, 1.5), Error);
  EXPECT_THROW(independent_runs_sigma(0.5, 0), Error);
  EXPECT_THROW(independent_runs_sigma(1.5, 10), Error);
  EXPECT_THROW(paired_sigma(std::vector<double>{1.0}), Error);
}

}  // namespace
}  // namespace nibble::stats
