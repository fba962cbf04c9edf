#include "bench/stats.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <utility>

#include "common/error.h"

namespace nibble::bench {

double percentile(std::span<const double> values, double q) {
  NIBBLE_CHECK(!values.empty(), "percentile of an empty set");
  NIBBLE_CHECK(q >= 0 && q <= 100, "percentile: q must be in [0, 100], got {}", q);
  std::vector<double> sorted(values.begin(), values.end());
  std::sort(sorted.begin(), sorted.end());
  const double rank = q / 100.0 * static_cast<double>(sorted.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (rank - static_cast<double>(lo)) * (sorted[hi] - sorted[lo]);
}

Distribution summarize(std::span<const double> values) {
  Distribution d;
  if (values.empty()) return d;
  d.count = values.size();
  d.mean = std::accumulate(values.begin(), values.end(), 0.0) / static_cast<double>(values.size());
  d.p50 = percentile(values, 50);
  d.p90 = percentile(values, 90);
  d.p99 = percentile(values, 99);
  const auto [lo, hi] = std::minmax_element(values.begin(), values.end());
  d.min = *lo;
  d.max = *hi;
  return d;
}

ConcurrencyStats concurrency_of(std::span<const Interval> intervals, double window_start_s, double window_end_s) {
  NIBBLE_CHECK(window_end_s > window_start_s, "concurrency window [{}, {}] is empty", window_start_s, window_end_s);
  // Events (time, +1 start / -1 end); at equal times ends sort first, so [a, b) and [b, c) never overlap.
  std::vector<std::pair<double, int>> events;
  events.reserve(intervals.size() * 2);
  double area = 0;
  for (const Interval& iv : intervals) {
    NIBBLE_CHECK(iv.end_s >= iv.start_s, "interval ends ({}) before it starts ({})", iv.end_s, iv.start_s);
    const double a = std::max(iv.start_s, window_start_s), b = std::min(iv.end_s, window_end_s);
    if (b <= a) continue;
    area += b - a;
    events.emplace_back(a, +1);
    events.emplace_back(b, -1);
  }
  std::sort(events.begin(), events.end());
  ConcurrencyStats c;
  int now = 0;
  for (const auto& [t, delta] : events) {
    now += delta;
    c.peak = std::max(c.peak, now);
  }
  c.time_average = area / (window_end_s - window_start_s);
  return c;
}

int in_flight_at(std::span<const Interval> intervals, double t_s) {
  return static_cast<int>(std::count_if(intervals.begin(), intervals.end(),
                                        [&](const Interval& iv) { return iv.start_s <= t_s && t_s < iv.end_s; }));
}

}  // namespace nibble::bench
