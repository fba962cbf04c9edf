#pragma once
// The resolving power of a run: how large a difference between two configurations scored on the
// same items the run could have seen at all, and Wilson intervals for single proportions.
//
// Independent runs (the seed's formula). Two runs of n items, each passing at rate ~p, scored as if
// independent: the gap of their pass rates has standard deviation sqrt(2 p (1-p) / n) under "no
// difference" (the variance p(1-p)/n of each rate, added).
//
// Paired runs (the same n items under both configurations). Let d_i = y_i - x_i in {-1, 0, +1}
// (B's outcome minus A's; b = #(A pass, B fail), c = #(A fail, B pass), as in paired_tests.h).
// The difference of the pass rates is exactly the mean D = (c - b) / n, and
//     Var(d_i) = E[d^2] - E[d]^2 = (b + c)/n - ((c - b)/n)^2,
//     SE(D)    = sqrt(Var(d_i) / n) = sqrt((b + c)/n - ((c - b)/n)^2) / sqrt(n)   (observed).
// Under "no difference" E[b] = E[c], so the second term vanishes and
//     sigma_paired = sqrt(q / n),  q = (b + c)/n the discordance rate.
// If the two runs were independent, q = P(pass, fail) + P(fail, pass) = 2 p (1-p) and sigma_paired
// is the seed's formula; the same items make failures coincide, so q < 2 p (1-p) in practice and the
// paired run resolves smaller differences. For a continuous per-item metric the same argument gives
// sigma = sd(d_i) / sqrt(n) with the sample standard deviation of the per-item differences.
//
// "Could this run see a difference of X?": at two-sided level alpha a difference is detectable when
// |X| >= z_{1-alpha/2} * sigma (1.96 sigma at 5%, the ~2 sigma rule); adding z_power (0.84 for 80%
// power) gives the difference the run would detect most of the time rather than half of it.
#include <cstdint>
#include <span>

#include "stats/paired_tests.h"

namespace nibble::stats {

// sqrt(2 p (1-p) / n). Throws nibble::Error for n < 1 or p outside [0, 1].
double independent_runs_sigma(double p, int64_t n);

// sqrt((b + c)) / n: the standard deviation of the paired pass-rate difference under "no difference".
double paired_sigma_null(const PairedCounts& counts);
// sqrt((b + c)/n - ((c - b)/n)^2) / sqrt(n): the observed standard error of (c - b)/n.
double paired_standard_error(const PairedCounts& counts);
// sd(d_i) / sqrt(n) with the n-1 sample variance of the per-item differences d ([n], n >= 2).
double paired_sigma(std::span<const double> differences);

struct DetectOptions {
  double z_alpha = 1.96;  // two-sided 5%
  double z_power = 0.0;   // 0: detectable at the 50% point; 0.84: with 80% power
};

struct Resolution {
  double difference = 0;   // the observed (or hypothesised) difference X
  double sigma = 0;        // the run's standard deviation of that difference under "no difference"
  double minimum_detectable = 0;  // (z_alpha + z_power) * sigma
  double z_score = 0;      // X / sigma (infinite when sigma = 0 and X != 0, 0 when both are 0)
  bool resolvable = false; // |X| >= minimum_detectable (and > 0)
};

// Whether a run with standard deviation sigma could see a difference of X.
Resolution resolve(double difference, double sigma, const DetectOptions& options = {});

// The (1+confidence)/2 quantile of the standard normal (1.959964 for 0.95). Throws outside (0, 1).
double normal_quantile_two_sided(double confidence);
// The standard normal quantile function Phi^-1(p), 0 < p < 1.
double normal_quantile(double p);

struct ProportionInterval {
  double estimate = 0;  // successes / n
  double lower = 0;
  double upper = 0;
};

// Wilson score interval (no continuity correction) for successes out of n. Throws nibble::Error for
// n < 1, successes outside [0, n] or a confidence outside (0, 1).
ProportionInterval wilson_interval(int64_t successes, int64_t n, double confidence = 0.95);

}  // namespace nibble::stats
