#pragma once
// What one benchmark run measured, the verdict on what limited it, and its JSON and table forms.
//
// The verdict, decided in this order (decide_verdict):
//   capacity-limited  the server's /metrics showed waiting > 0 while the client had requests in flight,
//                     in at least kMinQueuedSamples samples and kMinQueuedFraction of those with requests
//                     in flight ("queued"), and in at least half of those queued samples the queue was
//                     held by memory: the server said its requests waited for KV pages or at its cap on
//                     running requests (nibble), or, where it does not say why, its KV pool was at least
//                     kFullPoolUsage held; or it gave neither signal. The throughput is the server's
//                     capacity at this load.
//   compute-limited   queued as above, but the memory signals held in fewer than half of the queued
//                     samples: mostly the requests waited for compute (the prefills ahead of them took
//                     each step's token budget), so the throughput is the server's compute at this load
//                     more than its KV memory. The counts in the reason say how mixed it was: a pool
//                     that fills between long prefills holds the queue in some samples and compute in
//                     the rest. (Where a server gives only its KV usage, a cap on running requests
//                     cannot be told from compute: the reason says so.)
//   server-limited    no queue in /metrics, but on average max(1, peak/4) of the requests the client had
//                     in flight were neither running nor waiting in the server: they sat outside its
//                     scheduler (HTTP accept queue, too few handler threads), a limit its metrics hide.
//                     (The slack allows for the moments between a request's end in the server and its
//                     last bytes reaching the client.)
//   client-limited    the peak of the client's in-flight requests reached the concurrency cap (the
//                     requested --max-concurrency, or the client's thread limit) and the server never
//                     queued: the run measured the cap, not the server ("requested 70, achieved 70").
//                     Without /metrics the server's queue is unknown; the reason says so.
//   rate-limited      the cap was never reached and arrivals were paced (--request-rate, think time):
//                     the offered load set the numbers and the server kept up.
//   workload-limited  none of the above: every request was in flight without reaching the cap (fewer
//                     requests than the cap, all sent at once).
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/load_runner.h"
#include "bench/stats.h"

namespace nibble::bench {

enum class Verdict { kCapacityLimited, kComputeLimited, kServerLimited, kClientLimited, kRateLimited, kWorkloadLimited };
std::string_view verdict_name(Verdict v);

struct VerdictInputs {
  int concurrency_cap = 0;           // the in-flight cap in force (0: none)
  int peak_in_flight = 0;            // from the client's timeline
  bool paced_arrivals = false;       // finite request rate or think time > 0
  bool metrics_found = false;
  double max_waiting_while_busy = 0;  // max server "waiting" over samples with client requests in flight
  int queued_samples = 0;             // samples in which the server had requests waiting while the client was busy
  int busy_samples = 0;               // samples in which the client had requests in flight
  double mean_unaccounted = 0;       // mean over samples of client in flight - server running - waiting
  int unaccounted_samples = 0;       // samples behind mean_unaccounted
  // Of the queued samples: those in which the server said why its queue waited, and among them those
  // held for KV pages and at the running cap; those with a KV usage, and among them those with the
  // pool at least kFullPoolUsage held (with the largest usage seen).
  int queued_with_reasons = 0;
  int queued_for_pages = 0;
  int queued_for_running_cap = 0;
  int queued_with_usage = 0;
  int queued_pool_full = 0;
  double max_usage_queued = 0;
  double preemptions = -1;           // during the run (the counter's last sample minus its first); -1: unknown
};
// A KV pool at least this much held by running requests counts as full: a server that admits a
// request's first chunk while it has pages for it keeps its pool near 100% held when memory is what
// limits it.
inline constexpr double kFullPoolUsage = 0.9;
// Fewer samples than this cannot tell requests stuck outside the scheduler from the moments between
// a request's arrival and its admission, so they never make a run "server-limited".
inline constexpr int kMinSamplesForServerLimited = 10;
// A request is "waiting" from its arrival until the next engine step admits it; a queue seen in fewer
// samples than this was that moment, not a full KV pool, and does not make a run "capacity-limited".
inline constexpr int kMinQueuedSamples = 3;
// Nor does a queue seen in fewer than this fraction of the samples with requests in flight: each
// arrival waits for the next engine step, and where steps are slow (a sanitizer build, a loaded
// machine) a run of a few dozen samples catches several such waits. A full pool keeps a queue in
// most samples. (A CPU server under ASan on a busy 2-core machine: 3 of 28 samples, 2 requests in
// flight against a cap of 8 running, was called capacity-limited before this rule.)
inline constexpr double kMinQueuedFraction = 0.25;

struct VerdictResult {
  Verdict verdict;
  std::string reason;  // one sentence with the numbers behind it
};
VerdictResult decide_verdict(const VerdictInputs& in);

// What was asked, echoed into the report.
struct RunDescription {
  std::string label;
  std::string base_url, model, endpoint, workload;
  int requested_concurrency = 0;  // 0: no cap
  double request_rate = 0;        // inf: all at once
  double think_time_s = 0;
  int num_gpus = 1;
  std::string command;            // the command line that produced the run
};

struct RunSummary {
  RunDescription run;
  size_t completed = 0, failed = 0, not_sent = 0;
  std::vector<std::string> first_errors;  // up to 3
  size_t without_usage = 0;               // completed requests whose stream had no usage chunk
  double duration_s = 0;                  // first request start to last request end
  double request_throughput = 0;          // completed requests / s
  double input_tokens_per_s = 0, output_tokens_per_s = 0;
  double output_tokens_per_s_per_gpu = 0;
  double output_tokens_per_s_per_user = 0;  // 1000 / mean TPOT (ms): one stream's decode speed
  int64_t prompt_tokens = 0, output_tokens = 0, cached_tokens = 0;
  double prefix_cache_hit_rate = 0;       // cached_tokens / prompt_tokens
  // The most the workload lets a prefix cache serve: reusable over prompt units of the completed
  // requests (Turn::reusable_units; units are tokens in the ids prompt format). Page granularity and
  // requests sent together (a shared prefix computed twice) can keep a server below it.
  double prefix_cache_ceiling = 0;
  Distribution ttft_ms, tpot_ms, itl_ms, e2e_ms;
  int request_slots = 0;
  ConcurrencyStats achieved;              // client's timeline over [first start, last end]
  bool metrics_found = false;
  size_t metrics_samples = 0;
  double server_running_max = 0, server_running_mean = 0, server_waiting_max = 0, server_waiting_mean = 0;
  double kv_usage_max = -1, kv_usage_mean = -1;  // over the samples with a KV usage; -1: none had one
  VerdictInputs verdict_inputs;
  VerdictResult verdict;
};

// TTFT: first chunk with text - request start. ITL: gaps between consecutive text chunks (a chunk may
// carry several tokens). TPOT: (end - first chunk) / (output tokens - 1), for requests with >= 2
// output tokens. E2E: end - start. Failed requests count only in `failed`.
RunSummary summarize_run(const RunDescription& run, const LoadResult& load);

nlohmann::json to_json(const RunSummary& s);
std::string format_table(const RunSummary& s);

}  // namespace nibble::bench
