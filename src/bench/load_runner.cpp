#include "bench/load_runner.h"

#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <mutex>
#include <queue>
#include <random>
#include <thread>

#include "bench/server_metrics.h"
#include "bench/sse.h"
#include "common/error.h"

namespace nibble::bench {
namespace {

using Clock = std::chrono::steady_clock;

std::chrono::microseconds to_duration(double seconds) {
  return std::chrono::microseconds(static_cast<int64_t>(seconds * 1e6));
}

void check_base_url(const std::string& url) {
  const size_t scheme = url.find("://");
  NIBBLE_CHECK(scheme != std::string::npos && url.substr(0, scheme) == "http",
               "--base-url must look like http://host:port, got '{}'", url);
  const size_t path = url.find('/', scheme + 3);
  NIBBLE_CHECK(path == std::string::npos || path == url.size() - 1,
               "--base-url must not have a path (the client adds /v1/...), got '{}'", url);
}

std::string without_trailing_slash(std::string url) {
  if (!url.empty() && url.back() == '/') url.pop_back();
  return url;
}

// A due turn: session s's turn t may be sent from ready_s on.
struct DueTurn {
  double ready_s;
  size_t session, turn;
  bool operator>(const DueTurn& o) const { return ready_s > o.ready_s || (ready_s == o.ready_s && session > o.session); }
};

class LoadRun {
 public:
  LoadRun(const LoadConfig& config, const std::vector<Session>& sessions) : config_(config), sessions_(sessions) {}

  LoadResult run() {
    for (const Session& s : sessions_) total_turns_ += s.turns.size();
    std::mt19937_64 rng(config_.seed);
    std::exponential_distribution<double> gap(std::isfinite(config_.request_rate) ? config_.request_rate : 1.0);
    double arrival = 0;
    for (size_t s = 0; s < sessions_.size(); ++s) {
      if (sessions_[s].turns.empty()) continue;
      due_.push({arrival, s, 0});
      ++open_sessions_;
      if (std::isfinite(config_.request_rate)) arrival += gap(rng);
    }
    const size_t wanted = config_.max_concurrency > 0 ? static_cast<size_t>(config_.max_concurrency) : open_sessions_;
    result_.request_slots = static_cast<int>(std::min({wanted, open_sessions_ ? open_sessions_ : 1,
                                                       static_cast<size_t>(kMaxRequestThreads)}));
    start_ = Clock::now();
    std::thread sampler;
    if (config_.metrics_interval_s > 0) sampler = std::thread([this] { sample_metrics(); });
    std::vector<std::thread> workers;
    for (int i = 0; i < result_.request_slots; ++i) workers.emplace_back([this] { work(); });
    for (std::thread& w : workers) w.join();
    {
      std::lock_guard lock(mu_);
      finished_ = true;
    }
    cv_.notify_all();
    if (sampler.joinable()) sampler.join();
    for (const RequestRecord& r : result_.records) result_.wall_s = std::max(result_.wall_s, r.end_s);
    return std::move(result_);
  }

 private:
  double now_s() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }

  void work() {
    httplib::Client client(config_.base_url);
    client.set_keep_alive(true);
    client.set_tcp_nodelay(true);
    client.set_connection_timeout(std::chrono::seconds(10));
    client.set_read_timeout(to_duration(config_.request_timeout_s));
    client.set_write_timeout(std::chrono::seconds(30));
    std::unique_lock lock(mu_);
    while (true) {
      if (open_sessions_ == 0) return;
      if (due_.empty()) {
        cv_.wait(lock);
        continue;
      }
      const DueTurn next = due_.top();
      const bool past_deadline = config_.duration_s > 0 && (next.ready_s >= config_.duration_s || now_s() >= config_.duration_s);
      if (past_deadline) {
        due_.pop();
        result_.not_sent += sessions_[next.session].turns.size() - next.turn;
        close_session();
        continue;
      }
      if (next.ready_s > now_s()) {
        cv_.wait_until(lock, start_ + to_duration(next.ready_s));
        continue;
      }
      due_.pop();
      lock.unlock();
      RequestRecord record = send(client, next.session, next.turn);
      lock.lock();
      const bool more = next.turn + 1 < sessions_[next.session].turns.size();
      if (more) {
        due_.push({record.end_s + config_.think_time_s, next.session, next.turn + 1});
      } else {
        close_session();
      }
      result_.records.push_back(std::move(record));
      if (config_.on_progress) config_.on_progress(result_.records.size() + result_.not_sent, total_turns_);
      cv_.notify_all();
    }
  }

