#pragma once
// The server's own view of its load, read from a Prometheus text exposition (GET /metrics).
#include <optional>
#include <string_view>

namespace nibble::bench {

// Requests the server's scheduler is running and holding in its queue. A count is absent when none
// of its metric names appears. Names tried, first found wins (all label sets of it are summed, e.g.
// vLLM's one series per engine):
//   running: nibble_requests_running (nibble serve, src/server/metrics_text.cpp), nibble:num_requests_running,
//            vllm:num_requests_running, sglang:num_running_reqs
//   waiting: nibble_requests_waiting, nibble:num_requests_waiting, vllm:num_requests_waiting,
//            sglang:num_queue_reqs
//
// Why requests wait, to tell a full KV pool from a queue behind compute:
//   waiting_for_pages, waiting_for_running_cap   of the waiting requests, those the scheduler's last
//                step could not admit for lack of KV pages, or at its cap on running requests (the
//                rest waited for compute): nibble_requests_waiting_for_pages,
//                nibble_requests_waiting_for_running_cap
//   kv_usage     the fraction of its KV pool held by running requests, 0..1 (what a new request
//                cannot have: a prefix cache's pages count where a running request uses them):
//                1 - (nibble_kv_pages_free + nibble_kv_pages_evictable) / nibble_kv_pages_total;
//                vllm:kv_cache_usage_perc, vllm:gpu_cache_usage_perc (fractions despite the name);
//                sglang:token_usage. The verdict reads it where a server does not say why requests
//                wait.
//   preemptions  counter of requests put back for lack of KV pages: nibble_preemptions_total,
//                vllm:num_preemptions_total
struct ServerLoad {
  std::optional<double> running;
  std::optional<double> waiting;
  std::optional<double> waiting_for_pages;
  std::optional<double> waiting_for_running_cap;
  std::optional<double> kv_usage;
  std::optional<double> preemptions;
};

// Lines: "# ..." comments; "name value [timestamp]" or "name{labels} value [timestamp]". Malformed
// lines are skipped (a metrics page is advisory; the run does not stop over it).
ServerLoad parse_server_load(std::string_view prometheus_text);

}  // namespace nibble::bench
