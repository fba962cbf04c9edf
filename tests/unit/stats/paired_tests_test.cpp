// McNemar's tests against p-values computed by hand from the binomial, and against an exact
// brute-force oracle (Pascal's triangle in long double) for larger tables.
#include <gtest/gtest.h>

#include <vector>

#include "common/error.h"
#include "stats/paired_tests.h"

namespace nibble::stats {
namespace {

// P(X <= k), X ~ Binomial(m, 1/2), from Pascal's triangle: every C(m, i) exact in long double up to
// m ~ 60, independent of the lgamma path under test.
double pascal_cdf_half(int m, int k) {
  std::vector<long double> row = {1.0L};
  for (int r = 1; r <= m; ++r) {
    std::vector<long double> next(r + 1, 1.0L);
    for (int i = 1; i < r; ++i) next[i] = row[i - 1] + row[i];
    row = next;
  }
  long double sum = 0;
  for (int i = 0; i <= k; ++i) sum += row[i];
  long double total = 1;
  for (int i = 0; i < m; ++i) total *= 2;
  return static_cast<double>(sum / total);
}

TEST(McNemarExact, HandComputedSmallTables) {
  // b=1, c=9: m=10, 2 * (C(10,0) + C(10,1)) / 2^10 = 22/1024.
  EXPECT_NEAR(mcnemar_exact_p(1, 9), 22.0 / 1024.0, 1e-15);
  EXPECT_NEAR(mcnemar_exact_p(1, 9), 0.02148, 1e-5);
  EXPECT_NEAR(mcnemar_exact_p(9, 1), 22.0 / 1024.0, 1e-15);  // symmetric in b, c
  // b=0, c=5: 2 * 1/32.
  EXPECT_NEAR(mcnemar_exact_p(0, 5), 0.0625, 1e-15);
  // b=2, c=8: 2 * (1 + 10 + 45) / 1024.
  EXPECT_NEAR(mcnemar_exact_p(2, 8), 112.0 / 1024.0, 1e-15);
  // b=3, c=0: 2 * 1/8.
  EXPECT_NEAR(mcnemar_exact_p(3, 0), 0.25, 1e-15);
  // Balanced tables and no discordant pairs: no evidence at all.
  EXPECT_EQ(mcnemar_exact_p(5, 5), 1.0);
  EXPECT_EQ(mcnemar_exact_p(0, 0), 1.0);
  EXPECT_EQ(mcnemar_exact_p(0, 1), 1.0);  // 2 * 1/2
}

TEST(McNemarExact, MatchesPascalOracleUpToSixtyDiscordantPairs) {
  for (int m = 1; m <= 60; m += 7) {
    for (int b = 0; b <= m; ++b) {
      const int k = std::min(b, m - b);
      const double expected = std::min(1.0, 2.0 * pascal_cdf_half(m, k));
      EXPECT_NEAR(mcnemar_exact_p(b, m - b), expected, 1e-12 * std::max(1.0, expected)) << "b=" << b << " m=" << m;
    }
  }
}

TEST(McNemarMidP, HandComputed) {
  // b=1, c=9: 22/1024 - C(10,1)/1024.
  EXPECT_NEAR(mcnemar_mid_p(1, 9), 12.0 / 1024.0, 1e-15);
  // b=c=5: 1 - C(10,5)/1024.
  EXPECT_NEAR(mcnemar_mid_p(5, 5), 1.0 - 252.0 / 1024.0, 1e-15);
  EXPECT_LT(mcnemar_mid_p(2, 8), mcnemar_exact_p(2, 8));
}

TEST(McNemarChi2, BracketedByChiSquareTableValues) {
  // Chi-square, 1 degree of freedom: 3.841459 <-> p = 0.05, 5.023886 <-> 0.025, 6.634897 <-> 0.01.
  // b=1, c=9: (8-1)^2/10 = 4.9, between the 0.05 and 0.025 critical values.
  const double p = mcnemar_chi2_p(1, 9);
  EXPECT_GT(p, 0.025);
  EXPECT_LT(p, 0.05);
  // b=0, c=9: 64/9 = 7.11 > 6.634897.
  EXPECT_LT(mcnemar_chi2_p(0, 9), 0.01);
  // b=10, c=21: 100/31 = 3.226 < 3.841459.
  EXPECT_GT(mcnemar_chi2_p(10, 21), 0.05);
  EXPECT_EQ(mcnemar_chi2_p(4, 5), 1.0);  // |b-c| - 1 = 0
  EXPECT_EQ(mcnemar_chi2_p(0, 0), 1.0);
}

TEST(McNemarChi2, AgreesWithExactTestForLargeTables) {
  // The continuity-corrected chi-square approximates the exact binomial test well for large m.
  const double exact = mcnemar_exact_p(400, 470), approx = mcnemar_chi2_p(400, 470);
  EXPECT_NEAR(approx / exact, 1.0, 0.03) << exact << " vs " << approx;
}

TEST(Binomial, PmfAndCdfHandValues) {
  EXPECT_NEAR(binomial_pmf(2, 4, 0.5), 6.0 / 16.0, 1e-15);
  EXPECT_NEAR(binomial_pmf(1, 3, 0.2), 3 * 0.2 * 0.64, 1e-15);
  EXPECT_NEAR(binomial_cdf(1, 3, 0.2), 0.512 + 0.384, 1e-15);
  EXPECT_EQ(binomial_cdf(3, 3, 0.2), 1.0);
  EXPECT_EQ(binomial_cdf(-1, 3, 0.2), 0.0);
  EXPECT_EQ(binomial_pmf(0, 5, 0.0), 1.0);
  EXPECT_EQ(binomial_pmf(5, 5, 1.0), 1.0);
  // Large n stays finite and sums to one.
  double total = 0;
  for (int64_t k = 0; k <= 5000; ++k) total += binomial_pmf(k, 5000, 0.3);
  EXPECT_NEAR(total, 1.0, 1e-9);
}

TEST(PairedTests, RejectBadCounts) {
  EXPECT_THROW(mcnemar_exact_p(-1, 3), Error);
  EXPECT_THROW(mcnemar_mid_p(2, -3), Error);
  EXPECT_THROW(mcnemar_chi2_p(-2, 0), Error);
  EXPECT_THROW(binomial_pmf(1, 4, 1.5), Error);
  EXPECT_THROW(binomial_cdf(1, -4, 0.5), Error);
}

}  // namespace
}  // namespace nibble::stats