  void close_session() {
    if (--open_sessions_ == 0) cv_.notify_all();
  }

  RequestRecord send(httplib::Client& client, size_t session, size_t turn_index) {
    const Turn& turn = sessions_[session].turns[turn_index];
    RequestRecord r;
    r.session = session;
    r.turn = turn_index;
    r.prompt_units = turn.prompt_units();
    r.max_tokens = turn.max_tokens;
    r.reusable_units = turn.reusable_units;
    int64_t text_chunks = 0;
    int status = 0;
    std::string error_body;
    SseParser parser([&](std::string_view data) {
      StreamChunk chunk;
      try {
        chunk = parse_stream_chunk(data);
      } catch (const Error& e) {
        if (r.error.empty()) r.error = e.what();
        return;
      }
      if (!chunk.error.empty() && r.error.empty()) r.error = "server streamed an error: " + chunk.error;
      if (!chunk.text.empty()) {
        const double t = now_s();
        if (r.first_token_s < 0) r.first_token_s = t;
        r.chunk_times_s.push_back(t);
        ++text_chunks;
      }
      if (chunk.has_usage) {
        r.usage_reported = true;
        r.prompt_tokens = chunk.prompt_tokens;
        r.output_tokens = chunk.completion_tokens;
        r.cached_tokens = chunk.cached_tokens;
      }
    });
    httplib::Request req;
    req.method = "POST";
    req.path = config_.endpoint == Endpoint::kChat ? "/v1/chat/completions" : "/v1/completions";
    req.headers = {{"Accept", "text/event-stream"}};
    req.set_header("Content-Type", "application/json");
    req.body = request_body(config_, turn).dump();
    req.response_handler = [&](const httplib::Response& res) {
      status = res.status;
      return true;
    };
    req.content_receiver = [&](const char* data, size_t size, uint64_t, uint64_t) {
      if (status == 200) {
        parser.feed(std::string_view(data, size));
      } else if (error_body.size() < 2000) {
        error_body.append(data, std::min<size_t>(size, 2000 - error_body.size()));
      }
      return true;
    };
    httplib::Response res;
    httplib::Error transport = httplib::Error::Success;
    r.start_s = now_s();
    const bool sent = client.send(req, res, transport);
    r.end_s = now_s();
    if (!sent) {
      r.error = "transport error: " + httplib::to_string(transport);
    } else if (status != 200) {
      r.error = "HTTP " + std::to_string(status) + ": " + error_body;
    } else if (r.error.empty() && text_chunks == 0 && r.output_tokens == 0) {
      r.error = "the stream carried no tokens";
    }
    if (!r.usage_reported) r.output_tokens = text_chunks;
    r.ok = r.error.empty();
    return r;
  }

  void sample_metrics() {
    httplib::Client client(config_.base_url);
    client.set_connection_timeout(std::chrono::seconds(2));
    client.set_read_timeout(std::chrono::seconds(5));
    std::unique_lock lock(mu_);
    while (!finished_) {
      lock.unlock();
      const double t0 = now_s();
      const httplib::Result res = client.Get("/metrics");
      const double t1 = now_s();
      std::optional<ServerLoad> load;
      if (res && res->status == 200) load = parse_server_load(res->body);
      lock.lock();
      const bool usable = load && (load->running || load->waiting);
      // An answer without usable counts (404, unknown names) before any sample: the server has none; stop
      // asking. A transport failure may be passing: try again next period.
      if (res && !usable && result_.samples.empty()) return;
      if (usable) {
        result_.metrics_found = true;
        result_.samples.push_back({.t_s = 0.5 * (t0 + t1),
                                   .running = load->running,
                                   .waiting = load->waiting,
                                   .waiting_for_pages = load->waiting_for_pages,
                                   .waiting_for_running_cap = load->waiting_for_running_cap,
                                   .kv_usage = load->kv_usage,
                                   .preemptions = load->preemptions});
      }
      cv_.wait_for(lock, to_duration(config_.metrics_interval_s), [this] { return finished_; });
    }
  }

