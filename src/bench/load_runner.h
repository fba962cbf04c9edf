#pragma once
// The load generator: sends a workload's turns to an OpenAI-compatible server as streaming requests
// (SSE, stream_options.include_usage) and records each request's timeline. One thread per request
// slot (max-concurrency threads, each with its own keep-alive connection); threads sleep on a
// condition variable until a turn is due, so nothing spins.
//
// Scheduling: session s's first turn is due at its arrival time (a Poisson process of rate
// --request-rate, i.e. exponential gaps drawn from a seeded std::mt19937_64; all at t = 0 when the
// rate is infinite); turn k+1 is due think_time_s after turn k finished. A due turn is sent when a
// slot is free. After duration_s (when > 0) no new turn is sent; requests in flight finish.
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/workload.h"

namespace nibble::bench {

enum class Endpoint { kCompletions, kChat };
enum class PromptFormat { kTokenIds, kWords };

// The most request threads one run starts; an uncapped run with more sessions is capped here (the
// report then calls it client-limited when it reaches this, as it should).
constexpr int kMaxRequestThreads = 1024;

struct LoadConfig {
  std::string base_url;                 // "http://host:port" (no path)
  std::string model;                    // sent as "model"; empty: the field is left out
  Endpoint endpoint = Endpoint::kCompletions;
  PromptFormat prompt_format = PromptFormat::kTokenIds;  // kTokenIds needs kCompletions
  int max_concurrency = 0;              // requests in flight at most; 0: no cap (one slot per session)
  double request_rate = std::numeric_limits<double>::infinity();  // session arrivals per second
  double think_time_s = 0;              // between an agent session's turns
  double duration_s = 0;                // stop sending after this long; 0: send everything
  bool ignore_eos = true;               // ask for exactly max_tokens ("ignore_eos": true)
  double metrics_interval_s = 0.1;      // /metrics sampling period; 0: do not sample
  double request_timeout_s = 600;       // read timeout of one request (between bytes)
  uint64_t seed = 0;                    // arrival times
  std::function<void(size_t completed, size_t total)> on_progress;  // called after each request
};

struct RequestRecord {
  size_t session = 0, turn = 0;
  bool ok = false;
  std::string error;                    // why it failed (HTTP status and body, transport, streamed error)
  double start_s = 0, end_s = 0;        // seconds since the run started
  double first_token_s = -1;            // first chunk with text; -1: none
  std::vector<double> chunk_times_s;    // arrival time of every chunk with text
  bool usage_reported = false;          // the final usage chunk came
  int64_t prompt_tokens = 0, output_tokens = 0, cached_tokens = 0;  // from usage (output: chunks if no usage)
  int64_t prompt_units = 0, max_tokens = 0;  // what was asked
  int64_t reusable_units = 0;                // Turn::reusable_units
};

struct MetricsSample {
  double t_s = 0;                       // midpoint of the GET /metrics round trip
  std::optional<double> running, waiting;
  std::optional<double> waiting_for_pages, waiting_for_running_cap, kv_usage, preemptions;  // ServerLoad's
};

struct LoadResult {
  std::vector<RequestRecord> records;   // in completion order
  std::vector<MetricsSample> samples;   // empty when the server has no /metrics or no known names
  bool metrics_found = false;           // GET /metrics answered 200 with a known running/waiting name
  int request_slots = 0;                // threads used: the effective concurrency cap
  size_t not_sent = 0;                  // turns dropped by duration_s
  double wall_s = 0;                    // run start to the last request's end
};

LoadResult run_load(const LoadConfig& config, const std::vector<Session>& sessions);

// The JSON body of one streaming request for a turn (exposed for tests).
nlohmann::json request_body(const LoadConfig& config, const Turn& turn);

// GET /v1/models and return the first model id; nullopt when the server does not answer it.
std::optional<std::string> first_served_model(const std::string& base_url);

}  // namespace nibble::bench
