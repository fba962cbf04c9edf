#pragma once
// Paired bootstrap confidence intervals for the mean difference of a continuous per-item metric
// (percentile method). Items are the resampling unit: for per-token metrics inside documents, pass
// per-document values and token counts as weights, so tokens of one document (correlated) move
// together and the statistic is the token-weighted mean Σ w_i v_i / Σ w_i.
#include <cstdint>
#include <span>
#include <vector>

namespace nibble::stats {

struct BootstrapOptions {
  int64_t resamples = 2000;   // B
  double confidence = 0.95;   // the interval covers [(1-c)/2, (1+c)/2] quantiles of the B means
  uint64_t seed = 0;          // std::mt19937_64 seed: the same inputs and seed give the same interval
};

struct BootstrapInterval {
  double estimate = 0;  // the statistic on the original sample
  double lower = 0;
  double upper = 0;
  double std_error = 0;  // standard deviation of the B resampled statistics
  int64_t items = 0;
  int64_t resamples = 0;
};

// CI of the (weighted) mean of `values` ([n]); weights ([n], or empty = all 1) must be positive.
// Throws nibble::Error for no items, a size mismatch, a non-positive weight, B < 1 or a confidence
// outside (0, 1).
BootstrapInterval bootstrap_mean(std::span<const double> values, std::span<const double> weights,
                                 const BootstrapOptions& options);

// CI of mean(b - a) over paired items: a and b are the same n items under two configurations.
BootstrapInterval paired_bootstrap_mean_difference(std::span<const double> a, std::span<const double> b,
                                                   std::span<const double> weights, const BootstrapOptions& options);

// The q-quantile (0 <= q <= 1) of `sorted` ascending values by linear interpolation between order
// statistics (Hyndman & Fan type 7, R's and NumPy's default).
double quantile_sorted(std::span<const double> sorted, double q);

}  // namespace nibble::stats
