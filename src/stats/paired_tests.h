#pragma once
// McNemar's test for two runs scored pass/fail on the same n items.
//
// The 2x2 table of a paired run (A = the reference, B = the other configuration):
//
//                  B pass   B fail
//        A pass      a        b        b: items only A passes
//        A fail      c        d        c: items only B passes
//
// Only the discordant pairs b and c carry information about a difference. Under "no difference"
// each discordant item is equally likely to fall either way, so given m = b + c the count b is
// Binomial(m, 1/2). The tests below differ only in how they turn that into a p-value.
#include <cstdint>

namespace nibble::stats {

struct PairedCounts {
  int64_t both_pass = 0;   // a
  int64_t only_a = 0;      // b: A passes, B fails
  int64_t only_b = 0;      // c: A fails, B passes
  int64_t both_fail = 0;   // d

  int64_t n() const { return both_pass + only_a + only_b + both_fail; }
  int64_t discordant() const { return only_a + only_b; }
};

// Exact two-sided McNemar: p = min(1, 2 * P(X <= min(b, c))), X ~ Binomial(b + c, 1/2).
// p = 1 when there are no discordant pairs. Throws nibble::Error for negative counts.
double mcnemar_exact_p(int64_t b, int64_t c);

// Mid-p variant (less conservative, close to nominal size): the exact p minus P(X = min(b, c)),
// i.e. 2 * (P(X < k) + P(X = k) / 2) for k = min(b, c) < m/2, and 1 - P(X = m/2) when b = c.
double mcnemar_mid_p(int64_t b, int64_t c);

// The asymptotic test with Edwards' continuity correction: chi2 = (|b - c| - 1)^2 / (b + c), one
// degree of freedom; p = P(Chi2_1 >= chi2) = erfc(sqrt(chi2 / 2)). p = 1 when b + c = 0 or |b-c| <= 1.
double mcnemar_chi2_p(int64_t b, int64_t c);

// P(X <= k) for X ~ Binomial(n, p), summed in log space so that n in the millions stays exact to
// double precision. Throws nibble::Error for n < 0 or p outside [0, 1].
double binomial_cdf(int64_t k, int64_t n, double p);
double binomial_pmf(int64_t k, int64_t n, double p);

}  // namespace nibble::stats
