// Whole runs against the fake OpenAI-compatible server (fake_openai_server.h) on 127.0.0.1: the
// verdicts, the request bodies, token counts and cached tokens, think time and --duration.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "bench/load_runner.h"
#include "bench/report.h"
#include "common/error.h"
#include "fake_openai_server.h"

namespace nibble::bench {
namespace {

using fake::FakeOpenAiServer;
using fake::FakeServerConfig;

constexpr double kInf = std::numeric_limits<double>::infinity();

std::vector<Session> random_sessions(int64_t n, int64_t input, int64_t output) {
  return generate_workload({.input_len = {input, input}, .output_len = {output, output}, .num_requests = n, .seed = 1});
}

RunSummary run_and_summarize(const LoadConfig& config, const std::vector<Session>& sessions, LoadResult* out = nullptr) {
  LoadResult load = run_load(config, sessions);
  RunSummary s = summarize_run({.requested_concurrency = config.max_concurrency, .request_rate = config.request_rate,
                                .think_time_s = config.think_time_s},
                               load);
  if (out) *out = std::move(load);
  return s;
}

TEST(LoadRunner, CapEqualToServerSlotsIsClientLimited) {
  FakeOpenAiServer server({.slots = 4, .ttft_s = 0.02, .itl_s = 0.005});
  const auto sessions = random_sessions(16, 12, 8);
  LoadResult load;
  const RunSummary s = run_and_summarize({.base_url = server.base_url(), .model = "fake-model", .max_concurrency = 4,
                                          .metrics_interval_s = 0.01},
                                         sessions, &load);
  EXPECT_EQ(s.completed, 16u) << (s.first_errors.empty() ? "" : s.first_errors[0]);
  EXPECT_EQ(s.failed, 0u);
  EXPECT_EQ(s.output_tokens, 16 * 8);
  EXPECT_EQ(s.prompt_tokens, 16 * 12);
  EXPECT_EQ(s.achieved.peak, 4);
  EXPECT_GT(s.achieved.time_average, 2.5);
  EXPECT_LE(s.achieved.time_average, 4.0);
  EXPECT_EQ(server.peak_running(), 4);
  EXPECT_EQ(server.peak_waiting(), 0);
  EXPECT_TRUE(s.metrics_found);
  EXPECT_GT(s.metrics_samples, 3u);
  EXPECT_EQ(s.server_waiting_max, 0);
  EXPECT_EQ(s.verdict.verdict, Verdict::kClientLimited) << s.verdict.reason;
  // Timing lower bounds that sleeping guarantees; upper bounds generous for a loaded machine.
  EXPECT_GE(s.ttft_ms.min, 20.0);
  EXPECT_GE(s.tpot_ms.p50, 5.0 * 6 / 7);  // the last chunk's gap is followed by the usage chunk, not a token
  EXPECT_LT(s.tpot_ms.p50, 100.0);
  EXPECT_EQ(s.itl_ms.count, 16u * 7);
  EXPECT_GE(s.itl_ms.mean, 4.0);  // single gaps can shrink when the client reads late; their sum cannot
  for (const RequestRecord& r : load.records) EXPECT_EQ(r.chunk_times_s.size(), 8u);
  // The request as sent: token ids of the workload, streaming with usage, ignore_eos, the model.
  const auto bodies = server.bodies();
  ASSERT_EQ(bodies.size(), 16u);
  std::map<std::vector<int32_t>, int> sent;
  for (const auto& b : bodies) {
    EXPECT_EQ(b["model"], "fake-model");
    EXPECT_EQ(b["max_tokens"], 8);
    EXPECT_EQ(b["ignore_eos"], true);
    EXPECT_EQ(b["stream_options"]["include_usage"], true);
    ++sent[b["prompt"].get<std::vector<int32_t>>()];
  }
  for (const Session& session : sessions) EXPECT_EQ(sent[session.turns[0].segments[0].units], 1);
}

TEST(LoadRunner, ServerQueueMakesItCapacityLimited) {
  FakeOpenAiServer server({.slots = 2, .ttft_s = 0.02, .itl_s = 0.005});
  const RunSummary s = run_and_summarize({.base_url = server.base_url(), .max_concurrency = 8, .metrics_interval_s = 0.01},
                                         random_sessions(16, 6, 8));
  EXPECT_EQ(s.completed, 16u);
  EXPECT_GE(server.peak_waiting(), 1);
  EXPECT_EQ(server.peak_running(), 2);
  EXPECT_GT(s.server_waiting_max, 0);
  EXPECT_LE(s.server_waiting_max, 6);
  EXPECT_LE(s.server_running_max, 2);
  EXPECT_EQ(s.achieved.peak, 8);  // the client reached its cap too; the server's queue decides
  EXPECT_EQ(s.verdict.verdict, Verdict::kCapacityLimited) << s.verdict.reason << " samples " << s.metrics_samples
                                                         << " duration " << s.duration_s;
  // Queued requests wait for a slot: some TTFT must include at least one whole request (20 + 7*5 ms).
  EXPECT_GT(s.ttft_ms.max, 55.0);
}

TEST(LoadRunner, PacedArrivalsBelowTheCapAreRateLimited) {
  FakeOpenAiServer server({.slots = 16, .ttft_s = 0.005, .itl_s = 0.002});
  const RunSummary s = run_and_summarize(
      {.base_url = server.base_url(), .max_concurrency = 16, .request_rate = 20, .metrics_interval_s = 0.02, .seed = 3},
      random_sessions(10, 4, 4));
  EXPECT_EQ(s.completed, 10u);
  EXPECT_LT(s.achieved.peak, 16);
  EXPECT_EQ(s.verdict.verdict, Verdict::kRateLimited) << s.verdict.reason;
}

TEST(LoadRunner, NoMetricsEndpointSaysTheQueueIsUnknown) {
  FakeOpenAiServer server({.slots = 2, .ttft_s = 0.005, .itl_s = 0.002, .metrics = false});
  const RunSummary s = run_and_summarize({.base_url = server.base_url(), .max_concurrency = 2}, random_sessions(6, 4, 4));
  EXPECT_EQ(s.completed, 6u);
  EXPECT_FALSE(s.metrics_found);
  EXPECT_EQ(s.verdict.verdict, Verdict::kClientLimited);
  EXPECT_NE(s.verdict.reason.find("unknown"), std::string::npos);
}

// Cached tokens flow from usage into the hit rate: with one request at a time the fake's prefix cache
// returns, per request, the longest common prefix with every earlier prompt (brute force here).
TEST(LoadRunner, AgentSessionsReportPrefixHitsAndKeepThinkTime) {
  FakeOpenAiServer server({.slots = 4, .ttft_s = 0.002, .itl_s = 0.001});
  const auto sessions = generate_workload({.kind = WorkloadKind::kAgent, .input_len = {4, 8}, .output_len = {3, 3},
                                           .turns = 3, .num_requests = 6, .seed = 2});
  LoadResult load;
  const RunSummary s = run_and_summarize(
      {.base_url = server.base_url(), .max_concurrency = 1, .think_time_s = 0.03, .metrics_interval_s = 0}, sessions, &load);
  ASSERT_EQ(s.completed, 6u);
  int64_t expected_cached = 0, expected_prompt = 0;
  std::vector<std::vector<int32_t>> earlier;
  std::map<size_t, double> last_end;  // session -> end of its previous turn
  for (const RequestRecord& r : load.records) {
    std::vector<int32_t> ids;
    for (const Segment& seg : sessions[r.session].turns[r.turn].segments) ids.insert(ids.end(), seg.units.begin(), seg.units.end());
    int64_t best = 0;
    for (const auto& e : earlier) best = std::max<int64_t>(best, std::mismatch(ids.begin(), ids.end(), e.begin(), e.end()).first - ids.begin());
    EXPECT_EQ(r.cached_tokens, best);
    if (r.turn > 0) {
      EXPECT_GE(r.cached_tokens, sessions[r.session].turns[r.turn - 1].prompt_units());
      EXPECT_GE(r.start_s - last_end.at(r.session), 0.03 - 1e-6);
    }
    last_end[r.session] = r.end_s;
    expected_cached += best;
    expected_prompt += static_cast<int64_t>(ids.size());
    earlier.push_back(ids);
  }
  EXPECT_GT(expected_cached, 0);
  EXPECT_EQ(s.cached_tokens, expected_cached);
  EXPECT_NEAR(s.prefix_cache_hit_rate, static_cast<double>(expected_cached) / expected_prompt, 1e-12);
}

TEST(LoadRunner, ChatEndpointSendsMessages) {
  FakeOpenAiServer server({.slots = 2, .ttft_s = 0.002, .itl_s = 0.001});
  const auto sessions = generate_workload({.kind = WorkloadKind::kAgent, .input_len = {5, 5}, .output_len = {2, 2},
                                           .turns = 2, .num_requests = 2, .seed = 4});
  const RunSummary s = run_and_summarize({.base_url = server.base_url(), .endpoint = Endpoint::kChat,
                                          .prompt_format = PromptFormat::kWords, .max_concurrency = 1,
                                          .metrics_interval_s = 0},
                                         sessions);
  EXPECT_EQ(s.completed, 2u);
  EXPECT_EQ(s.prompt_tokens, 5 + (5 + 2 + 5));  // words: user, then user + assistant + user
  const auto bodies = server.bodies();
  ASSERT_EQ(bodies.size(), 2u);
  EXPECT_EQ(bodies[1]["messages"].size(), 3u);
  EXPECT_EQ(bodies[1]["messages"][1]["role"], "assistant");
  EXPECT_EQ(bodies[1]["messages"][0]["content"], units_to_words(sessions[0].turns[0].segments[0].units));
}

TEST(LoadRunner, DurationStopsSendingAndErrorsAreReported) {
  FakeOpenAiServer server({.slots = 2, .ttft_s = 0.02, .itl_s = 0.01});
  LoadResult load;
  const RunSummary s = run_and_summarize(
      {.base_url = server.base_url(), .max_concurrency = 2, .duration_s = 0.15, .metrics_interval_s = 0},
      random_sessions(40, 4, 5), &load);
  EXPECT_GT(s.not_sent, 0u);
  EXPECT_EQ(s.completed + s.not_sent, 40u);
  for (const RequestRecord& r : load.records) EXPECT_LT(r.start_s, 0.15 + 0.05);
  // A base URL with a path is rejected; a refused connection is a per-request transport error.
  EXPECT_THROW(run_load({.base_url = "http://127.0.0.1:1/v1"}, random_sessions(1, 1, 1)), Error);
  const RunSummary refused = run_and_summarize({.base_url = "http://127.0.0.1:1", .metrics_interval_s = 0}, random_sessions(2, 1, 1));
  EXPECT_EQ(refused.failed, 2u);
  EXPECT_NE(refused.first_errors.at(0).find("transport error"), std::string::npos);
}

}  // namespace
}  // namespace nibble::bench
