#include "stats/bootstrap.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "common/error.h"

namespace nibble::stats {

double quantile_sorted(std::span<const double> sorted, double q) {
  NIBBLE_CHECK(!sorted.empty(), "quantile of an empty sample");
  NIBBLE_CHECK(q >= 0.0 && q <= 1.0, "quantile must lie in [0, 1], got {}", q);
  const double h = q * static_cast<double>(sorted.size() - 1);
  const auto lo = static_cast<size_t>(std::floor(h));
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (h - static_cast<double>(lo)) * (sorted[hi] - sorted[lo]);
}

BootstrapInterval bootstrap_mean(std::span<const double> values, std::span<const double> weights,
                                 const BootstrapOptions& options) {
  const size_t n = values.size();
  NIBBLE_CHECK(n > 0, "bootstrap: no items");
  NIBBLE_CHECK(weights.empty() || weights.size() == n, "bootstrap: {} weights for {} items", weights.size(), n);
  NIBBLE_CHECK(options.resamples >= 1, "bootstrap: resamples must be at least 1, got {}", options.resamples);
  NIBBLE_CHECK(options.confidence > 0.0 && options.confidence < 1.0,
               "bootstrap: confidence must lie in (0, 1), got {}", options.confidence);
  for (double w : weights) NIBBLE_CHECK(w > 0.0 && std::isfinite(w), "bootstrap: weights must be positive, got {}", w);
  for (double v : values) NIBBLE_CHECK(std::isfinite(v), "bootstrap: values must be finite, got {}", v);
  auto weight = [&](size_t i) { return weights.empty() ? 1.0 : weights[i]; };

  double sum = 0.0, wsum = 0.0;
  for (size_t i = 0; i < n; ++i) {
    sum += weight(i) * values[i];
    wsum += weight(i);
  }
  BootstrapInterval out{.estimate = sum / wsum, .items = static_cast<int64_t>(n), .resamples = options.resamples};

  std::mt19937_64 rng(options.seed);
  std::vector<double> stats(static_cast<size_t>(options.resamples));  // [B] resampled means
  for (double& s : stats) {
    double rs = 0.0, rw = 0.0;
    for (size_t k = 0; k < n; ++k) {
      const size_t i = static_cast<size_t>(rng() % n);  // modulo bias < n / 2^64: negligible
      rs += weight(i) * values[i];
      rw += weight(i);
    }
    s = rs / rw;
  }
  double mean = 0.0;
  for (double s : stats) mean += s;
  mean /= static_cast<double>(stats.size());
  double ss = 0.0;
  for (double s : stats) ss += (s - mean) * (s - mean);
  out.std_error = stats.size() > 1 ? std::sqrt(ss / static_cast<double>(stats.size() - 1)) : 0.0;
  std::sort(stats.begin(), stats.end());
  const double alpha = 1.0 - options.confidence;
  out.lower = quantile_sorted(stats, alpha / 2);
  out.upper = quantile_sorted(stats, 1.0 - alpha / 2);
  return out;
}

BootstrapInterval paired_bootstrap_mean_difference(std::span<const double> a, std::span<const double> b,
                                                   std::span<const double> weights, const BootstrapOptions& options) {
  NIBBLE_CHECK(a.size() == b.size(), "paired bootstrap: the two runs have {} and {} items", a.size(), b.size());
  std::vector<double> diff(a.size());  // [n] b_i - a_i
  for (size_t i = 0; i < a.size(); ++i) diff[i] = b[i] - a[i];
  return bootstrap_mean(diff, weights, options);
}

}  // namespace nibble::stats
