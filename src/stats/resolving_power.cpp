#include "stats/resolving_power.h"

#include <cmath>
#include <limits>

#include "common/error.h"

namespace nibble::stats {

double independent_runs_sigma(double p, int64_t n) {
  NIBBLE_CHECK(n >= 1, "resolving power: n must be at least 1, got {}", n);
  NIBBLE_CHECK(p >= 0.0 && p <= 1.0, "resolving power: p must lie in [0, 1], got {}", p);
  return std::sqrt(2.0 * p * (1.0 - p) / static_cast<double>(n));
}

double paired_sigma_null(const PairedCounts& c) {
  NIBBLE_CHECK(c.both_pass >= 0 && c.only_a >= 0 && c.only_b >= 0 && c.both_fail >= 0,
               "paired counts must be non-negative");
  NIBBLE_CHECK(c.n() >= 1, "paired counts: no items");
  return std::sqrt(static_cast<double>(c.discordant())) / static_cast<double>(c.n());
}

double paired_standard_error(const PairedCounts& c) {
  NIBBLE_CHECK(c.both_pass >= 0 && c.only_a >= 0 && c.only_b >= 0 && c.both_fail >= 0,
               "paired counts must be non-negative");
  const double n = static_cast<double>(c.n());
  NIBBLE_CHECK(n >= 1, "paired counts: no items");
  const double q = static_cast<double>(c.discordant()) / n;
  const double mean = static_cast<double>(c.only_b - c.only_a) / n;
  return std::sqrt(std::max(0.0, q - mean * mean) / n);
}

double paired_sigma(std::span<const double> d) {
  NIBBLE_CHECK(d.size() >= 2, "paired sigma needs at least 2 items, got {}", d.size());
  double mean = 0.0;
  for (double x : d) mean += x;
  mean /= static_cast<double>(d.size());
  double ss = 0.0;
  for (double x : d) ss += (x - mean) * (x - mean);
  const double n = static_cast<double>(d.size());
  return std::sqrt(ss / (n - 1.0) / n);
}

Resolution resolve(double difference, double sigma, const DetectOptions& options) {
  NIBBLE_CHECK(sigma >= 0.0 && std::isfinite(sigma), "resolve: sigma must be finite and non-negative, got {}", sigma);
  Resolution r{.difference = difference, .sigma = sigma};
  r.minimum_detectable = (options.z_alpha + options.z_power) * sigma;
  if (sigma > 0.0) {
    r.z_score = difference / sigma;
  } else {
    r.z_score = difference == 0.0 ? 0.0 : std::copysign(std::numeric_limits<double>::infinity(), difference);
  }
  r.resolvable = std::fabs(difference) > 0.0 && std::fabs(difference) >= r.minimum_detectable;
  return r;
}

double normal_quantile(double p) {
  NIBBLE_CHECK(p > 0.0 && p < 1.0, "normal quantile: p must lie in (0, 1), got {}", p);
  // Bisection on Phi(x) = erfc(-x / sqrt 2) / 2, monotone; 200 halvings of [-40, 40] reach double
  // precision. Slow next to a rational approximation, exact enough for any caller here.
  double lo = -40.0, hi = 40.0;
  for (int i = 0; i < 200 && hi - lo > 1e-15; ++i) {
    const double mid = 0.5 * (lo + hi);
    if (0.5 * std::erfc(-mid / std::sqrt(2.0)) < p) lo = mid; else hi = mid;
  }
  return 0.5 * (lo + hi);
}

double normal_quantile_two_sided(double confidence) {
  NIBBLE_CHECK(confidence > 0.0 && confidence < 1.0, "confidence must lie in (0, 1), got {}", confidence);
  return normal_quantile(0.5 + confidence / 2.0);
}

ProportionInterval wilson_interval(int64_t successes, int64_t n, double confidence) {
  NIBBLE_CHECK(n >= 1, "Wilson interval: n must be at least 1, got {}", n);
  NIBBLE_CHECK(successes >= 0 && successes <= n, "Wilson interval: {} successes out of {}", successes, n);
  const double z = normal_quantile_two_sided(confidence);
  const double nn = static_cast<double>(n), p = static_cast<double>(successes) / nn, z2 = z * z;
  const double denom = 1.0 + z2 / nn;
  const double center = (p + z2 / (2.0 * nn)) / denom;
  const double half = z / denom * std::sqrt(p * (1.0 - p) / nn + z2 / (4.0 * nn * nn));
  return {.estimate = p, .lower = std::max(0.0, center - half), .upper = std::min(1.0, center + half)};
}

}  // namespace nibble::stats
