#include "stats/paired_tests.h"

#include <algorithm>
#include <cmath>

#include "common/error.h"

namespace nibble::stats {
namespace {

void check_counts(int64_t b, int64_t c) {
  NIBBLE_CHECK(b >= 0 && c >= 0, "McNemar: discordant counts must be non-negative, got b={} c={}", b, c);
}

double log_choose(int64_t n, int64_t k) {
  return std::lgamma(static_cast<double>(n) + 1) - std::lgamma(static_cast<double>(k) + 1) -
         std::lgamma(static_cast<double>(n - k) + 1);
}

}  // namespace

double binomial_pmf(int64_t k, int64_t n, double p) {
  NIBBLE_CHECK(n >= 0, "binomial: n must be non-negative, got {}", n);
  NIBBLE_CHECK(p >= 0.0 && p <= 1.0, "binomial: p must lie in [0, 1], got {}", p);
  if (k < 0 || k > n) return 0.0;
  if (p == 0.0) return k == 0 ? 1.0 : 0.0;
  if (p == 1.0) return k == n ? 1.0 : 0.0;
  return std::exp(log_choose(n, k) + static_cast<double>(k) * std::log(p) + static_cast<double>(n - k) * std::log1p(-p));
}

double binomial_cdf(int64_t k, int64_t n, double p) {
  NIBBLE_CHECK(n >= 0, "binomial: n must be non-negative, got {}", n);
  if (k < 0) return 0.0;
  if (k >= n) return 1.0;
  // Sum the smaller tail directly (fewer terms, no cancellation in the small tail McNemar needs).
  double sum = 0.0;
  for (int64_t i = 0; i <= k; ++i) sum += binomial_pmf(i, n, p);
  return std::min(sum, 1.0);
}

double mcnemar_exact_p(int64_t b, int64_t c) {
  check_counts(b, c);
  const int64_t m = b + c;
  if (m == 0) return 1.0;
  return std::min(1.0, 2.0 * binomial_cdf(std::min(b, c), m, 0.5));
}

double mcnemar_mid_p(int64_t b, int64_t c) {
  check_counts(b, c);
  const int64_t m = b + c;
  if (m == 0) return 1.0;
  const int64_t k = std::min(b, c);
  if (b == c) return 1.0 - binomial_pmf(k, m, 0.5);
  return std::min(1.0, 2.0 * binomial_cdf(k, m, 0.5) - binomial_pmf(k, m, 0.5));
}

double mcnemar_chi2_p(int64_t b, int64_t c) {
  check_counts(b, c);
  const int64_t m = b + c;
  const double excess = std::fabs(static_cast<double>(b - c)) - 1.0;
  if (m == 0 || excess <= 0.0) return 1.0;
  const double chi2 = excess * excess / static_cast<double>(m);
  return std::erfc(std::sqrt(chi2 / 2.0));
}

}  // namespace nibble::stats
