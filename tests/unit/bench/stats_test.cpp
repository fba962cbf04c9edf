// Percentiles against numpy's documented values; the concurrency timeline against brute force.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "bench/stats.h"
#include "common/error.h"

namespace nibble::bench {
namespace {

TEST(Percentile, MatchesNumpyLinearInterpolation) {
  // numpy.percentile([1, 2, 3, 4], [50, 90, 0, 100]) = [2.5, 3.7, 1, 4]
  const std::vector<double> v = {4, 1, 3, 2};
  EXPECT_DOUBLE_EQ(percentile(v, 50), 2.5);
  EXPECT_DOUBLE_EQ(percentile(v, 90), 3.7);
  EXPECT_DOUBLE_EQ(percentile(v, 0), 1);
  EXPECT_DOUBLE_EQ(percentile(v, 100), 4);
  // numpy.percentile([15, 20, 35, 40, 50], 40) = 29.0 (rank 1.6 between 20 and 35)
  EXPECT_DOUBLE_EQ(percentile(std::vector<double>{15, 20, 35, 40, 50}, 40), 29.0);
  // numpy.percentile(range(1, 101), 99) = 99.01
  std::vector<double> hundred;
  for (int i = 1; i <= 100; ++i) hundred.push_back(i);
  EXPECT_NEAR(percentile(hundred, 99), 99.01, 1e-12);
  EXPECT_DOUBLE_EQ(percentile(std::vector<double>{7}, 99), 7);
}

TEST(Percentile, RejectsEmptyInputAndBadQ) {
  EXPECT_THROW(percentile(std::vector<double>{}, 50), Error);
  EXPECT_THROW(percentile(std::vector<double>{1}, 101), Error);
  EXPECT_THROW(percentile(std::vector<double>{1}, -1), Error);
}

TEST(Summarize, MeanMinMaxAndEmpty) {
  const Distribution d = summarize(std::vector<double>{2, 4, 9});
  EXPECT_EQ(d.count, 3u);
  EXPECT_DOUBLE_EQ(d.mean, 5);
  EXPECT_DOUBLE_EQ(d.p50, 4);
  EXPECT_DOUBLE_EQ(d.min, 2);
  EXPECT_DOUBLE_EQ(d.max, 9);
  EXPECT_EQ(summarize(std::vector<double>{}).count, 0u);
}

TEST(Concurrency, HalfOpenIntervalsByHand) {
  // [0,2) [1,3) [2,4): at most two at once (the first ends as the third starts); area 6 over [0,4].
  const std::vector<Interval> iv = {{0, 2}, {1, 3}, {2, 4}};
  const ConcurrencyStats c = concurrency_of(iv, 0, 4);
  EXPECT_EQ(c.peak, 2);
  EXPECT_DOUBLE_EQ(c.time_average, 1.5);
  EXPECT_EQ(in_flight_at(iv, 2.0), 2);
  EXPECT_EQ(in_flight_at(iv, 1.5), 2);
  EXPECT_EQ(in_flight_at(iv, 4.0), 0);
  // Clipped to [1, 2]: [1,2) twice in full -> average 2.
  EXPECT_DOUBLE_EQ(concurrency_of(iv, 1, 2).time_average, 2.0);
  EXPECT_THROW(concurrency_of(iv, 3, 3), Error);
  EXPECT_THROW(concurrency_of(std::vector<Interval>{{2, 1}}, 0, 3), Error);
}

TEST(Concurrency, RandomIntervalsMatchBruteForce) {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> start(0, 10), length(0, 3);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<Interval> iv;
    for (int i = 0; i < 30; ++i) {
      const double s = start(rng);
      iv.push_back({s, s + length(rng)});
    }
    // Brute force: the count is constant between consecutive breakpoints; evaluate at midpoints.
    std::vector<double> points = {0, 13};
    for (const Interval& x : iv) points.insert(points.end(), {x.start_s, x.end_s});
    std::sort(points.begin(), points.end());
    int peak = 0;
    double area = 0;
    for (size_t i = 1; i < points.size(); ++i) {
      if (points[i] <= points[i - 1]) continue;
      const int n = in_flight_at(iv, 0.5 * (points[i] + points[i - 1]));
      peak = std::max(peak, n);
      area += n * (points[i] - points[i - 1]);
    }
    const ConcurrencyStats c = concurrency_of(iv, 0, 13);
    EXPECT_EQ(c.peak, peak);
    EXPECT_NEAR(c.time_average, area / 13, 1e-9);
  }
}

}  // namespace
}  // namespace nibble::bench
