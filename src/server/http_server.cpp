#include "server/http_server.h"

#include <httplib.h>
#include <sys/socket.h>

#include <chrono>
#include <cstdio>
#include <random>
#include <thread>

#include <fmt/format.h>

#include "common/error.h"
#include "server/api_error.h"
#include "server/connection_server.h"
#include "server/metrics_text.h"
#include "server/request_parser.h"
#include "server/responses.h"

namespace nibble::server {

namespace {

using nlohmann::json;
using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

constexpr milliseconds kPoll{100};            // how long a streaming response waits for an event at a time
constexpr milliseconds kClientCheck{20};      // how often a non-streaming handler looks at its client
constexpr int kListenBacklog = 4096;  // httplib listens with a backlog of 5: a burst of clients would be refused

void send_error(httplib::Response& res, const ApiError& error) {
  res.status = error.status;
  res.set_content(error_body(error).dump(), "application/json");
}

ApiError rejected_error(const engine::RequestRejected& e, const char* prompt_param) {
  switch (e.reason()) {
    case engine::RejectReason::kInvalid: return {.status = 400, .message = e.what(), .code = "invalid_value"};
    case engine::RejectReason::kContextLength: return context_length_exceeded(prompt_param, e.what());
    case engine::RejectReason::kBusy:
      return {.status = 429, .message = e.what(), .type = "rate_limit_error", .code = "too_many_requests"};
    case engine::RejectReason::kShuttingDown:
      return {.status = 503, .message = e.what(), .type = "service_unavailable", .code = "shutting_down"};
  }
  return {.status = 500, .message = e.what(), .type = "server_error"};
}

ApiError engine_error(const std::string& message) {
  return {.status = 500, .message = "the engine failed: " + message, .type = "server_error"};
}

int64_t unix_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

ApiError shutting_down_error() {
  return {.status = 503, .message = "the server is shutting down", .type = "service_unavailable",
          .code = "shutting_down"};
}

// One streaming response: the engine's events turned into SSE chunks as the client reads them.
struct StreamState {
  engine::Engine* engine = nullptr;
  std::shared_ptr<engine::RequestStream> stream;
  ResponseContext ctx;
  std::optional<LogprobsBuilder> logprobs;
  bool include_usage = false;
  bool first = true;
  bool finished = false;
};

bool stream_some(StreamState& st, httplib::DataSink& sink) {
  std::optional<engine::EngineEvent> event = st.stream->next(kPoll);
  if (!event) return sink.is_writable();  // nothing yet; a client gone ends the response
  json logprobs = nullptr;
  if (st.logprobs) {
    for (size_t i = 0; i < event->tokens.size(); ++i) st.logprobs->add(event->tokens[i], event->logprobs.at(i));
    logprobs = st.logprobs->take();
  }
  if (event->finish == engine::FinishReason::kError) {
    const std::string out = sse_event(error_body(engine_error(event->error))) + sse_done();
    st.finished = true;
    sink.write(out.data(), out.size());
    sink.done();
    return true;
  }
  // A chunk per event with text or a finish; token events whose text is held back (a possible stop
  // string, an incomplete character) still carry their logprobs. A cancelled request (shutdown's
  // grace ran out) ends like any other: a last chunk with finish_reason "abort", the usage chunk if
  // asked for, [DONE].
  std::string out;
  if (!event->text.empty() || event->finish != engine::FinishReason::kNone || st.first || st.logprobs) {
    out += sse_event(stream_chunk(st.ctx, event->text, st.first, event->finish, logprobs));
    st.first = false;
  }
  if (event->finish != engine::FinishReason::kNone) {
    if (st.include_usage) out += sse_event(usage_chunk(st.ctx, event->usage));
    out += sse_done();
    st.finished = true;
  }
  if (!out.empty() && !sink.write(out.data(), out.size())) return false;
  if (st.finished) sink.done();
  return true;
}

}  // namespace

HttpServer::HttpServer(engine::Engine& engine, HttpServerOptions options)
    : engine_(engine), options_(std::move(options)), server_(std::make_unique<ConnectionServer>(gate_)) {
  NIBBLE_CHECK(options_.http_threads >= 1, "http threads must be >= 1, got {}", options_.http_threads);
  NIBBLE_CHECK(options_.max_body_bytes >= 1, "max body bytes must be >= 1, got {}", options_.max_body_bytes);
  const int threads = options_.http_threads;
  server_->new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  server_->set_payload_max_length(static_cast<size_t>(options_.max_body_bytes));
  server_->set_keep_alive_timeout(5);
  // Without TCP_NODELAY a response on a kept-alive connection waits ~40 ms for the client's delayed
  // ACK of the previous one (Nagle): longer than a small model takes to answer.
  server_->set_tcp_nodelay(true);
  install_routes();
}

HttpServer::~HttpServer() = default;

int HttpServer::bind() {
  if (options_.port == 0) {
    const int port = server_->bind_to_any_port(options_.host);
    NIBBLE_CHECK(port > 0, "cannot bind an HTTP port on {}", options_.host);
    options_.port = port;
  } else {
    NIBBLE_CHECK(server_->bind_to_port(options_.host, options_.port), "cannot bind {}:{} (in use?)", options_.host,
                 options_.port);
  }
  // Calling listen() again on a listening socket only updates its backlog (Linux, POSIX).
  NIBBLE_CHECK(::listen(server_->listening_fd(), kListenBacklog) == 0, "cannot set the listen backlog on {}:{}",
               options_.host, options_.port);
  return options_.port;
}

void HttpServer::serve() {
  {
    std::lock_guard lock(serve_mutex_);
    if (gate_.closed()) return;  // shutdown() came first
    serve_state_ = ServeState::kServing;
  }
  server_->listen_after_bind();
  {
    std::lock_guard lock(serve_mutex_);
    serve_state_ = ServeState::kReturned;
  }
  serve_changed_.notify_all();
}

void HttpServer::shutdown() {
  if (shutdown_started_.exchange(true)) return;
  gate_.close();                              // 1. requests not yet admitted: 503
  std::fprintf(stderr, "nibble serve: draining: new requests get 503; %lld in flight may finish for %.1f s\n",
               static_cast<long long>(gate_.in_flight()),
               std::chrono::duration<double>(options_.shutdown_grace).count());
  engine_.shutdown(options_.shutdown_grace);  // 2. every accepted request's stream holds its last event
  if (!gate_.wait_empty(kWriteOutLimit)) {    // 3. every response in flight written out
    std::fprintf(stderr, "nibble serve: %lld responses still being written after %llds; closing them\n",
                 static_cast<long long>(gate_.in_flight()), static_cast<long long>(kWriteOutLimit.count()));
  }
  stop_listening();                           // 4.
}

void HttpServer::stop_listening() {
  // httplib's stop() does nothing before listen_after_bind() has marked the server running, so
  // it is called once that is so, and this waits until serve() has returned.
  std::unique_lock lock(serve_mutex_);
  bool stop_sent = false;
  while (serve_state_ == ServeState::kServing) {
    if (!stop_sent && server_->is_running()) {
      server_->stop();
      stop_sent = true;
    }
    serve_changed_.wait_for(lock, milliseconds(10));
  }
}

void HttpServer::install_routes() {
  httplib::Server& svr = *server_;
  const ServingLimits limits{.model_name = options_.model_name, .max_context = engine_.max_context()};

  // Statuses httplib produces itself (404 no route, 413 body too large, 400 bad framing) get
  // OpenAI's error body too.
  svr.set_error_handler([](const httplib::Request&, httplib::Response& res) {
    if (!res.body.empty()) return;
    const std::string message = res.status == 413   ? "the request body is larger than the server accepts"
                                : res.status == 404 ? "no such route"
                                                    : fmt::format("HTTP error {}", res.status);
    const std::string code = res.status == 413 ? "request_too_large" : res.status == 404 ? "not_found" : "";
    res.set_content(error_body({.status = res.status, .message = message, .code = code}).dump(), "application/json");
  });
  svr.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string message = "internal error";
    try {
      if (ep) std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      message = e.what();
    } catch (...) {
    }
    send_error(res, {.status = 500, .message = message, .type = "server_error"});
  });

  svr.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    if (gate_.closed()) return send_error(res, shutting_down_error());
    res.set_content(R"({"status":"ok"})", "application/json");
  });
  svr.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics_text(engine_.metrics(), options_.model_name), "text/plain; version=0.0.4");
  });
  svr.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    const json model = {{"id", options_.model_name},
                        {"object", "model"},
                        {"created", 0},
                        {"owned_by", "nibble"},
                        {"max_model_len", engine_.max_context()}};
    res.set_content(json{{"object", "list"}, {"data", json::array({model})}}.dump(), "application/json");
  });

  const auto completion = [this, limits](Endpoint endpoint) {
    return [this, limits, endpoint](const httplib::Request& req, httplib::Response& res) {
      // Admitted: shutdown() waits until this response is written (drain_gate.h). Refused: nothing
      // was started.
      if (!server_->admit_current_request()) return send_error(res, shutting_down_error());
      const bool chat = endpoint == Endpoint::kChatCompletions;
      const char* prompt_param = chat ? "messages" : "prompt";
      ParseResult parsed = parse_request(endpoint, req.body);
      if (auto* error = std::get_if<ApiError>(&parsed)) return send_error(res, *error);
      ParsedRequest& request = std::get<ParsedRequest>(parsed);
      PrepareResult prepared = prepare_request(request, engine_.tokenizer(), limits);
      if (auto* error = std::get_if<ApiError>(&prepared)) return send_error(res, *error);
      PreparedRequest& ready = std::get<PreparedRequest>(prepared);
      if (!request.seed_given) ready.generation.sampling.seed = std::random_device{}();
      const std::vector<int32_t> prompt_ids = ready.generation.prompt;

      std::shared_ptr<engine::RequestStream> stream;
      try {
        stream = engine_.submit(std::move(ready.generation));
      } catch (const engine::RequestRejected& e) {
        return send_error(res, rejected_error(e, prompt_param));
      }
      ResponseContext ctx{.id = fmt::format("{}-{}", chat ? "chatcmpl" : "cmpl", next_response_id_++),
                          .created = unix_seconds(),
                          .model = options_.model_name,
                          .endpoint = endpoint};

      if (request.stream) {
        auto st = std::make_shared<StreamState>();
        st->engine = &engine_;
        st->stream = stream;
        st->ctx = ctx;
        st->include_usage = request.include_usage;
        if (request.logprobs) st->logprobs.emplace(engine_.tokenizer(), endpoint);
        res.set_header("Cache-Control", "no-cache");
        res.set_chunked_content_provider(
            "text/event-stream",
            [st](size_t, httplib::DataSink& sink) { return stream_some(*st, sink); },
            [st](bool) {
              // The response ended: if the engine is still working for it, the client is gone.
              if (!st->finished) st->engine->cancel(st->stream->id());
            });
        return;
      }

      // Non-streaming: collect every event, then answer once. A client that hangs up meanwhile
      // cancels the request (its pages are freed), as a streaming one does.
      std::string text;
      std::vector<int32_t> tokens;
      std::vector<engine::TokenLogprob> token_logprobs;
      std::vector<std::optional<engine::TokenLogprob>> prompt_logprobs;
      engine::EngineEvent last;
      const int client_fd = ConnectionServer::current_connection_fd();
      bool client_gone = false;
      Clock::time_point next_check = Clock::now() + kClientCheck;
      while (true) {
        std::optional<engine::EngineEvent> event = stream->next(kClientCheck);
        if (!client_gone && client_fd >= 0 && Clock::now() >= next_check) {
          next_check = Clock::now() + kClientCheck;
          if (peer_gone(client_fd)) {
            client_gone = true;
            engine_.cancel(stream->id());  // its last event (kCancelled) still comes, and ends the loop
          }
        }
        if (!event) continue;
        text += event->text;
        tokens.insert(tokens.end(), event->tokens.begin(), event->tokens.end());
        for (auto& lp : event->logprobs) token_logprobs.push_back(std::move(lp));
        if (!event->prompt_logprobs.empty()) prompt_logprobs = std::move(event->prompt_logprobs);
        if (event->finish != engine::FinishReason::kNone) {
          last = std::move(*event);
          break;
        }
      }
      if (last.finish == engine::FinishReason::kError) return send_error(res, engine_error(last.error));
      if (last.finish == engine::FinishReason::kCancelled) {
        // Shutdown's grace ran out (a client that hung up reads nothing of this).
        return send_error(res, {.status = 503, .message = "the request was cancelled (server shutdown)",
                                .type = "service_unavailable", .code = "cancelled"});
      }
      json logprobs = nullptr;
      if (request.logprobs) {
        LogprobsBuilder builder(engine_.tokenizer(), endpoint);
        if (request.echo) {
          for (size_t i = 0; i < prompt_ids.size(); ++i) {
            builder.add(prompt_ids[i], i < prompt_logprobs.size() ? prompt_logprobs[i] : std::nullopt);
          }
        }
        for (size_t i = 0; i < tokens.size(); ++i) builder.add(tokens[i], token_logprobs.at(i));
        logprobs = builder.take();
      }
      const std::string full = request.echo ? ready.prompt_text + text : text;
      res.set_content(completion_response(ctx, full, last.finish, last.usage, logprobs)
                          .dump(-1, ' ', false, json::error_handler_t::replace),
                      "application/json");
    };
  };
  svr.Post("/v1/chat/completions", completion(Endpoint::kChatCompletions));
  svr.Post("/v1/completions", completion(Endpoint::kCompletions));
}

}  // namespace nibble::server
