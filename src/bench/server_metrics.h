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
struct ServerLoad {
  std::optional<double> running;
  std::optional<double> waiting;
};

// Lines: "# ..." comments; "name value [timestamp]" or "name{labels} value [timestamp]". Malformed
// lines are skipped (a metrics page is advisory; the run does not stop over it).
ServerLoad parse_server_load(std::string_view prometheus_text);

}  // namespace nibble::bench
