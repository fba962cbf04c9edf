#pragma once
// A small OpenAI-compatible streaming server for the bench tests, on 127.0.0.1 and a free port.
// It runs at most `slots` requests at once (more wait in its queue, visible as "waiting" on
// /metrics), streams one SSE chunk per output token after ttft_s, then itl_s per token, ends with a
// usage chunk and [DONE]. cached_tokens is the longest common prefix with any earlier prompt (a
// prefix cache that never evicts). It records the peaks of its own running and waiting counts.
#include <httplib.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace nibble::bench::fake {

struct FakeServerConfig {
  int slots = 4;               // requests run at once; the rest wait
  double ttft_s = 0.02;        // delay before the first token (after leaving the queue)
  double itl_s = 0.005;        // delay between tokens
  bool metrics = true;         // serve /metrics
  std::string metric_prefix = "nibble:";  // "nibble:" or "vllm:" (same suffixes)
  int http_threads = 64;       // enough that the application queue, not HTTP, is the limit
};

class FakeOpenAiServer {
 public:
  explicit FakeOpenAiServer(FakeServerConfig config) : config_(std::move(config)) {
    const int threads = config_.http_threads;
    server_.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
    server_.set_tcp_nodelay(true);  // one token per TCP segment, as a streaming server must (no Nagle batching)
    server_.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) { handle(req, res, false); });
    server_.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) { handle(req, res, true); });
    server_.Get("/v1/models", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(R"({"object":"list","data":[{"id":"fake-model","object":"model"}]})", "application/json");
    });
    if (config_.metrics) {
      server_.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
        std::lock_guard lock(mu_);
        const std::string& p = config_.metric_prefix;
        res.set_content("# HELP " + p + "num_requests_running Requests running.\n# TYPE " + p +
                            "num_requests_running gauge\n" + p + "num_requests_running{model_name=\"fake\"} " +
                            std::to_string(running_) + "\n" + p + "num_requests_waiting{model_name=\"fake\"} " +
                            std::to_string(waiting_) + "\n",
                        "text/plain; version=0.0.4");
      });
    }
    // cpp-httplib 0.11 listens with a backlog of 5: a burst of connects overflows it and the kernel drops
    // SYNs, which the client retries after 1 s. Keep the socket and widen the backlog after bind.
    server_.set_socket_options([this](socket_t sock) {
      listen_socket_ = sock;
      const int yes = 1;
      ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    if (listen_socket_ >= 0) ::listen(listen_socket_, 1024);
    thread_ = std::thread([this] { server_.listen_after_bind(); });
  }
  ~FakeOpenAiServer() {
    server_.stop();
    thread_.join();
  }
  std::string base_url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  int peak_running() const { std::lock_guard lock(mu_); return peak_running_; }
  int peak_waiting() const { std::lock_guard lock(mu_); return peak_waiting_; }
  std::vector<nlohmann::json> bodies() const { std::lock_guard lock(mu_); return bodies_; }

 private:
  struct Stream {
    int64_t produced = 0, max_tokens = 0, prompt_tokens = 0, cached = 0;
    bool chat = false;
    bool released = false;  // its slot was given back (at the last token, or when the client went away)
  };

  void release(Stream& stream) {
    std::lock_guard lock(mu_);
    if (stream.released) return;
    stream.released = true;
    --running_;
    cv_.notify_all();
  }

  static void sleep_s(double s) { std::this_thread::sleep_for(std::chrono::microseconds(static_cast<int64_t>(s * 1e6))); }

  void handle(const httplib::Request& req, httplib::Response& res, bool chat) {
    nlohmann::json body = nlohmann::json::parse(req.body, nullptr, false);
    if (body.is_discarded() || !body.value("stream", false) || !body.contains("stream_options") ||
        !body["stream_options"].value("include_usage", false) || !body.contains("max_tokens")) {
      res.status = 400;
      res.set_content(R"({"error":{"message":"need stream, stream_options.include_usage, max_tokens"}})", "application/json");
      return;
    }
    // The prompt as a sequence of comparable items: token ids, or words of the text / messages.
    std::vector<std::string> prompt;
    auto add_words = [&](const std::string& text) {
      size_t i = 0;
      while (i < text.size()) {
        const size_t j = std::min(text.find(' ', i), text.size());
        if (j > i) prompt.push_back(text.substr(i, j - i));
        i = j + 1;
      }
    };
    if (chat) {
      for (const auto& m : body["messages"]) add_words(m["content"].get<std::string>());
    } else if (body["prompt"].is_array()) {
      for (const auto& id : body["prompt"]) prompt.push_back(std::to_string(id.get<int>()));
    } else {
      add_words(body["prompt"].get<std::string>());
    }
    auto stream = std::make_shared<Stream>();
    stream->max_tokens = body["max_tokens"].get<int64_t>();
    stream->prompt_tokens = static_cast<int64_t>(prompt.size());
    stream->chat = chat;
    {
      std::unique_lock lock(mu_);
      bodies_.push_back(body);
      for (const auto& seen : seen_prompts_) {
        const auto [a, b] = std::mismatch(prompt.begin(), prompt.end(), seen.begin(), seen.end());
        stream->cached = std::max<int64_t>(stream->cached, a - prompt.begin());
      }
      seen_prompts_.push_back(prompt);
      if (running_ >= config_.slots) {
        ++waiting_;
        peak_waiting_ = std::max(peak_waiting_, waiting_);
        cv_.wait(lock, [this] { return running_ < config_.slots; });
        --waiting_;
      }
      ++running_;
      peak_running_ = std::max(peak_running_, running_);
    }
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, stream](size_t, httplib::DataSink& sink) {
          std::string event;
          if (stream->produced < stream->max_tokens) {
            sleep_s(stream->produced == 0 ? config_.ttft_s : config_.itl_s);
            ++stream->produced;
            const nlohmann::json chunk =
                stream->chat ? nlohmann::json{{"choices", {{{"index", 0}, {"delta", {{"content", " tok"}}}}}}, {"usage", nullptr}}
                             : nlohmann::json{{"choices", {{{"index", 0}, {"text", " tok"}}}}, {"usage", nullptr}};
            event = "data: " + chunk.dump() + "\n\n";
          } else {
            const nlohmann::json usage = {
                {"choices", nlohmann::json::array()},
                {"usage", {{"prompt_tokens", stream->prompt_tokens}, {"completion_tokens", stream->produced},
                           {"total_tokens", stream->prompt_tokens + stream->produced},
                           {"prompt_tokens_details", {{"cached_tokens", stream->cached}}}}}};
            event = "data: " + usage.dump() + "\n\ndata: [DONE]\n\n";
            release(*stream);  // generation is over before the last bytes leave, as in a real server
          }
          sink.write(event.data(), event.size());
          if (stream->produced >= stream->max_tokens && event.find("[DONE]") != std::string::npos) sink.done();
          return true;
        },
        [this, stream](bool) { release(*stream); });
  }

  FakeServerConfig config_;
  httplib::Server server_;
  int port_ = -1;
  socket_t listen_socket_ = -1;
  std::thread thread_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  int running_ = 0, waiting_ = 0, peak_running_ = 0, peak_waiting_ = 0;
  std::vector<std::vector<std::string>> seen_prompts_;
  std::vector<nlohmann::json> bodies_;
};

}  // namespace nibble::bench::fake
