// Running/waiting counts from Prometheus text in nibble's, vLLM's and SGLang's names.
#include <gtest/gtest.h>

#include "bench/server_metrics.h"

namespace nibble::bench {
namespace {

TEST(ServerMetrics, VllmSumsOverLabelSets) {
  const ServerLoad load = parse_server_load(
      "# HELP vllm:num_requests_running Number of requests in model execution batches.\n"
      "# TYPE vllm:num_requests_running gauge\n"
      "vllm:num_requests_running{engine=\"0\",model_name=\"m\"} 3.0\n"
      "vllm:num_requests_running{engine=\"1\",model_name=\"m\"} 2.0\n"
      "vllm:num_requests_waiting{engine=\"0\",model_name=\"m\"} 7.0 1712345678000\n"
      "vllm:num_requests_waiting_by_reason{reason=\"capacity\"} 99\n");
  ASSERT_TRUE(load.running && load.waiting);
  EXPECT_DOUBLE_EQ(*load.running, 5);
  EXPECT_DOUBLE_EQ(*load.waiting, 7);
}

TEST(ServerMetrics, SglangAndNibbleNamesAndPriority) {
  ServerLoad load = parse_server_load("sglang:num_running_reqs{model_name=\"x\"} 4\nsglang:num_queue_reqs{model_name=\"x\"} 0\n");
  EXPECT_DOUBLE_EQ(load.running.value(), 4);
  EXPECT_DOUBLE_EQ(load.waiting.value(), 0);
  load = parse_server_load("vllm:num_requests_running 9\nnibble_requests_running 2\nnibble_requests_waiting 1\n");
  EXPECT_DOUBLE_EQ(load.running.value(), 2);  // nibble's name first
  EXPECT_DOUBLE_EQ(load.waiting.value(), 1);
}

TEST(ServerMetrics, OddLabelsMalformedLinesAndAbsence) {
  const ServerLoad load = parse_server_load(
      "nibble:num_requests_running{path=\"/a}b\",q=\"say \\\"hi\\\"\"} 6\r\n"
      "nibble:num_requests_waiting{broken 5\n"
      "nibble:num_requests_waiting NaN\n"
      "nibble:num_requests_waiting twelve\n");
  EXPECT_DOUBLE_EQ(load.running.value(), 6);
  EXPECT_FALSE(load.waiting.has_value());
  const ServerLoad none = parse_server_load("process_cpu_seconds_total 1.5\n");
  EXPECT_FALSE(none.running || none.waiting);
}

TEST(ServerMetrics, WhyRequestsWaitKvUsageAndPreemptions) {
  ServerLoad load = parse_server_load(
      "nibble_kv_pages_total{model=\"m\"} 200\n"
      "nibble_kv_pages_free{model=\"m\"} 30\n"
      "nibble_kv_pages_evictable{model=\"m\"} 20\n"
      "nibble_requests_waiting{model=\"m\"} 3\n"
      "nibble_requests_waiting_for_pages{model=\"m\"} 3\n"
      "nibble_requests_waiting_for_running_cap{model=\"m\"} 0\n"
      "nibble_preemptions_total{model=\"m\"} 12\n"
      "vllm:kv_cache_usage_perc 0.2\n");
  EXPECT_DOUBLE_EQ(load.kv_usage.value(), 0.75);  // nibble's pages first
  EXPECT_DOUBLE_EQ(load.waiting_for_pages.value(), 3);
  EXPECT_DOUBLE_EQ(load.waiting_for_running_cap.value(), 0);
  EXPECT_DOUBLE_EQ(load.preemptions.value(), 12);
  load = parse_server_load("vllm:gpu_cache_usage_perc{engine=\"0\"} 0.5\nvllm:num_preemptions_total 4\n");
  EXPECT_DOUBLE_EQ(load.kv_usage.value(), 0.5);
  EXPECT_DOUBLE_EQ(load.preemptions.value(), 4);
  EXPECT_FALSE(load.waiting_for_pages || load.waiting_for_running_cap);
  EXPECT_DOUBLE_EQ(parse_server_load("sglang:token_usage{model_name=\"x\"} 0.875\n").kv_usage.value(), 0.875);
  // A pool of 0 pages, a usage past 1 or below 0: no usage.
  EXPECT_FALSE(parse_server_load("nibble_kv_pages_total 0\nnibble_kv_pages_free 0\nnibble_kv_pages_evictable 0\n").kv_usage);
  EXPECT_FALSE(parse_server_load("nibble_kv_pages_total 10\nnibble_kv_pages_free 8\n").kv_usage);  // no evictable count
  EXPECT_FALSE(parse_server_load("vllm:kv_cache_usage_perc 87.5\n").kv_usage);
  EXPECT_FALSE(parse_server_load("sglang:token_usage -0.1\n").kv_usage);
  // Label sets whose sum overflows: no count (the name is not tried further down the list either).
  const ServerLoad huge = parse_server_load("nibble_requests_running{a=\"1\"} 1e308\nnibble_requests_running{a=\"2\"} 1e308\n"
                                            "vllm:num_requests_running 4\n");
  EXPECT_FALSE(huge.running);
}

}  // namespace
}  // namespace nibble::bench
