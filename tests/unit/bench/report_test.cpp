// The verdict's decision table, and a hand-computed summary of a small synthetic run.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "bench/report.h"

namespace nibble::bench {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

TEST(Verdict, DecisionTable) {
  EXPECT_EQ(decide_verdict({.concurrency_cap = 8, .peak_in_flight = 8, .metrics_found = true, .max_waiting_while_busy = 2,
                            .queued_samples = 12, .busy_samples = 40}).verdict,
            Verdict::kCapacityLimited);
  // A queue in a few of many busy samples is requests between arrival and admission on a slow server
  // (3 of 28: an ASan build of the CPU server on a loaded machine), not a full pool.
  EXPECT_EQ(decide_verdict({.concurrency_cap = 2, .peak_in_flight = 2, .metrics_found = true, .max_waiting_while_busy = 1,
                            .queued_samples = 3, .busy_samples = 28}).verdict,
            Verdict::kClientLimited);
  EXPECT_EQ(decide_verdict({.concurrency_cap = 2, .peak_in_flight = 2, .metrics_found = true, .max_waiting_while_busy = 1,
                            .queued_samples = 7, .busy_samples = 28}).verdict,
            Verdict::kCapacityLimited);
  // A queue seen in one or two samples is a request between arrival and admission, not a full pool.
  EXPECT_EQ(decide_verdict({.concurrency_cap = 8, .peak_in_flight = 8, .metrics_found = true, .max_waiting_while_busy = 1,
                            .queued_samples = kMinQueuedSamples - 1}).verdict,
            Verdict::kClientLimited);
  // Queue counts are only believed when /metrics was found.
  EXPECT_EQ(decide_verdict({.concurrency_cap = 8, .peak_in_flight = 8, .metrics_found = false, .max_waiting_while_busy = 2,
                            .queued_samples = 12}).verdict,
            Verdict::kClientLimited);
  EXPECT_EQ(decide_verdict({.concurrency_cap = 8, .peak_in_flight = 8, .metrics_found = true, .mean_unaccounted = 3.5,
                            .unaccounted_samples = 40}).verdict,
            Verdict::kServerLimited);
  // Too few /metrics samples to tell "stuck outside the scheduler" from "between arrival and admission".
  EXPECT_EQ(decide_verdict({.concurrency_cap = 8, .peak_in_flight = 8, .metrics_found = true, .mean_unaccounted = 3.5,
                            .unaccounted_samples = kMinSamplesForServerLimited - 1}).verdict,
            Verdict::kClientLimited);
  EXPECT_EQ(decide_verdict({.concurrency_cap = 8, .peak_in_flight = 8, .metrics_found = true, .mean_unaccounted = 0.4,
                            .unaccounted_samples = 40}).verdict,
            Verdict::kClientLimited);
  EXPECT_EQ(decide_verdict({.concurrency_cap = 8, .peak_in_flight = 5, .paced_arrivals = true, .metrics_found = true}).verdict,
            Verdict::kRateLimited);
  EXPECT_EQ(decide_verdict({.concurrency_cap = 0, .peak_in_flight = 5, .paced_arrivals = false}).verdict,
            Verdict::kWorkloadLimited);
  EXPECT_EQ(decide_verdict({.concurrency_cap = 8, .peak_in_flight = 5, .paced_arrivals = false}).verdict,
            Verdict::kWorkloadLimited);
  const VerdictResult unknown = decide_verdict({.concurrency_cap = 4, .peak_in_flight = 4});
  EXPECT_NE(unknown.reason.find("unknown"), std::string::npos) << unknown.reason;
}

// A queue: capacity when memory held it in at least half of the queued samples, by the server's own
// reasons first, then its KV usage; compute otherwise; capacity when the server says neither.
TEST(Verdict, QueueHeldByMemoryOrCompute) {
  const VerdictInputs queued{.concurrency_cap = 8, .peak_in_flight = 8, .metrics_found = true,
                             .max_waiting_while_busy = 5, .queued_samples = 10, .busy_samples = 20};
  auto with = [&](auto change) {
    VerdictInputs in = queued;
    change(in);
    return decide_verdict(in);
  };
  // nibble: reasons in every queued sample.
  VerdictResult r = with([](VerdictInputs& in) { in.queued_with_reasons = 10, in.queued_for_pages = 5; });
  EXPECT_EQ(r.verdict, Verdict::kCapacityLimited);
  EXPECT_NE(r.reason.find("for lack of KV pages in 5 of 10"), std::string::npos) << r.reason;
  r = with([](VerdictInputs& in) { in.queued_with_reasons = 10, in.queued_for_pages = 6, in.queued_for_running_cap = 2; });
  EXPECT_NE(r.reason.find("for lack of KV pages in 6 of 10"), std::string::npos) << r.reason;  // the pages' count
  r = with([](VerdictInputs& in) { in.queued_with_reasons = 10, in.queued_for_running_cap = 7; });
  EXPECT_EQ(r.verdict, Verdict::kCapacityLimited);
  EXPECT_NE(r.reason.find("at its cap on running requests"), std::string::npos) << r.reason;
  r = with([](VerdictInputs& in) { in.queued_with_reasons = 10, in.queued_for_pages = 3, in.queued_for_running_cap = 3; });
  EXPECT_EQ(r.verdict, Verdict::kCapacityLimited);
  EXPECT_NE(r.reason.find("for KV pages or at its running cap in 6 of 10"), std::string::npos) << r.reason;
  r = with([](VerdictInputs& in) { in.queued_with_reasons = 10, in.queued_for_pages = 4, in.preemptions = 2; });
  EXPECT_EQ(r.verdict, Verdict::kComputeLimited);
  EXPECT_NE(r.reason.find("in only 4 of 10"), std::string::npos) << r.reason;
  EXPECT_NE(r.reason.find("2 requests were preempted"), std::string::npos) << r.reason;
  // The reasons outrank the usage: a pool full of running requests with room for the next chunk.
  r = with([](VerdictInputs& in) {
    in.queued_with_reasons = 10, in.queued_with_usage = 10, in.queued_pool_full = 10, in.max_usage_queued = 0.95;
  });
  EXPECT_EQ(r.verdict, Verdict::kComputeLimited);
  // Usage only (vLLM, SGLang).
  r = with([](VerdictInputs& in) { in.queued_with_usage = 10, in.queued_pool_full = 5, in.max_usage_queued = 0.97; });
  EXPECT_EQ(r.verdict, Verdict::kCapacityLimited);
  EXPECT_NE(r.reason.find("at least 90% held in 5 of 10"), std::string::npos) << r.reason;
  r = with([](VerdictInputs& in) { in.queued_with_usage = 10, in.queued_pool_full = 4, in.max_usage_queued = 0.93; });
  EXPECT_EQ(r.verdict, Verdict::kComputeLimited);
  EXPECT_NE(r.reason.find("at most 93%"), std::string::npos) << r.reason;
  // Signals in fewer than half the queued samples are not believed either way.
  r = with([](VerdictInputs& in) { in.queued_with_reasons = 4, in.queued_with_usage = 4, in.max_usage_queued = 0.1; });
  EXPECT_EQ(r.verdict, Verdict::kCapacityLimited);
  EXPECT_NE(r.reason.find("say neither"), std::string::npos) << r.reason;
  EXPECT_EQ(verdict_name(Verdict::kComputeLimited), "compute-limited");
}

RequestRecord record(double start, double end, std::vector<double> chunks, int64_t out, int64_t prompt, int64_t cached) {
  RequestRecord r;
  r.ok = true;
  r.start_s = start;
  r.end_s = end;
  r.first_token_s = chunks.front();
  r.chunk_times_s = std::move(chunks);
  r.usage_reported = true;
  r.output_tokens = out;
  r.prompt_tokens = prompt;
  r.cached_tokens = cached;
  return r;
}

LoadResult synthetic_run(double waiting_at_busy_sample) {
  LoadResult load;
  load.records.push_back(record(0.0, 0.5, {0.1, 0.2, 0.4}, 3, 10, 4));
  load.records.push_back(record(0.25, 0.45, {0.3, 0.35}, 2, 10, 6));
  load.records[0].prompt_units = 10, load.records[0].reusable_units = 4;
  load.records[1].prompt_units = 10, load.records[1].reusable_units = 8;
  RequestRecord failed;
  failed.prompt_units = failed.reusable_units = 10;
  failed.start_s = 0.6;
  failed.end_s = 0.7;
  failed.error = "HTTP 503: busy";
  load.records.push_back(failed);
  load.metrics_found = true;
  load.request_slots = 2;
  // Three samples while the client has 2 in flight (a queue that persists, kMinQueuedSamples), one after.
  load.samples = {{.t_s = 0.3, .running = 1, .waiting = waiting_at_busy_sample},
                  {.t_s = 0.35, .running = 1, .waiting = waiting_at_busy_sample},
                  {.t_s = 0.4, .running = 1, .waiting = waiting_at_busy_sample},
                  {.t_s = 0.55, .running = 0, .waiting = 3}};  // client has none
  return load;
}

TEST(Summary, HandComputedRun) {
  const RunDescription run{.requested_concurrency = 2, .request_rate = kInf, .num_gpus = 2};
  const RunSummary s = summarize_run(run, synthetic_run(1));
  EXPECT_EQ(s.completed, 2u);
  EXPECT_EQ(s.failed, 1u);
  EXPECT_EQ(s.first_errors.at(0), "HTTP 503: busy");
  EXPECT_NEAR(s.ttft_ms.mean, 75, 1e-9);                    // 100, 50
  EXPECT_NEAR(s.tpot_ms.mean, 175, 1e-9);                   // (0.5-0.1)/2 = 200, (0.45-0.3)/1 = 150
  EXPECT_NEAR(s.output_tokens_per_s_per_user, 1000.0 / 175, 1e-9);
  EXPECT_EQ(s.itl_ms.count, 3u);                            // 100, 200, 50
  EXPECT_NEAR(s.itl_ms.p50, 100, 1e-9);
  EXPECT_NEAR(s.itl_ms.max, 200, 1e-9);
  EXPECT_NEAR(s.e2e_ms.mean, 350, 1e-9);                    // 500, 200
  EXPECT_NEAR(s.duration_s, 0.7, 1e-12);
  EXPECT_NEAR(s.output_tokens_per_s, 5 / 0.7, 1e-9);
  EXPECT_NEAR(s.output_tokens_per_s_per_gpu, 5 / 0.7 / 2, 1e-9);
  EXPECT_NEAR(s.request_throughput, 2 / 0.7, 1e-9);
  EXPECT_NEAR(s.prefix_cache_hit_rate, 0.5, 1e-12);         // (4 + 6) / 20
  EXPECT_NEAR(s.prefix_cache_ceiling, 0.6, 1e-12);          // (4 + 8) / 20; the failed request not counted
  EXPECT_NE(format_table(s).find("50.0% (ceiling 60.0%"), std::string::npos) << format_table(s);
  EXPECT_DOUBLE_EQ(to_json(s)["prefix_cache_ceiling"].get<double>(), 0.6);
  EXPECT_EQ(s.achieved.peak, 2);
  EXPECT_NEAR(s.achieved.time_average, (0.5 + 0.2 + 0.1) / 0.7, 1e-9);
  EXPECT_DOUBLE_EQ(s.server_waiting_max, 3);
  EXPECT_DOUBLE_EQ(s.verdict_inputs.max_waiting_while_busy, 1);
  EXPECT_EQ(s.verdict.verdict, Verdict::kCapacityLimited);
  // The table and JSON carry the same verdict.
  EXPECT_NE(format_table(s).find("capacity-limited"), std::string::npos);
  EXPECT_EQ(to_json(s)["verdict"], "capacity-limited");
  EXPECT_TRUE(to_json(s)["request_rate"].is_null());
}

// The server's reasons, KV usage and preemption counter, sample by sample, into the verdict's inputs.
TEST(Summary, QueueReasonsUsageAndPreemptions) {
  LoadResult load = synthetic_run(2);
  load.samples[0].waiting_for_pages = 2, load.samples[0].waiting_for_running_cap = 0;
  load.samples[1].waiting_for_pages = 0, load.samples[1].waiting_for_running_cap = 0;  // compute
  load.samples[2].waiting_for_pages = 0, load.samples[2].waiting_for_running_cap = 2;
  const double usage[] = {0.95, 0.5, 0.7, 0.1};
  const double preemptions[] = {4, 4, 6, 7};
  for (size_t i = 0; i < load.samples.size(); ++i) {
    load.samples[i].kv_usage = usage[i];
    load.samples[i].preemptions = preemptions[i];
  }
  const RunSummary s = summarize_run({.requested_concurrency = 2, .request_rate = kInf}, load);
  const VerdictInputs& v = s.verdict_inputs;
  EXPECT_EQ(v.queued_samples, 3);
  EXPECT_EQ(v.queued_with_reasons, 3);
  EXPECT_EQ(v.queued_for_pages, 1);
  EXPECT_EQ(v.queued_for_running_cap, 1);
  EXPECT_EQ(v.queued_with_usage, 3);
  EXPECT_EQ(v.queued_pool_full, 1);
  EXPECT_DOUBLE_EQ(v.max_usage_queued, 0.95);
  EXPECT_DOUBLE_EQ(v.preemptions, 3);  // 7 - 4
  EXPECT_DOUBLE_EQ(s.kv_usage_max, 0.95);
  EXPECT_NEAR(s.kv_usage_mean, (0.95 + 0.5 + 0.7 + 0.1) / 4, 1e-12);
  EXPECT_EQ(s.verdict.verdict, Verdict::kCapacityLimited);  // memory in 2 of 3
  const std::string table = format_table(s);
  EXPECT_NE(table.find("KV pages 1, running cap 1, compute 1 (of 3 queued samples)"), std::string::npos) << table;
  EXPECT_NE(table.find("95.0% / 56.2%"), std::string::npos) << table;
  EXPECT_EQ(to_json(s)["server"]["preemptions"], 3.0);
  EXPECT_EQ(to_json(s)["server"]["queued_for_pages"], 1);
  // Without these metrics: nulls in JSON, no lines in the table.
  const RunSummary bare = summarize_run({.requested_concurrency = 2, .request_rate = kInf}, synthetic_run(1));
  EXPECT_TRUE(to_json(bare)["server"]["kv_usage_max"].is_null());
  EXPECT_TRUE(to_json(bare)["server"]["preemptions"].is_null());
  EXPECT_EQ(format_table(bare).find("KV pool held"), std::string::npos);
}

TEST(Summary, QueueOnlyAfterTheClientWasDoneIsNotCapacity) {
  const RunDescription run{.requested_concurrency = 2, .request_rate = kInf};
  const RunSummary s = summarize_run(run, synthetic_run(0));
  EXPECT_DOUBLE_EQ(s.verdict_inputs.max_waiting_while_busy, 0);
  EXPECT_EQ(s.verdict.verdict, Verdict::kClientLimited);  // peak 2 == cap 2
}

}  // namespace
}  // namespace nibble::bench