  const LoadConfig& config_;
  const std::vector<Session>& sessions_;
  Clock::time_point start_;
  std::mutex mu_;  // guards everything below
  std::condition_variable cv_;
  std::priority_queue<DueTurn, std::vector<DueTurn>, std::greater<>> due_;
  size_t open_sessions_ = 0;
  size_t total_turns_ = 0;
  bool finished_ = false;
  LoadResult result_;
};

}  // namespace

nlohmann::json request_body(const LoadConfig& config, const Turn& turn) {
  nlohmann::json body = {{"max_tokens", turn.max_tokens},
                         {"stream", true},
                         {"stream_options", {{"include_usage", true}}},
                         {"temperature", 0.0}};
  if (!config.model.empty()) body["model"] = config.model;
  if (config.ignore_eos) body["ignore_eos"] = true;
  if (config.endpoint == Endpoint::kChat) {
    NIBBLE_CHECK(config.prompt_format == PromptFormat::kWords, "the chat endpoint takes text: use --prompt-format words");
    nlohmann::json messages = nlohmann::json::array();
    for (const Segment& s : turn.segments) {
      messages.push_back({{"role", s.role == Role::kUser ? "user" : "assistant"}, {"content", units_to_words(s.units)}});
    }
    body["messages"] = std::move(messages);
  } else if (config.prompt_format == PromptFormat::kTokenIds) {
    std::vector<int32_t> ids;
    for (const Segment& s : turn.segments) ids.insert(ids.end(), s.units.begin(), s.units.end());
    body["prompt"] = std::move(ids);
  } else {
    std::string text;
    for (const Segment& s : turn.segments) text += (text.empty() ? "" : " ") + units_to_words(s.units);
    body["prompt"] = std::move(text);
  }
  return body;
}

LoadResult run_load(const LoadConfig& config, const std::vector<Session>& sessions) {
  check_base_url(config.base_url);
  NIBBLE_CHECK(config.max_concurrency >= 0, "--max-concurrency must be >= 0, got {}", config.max_concurrency);
  NIBBLE_CHECK(config.request_rate > 0, "--request-rate must be > 0 (inf for all at once), got {}", config.request_rate);
  NIBBLE_CHECK(config.think_time_s >= 0 && config.duration_s >= 0, "--think-time and --duration must be >= 0");
  NIBBLE_CHECK(config.endpoint == Endpoint::kCompletions || config.prompt_format == PromptFormat::kWords,
               "token-id prompts need --endpoint completions (chat messages are text)");
  LoadConfig normalized = config;
  normalized.base_url = without_trailing_slash(config.base_url);
  return LoadRun(normalized, sessions).run();
}

std::optional<std::string> first_served_model(const std::string& base_url) {
  check_base_url(base_url);
  httplib::Client client(without_trailing_slash(base_url));
  client.set_connection_timeout(std::chrono::seconds(5));
  client.set_read_timeout(std::chrono::seconds(10));
  const httplib::Result res = client.Get("/v1/models");
  if (!res || res->status != 200) return std::nullopt;
  try {
    const nlohmann::json j = nlohmann::json::parse(res->body);
    if (j.contains("data") && j["data"].is_array() && !j["data"].empty() && j["data"][0].contains("id"))
      return j["data"][0]["id"].get<std::string>();
  } catch (const nlohmann::json::exception&) {
  }
  return std::nullopt;
}

}  // namespace nibble::bench
