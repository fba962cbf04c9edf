#include "engine/metrics.h"

#include <algorithm>

#include "common/error.h"

namespace nibble::engine {

Histogram::Histogram(std::vector<double> upper_bounds)
    : upper_bounds_(std::move(upper_bounds)), counts_(upper_bounds_.size() + 1, 0) {
  for (size_t i = 1; i < upper_bounds_.size(); ++i) {
    NIBBLE_CHECK(upper_bounds_[i - 1] < upper_bounds_[i], "histogram bounds must increase: {} then {}",
                 upper_bounds_[i - 1], upper_bounds_[i]);
  }
}

void Histogram::observe(double value) {
  // The first bucket whose upper bound is >= value (Prometheus' le: "less than or equal").
  const auto it = std::lower_bound(upper_bounds_.begin(), upper_bounds_.end(), value);
  ++counts_[static_cast<size_t>(it - upper_bounds_.begin())];
  ++count_;
  sum_ += value;
}

std::vector<double> ttft_buckets_seconds() {
  return {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 60.0};
}

std::vector<double> itl_buckets_seconds() {
  return {0.001, 0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75,
          1.0, 2.5, 5.0, 10.0};
}

}  // namespace nibble::engine
