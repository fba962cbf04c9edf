#pragma once
// What the engine reports about itself: gauges of the KV pool and the queues, counters, and the
// latency histograms behind /metrics. A plain value: the engine thread publishes a copy after every
// step; any thread reads one with Engine::metrics().
#include <cstdint>
#include <vector>

namespace nibble::engine {

// A cumulative-bucket histogram in Prometheus' sense: counts[i] observations <= upper_bounds[i]
// (not cumulative here: bucket i alone), plus one overflow bucket (+Inf) at the end.
class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);  // strictly increasing; throws nibble::Error if not
  void observe(double value);
  const std::vector<double>& upper_bounds() const { return upper_bounds_; }
  const std::vector<int64_t>& counts() const { return counts_; }  // [upper_bounds.size() + 1]
  int64_t count() const { return count_; }
  double sum() const { return sum_; }

 private:
  std::vector<double> upper_bounds_;
  std::vector<int64_t> counts_;
  int64_t count_ = 0;
  double sum_ = 0.0;
};

// Seconds: 1 ms .. 60 s for time to first token, 1 ms .. 10 s between tokens.
std::vector<double> ttft_buckets_seconds();
std::vector<double> itl_buckets_seconds();

struct EngineMetrics {
  // gauges
  int64_t kv_pages_total = 0;
  int64_t kv_pages_free = 0;
  int64_t kv_pages_cached = 0;       // held by the prefix cache
  int64_t kv_pages_evictable = 0;    // of those, in no running request's path: freed on demand
  int64_t kv_pages_requests = 0;     // held privately by running requests (total - free - cached)
  int64_t page_size = 0;
  int64_t running_requests = 0;
  int64_t waiting_requests = 0;      // submitted, not yet admitted (engine inbox included)
  // Of those, the scheduler's queue when its last step stopped admitting for lack of KV pages (or
  // preempted for them), or at the running cap; 0 otherwise. The rest wait for compute: the step's
  // token budget went to the requests ahead of them (scheduler::QueueBlock).
  int64_t waiting_for_pages = 0;
  int64_t waiting_for_running_cap = 0;
  // counters
  int64_t requests_finished = 0;     // stop, length
  int64_t requests_cancelled = 0;
  int64_t requests_failed = 0;
  int64_t prefix_cache_hit_tokens = 0;
  int64_t prompt_tokens = 0;
  int64_t generated_tokens = 0;
  int64_t preemptions = 0;
  int64_t steps = 0;
  int64_t overlapped_steps = 0;      // steps planned and launched while the previous one's tokens were drawn
  Histogram time_to_first_token{ttft_buckets_seconds()};
  Histogram inter_token_latency{itl_buckets_seconds()};
};

}  // namespace nibble::engine
