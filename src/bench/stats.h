#pragma once
// Summary statistics of latencies and the client's own concurrency timeline.
#include <cstddef>
#include <span>
#include <vector>

namespace nibble::bench {

// The q-th percentile (q in [0, 100]) by linear interpolation between closest ranks: with the values
// sorted as v[0..n-1], rank r = q/100 * (n-1), result v[floor r] + (r - floor r) * (v[ceil r] - v[floor r]).
// This is numpy's default ("linear"). Throws nibble::Error on an empty input or q outside [0, 100].
double percentile(std::span<const double> values, double q);

struct Distribution {
  size_t count = 0;  // 0: no values; every other field is 0 then
  double mean = 0, p50 = 0, p90 = 0, p99 = 0, min = 0, max = 0;
};
Distribution summarize(std::span<const double> values);

// One request's time in flight, in seconds since the run started: the half-open interval [start, end)
// (a request that ends at t is not in flight at t; one that starts at t is).
struct Interval {
  double start_s = 0;
  double end_s = 0;
};

struct ConcurrencyStats {
  int peak = 0;               // the most intervals in flight at one instant
  double time_average = 0;    // integral of in-flight count over [window_start, window_end] / window length
};

// Concurrency of the intervals inside [window_start_s, window_end_s] (parts outside are clipped).
// Throws nibble::Error when the window is empty or an interval ends before it starts.
ConcurrencyStats concurrency_of(std::span<const Interval> intervals, double window_start_s, double window_end_s);

// How many intervals contain t (start <= t < end).
int in_flight_at(std::span<const Interval> intervals, double t_s);

}  // namespace nibble::bench
