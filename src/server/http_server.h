#pragma once
// The HTTP plumbing of `nibble serve` over cpp-httplib: routes, body-size limit, SSE streaming,
// cancellation of a request whose client went away (streaming or not), graceful shutdown. Request
// parsing and the response bodies live in request_parser.h / responses.h; the connection loop in
// connection_server.h; this file only moves bytes.
//
//   POST /v1/chat/completions, /v1/completions   (OpenAI schema, streaming or not)
//   GET  /v1/models, /health, /metrics
//
// Shutdown, in this order (shutdown()):
//   1. the DrainGate closes: completions not yet admitted get 503 "shutting_down", /health 503;
//   2. the engine stops accepting, lets what it holds run for up to shutdown_grace, then cancels
//      the rest: every accepted request's stream now holds its last event;
//   3. every response in flight is written out — a finished stream ends with its finish_reason and
//      [DONE], a cancelled one with finish_reason "abort" and [DONE], a non-streaming request gets
//      its completion (or 503 if cancelled) — bounded by kWriteOutLimit for clients that stopped
//      reading;
//   4. only then the listener stops (httplib's stop()), and serve() returns.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "engine/engine.h"
#include "server/drain_gate.h"

namespace nibble::server {

class ConnectionServer;

// After the grace, how long shutdown waits for responses to be written before it stops the
// listener anyway (a client that stopped reading; a blocked write fails after httplib's 5 s write
// timeout, so this is only reached by a client that reads, slowly, for this long).
inline constexpr std::chrono::seconds kWriteOutLimit{15};

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;                         // 0: any free port (bind() says which)
  std::string model_name;                  // what /v1/models lists and requests must name
  int64_t max_body_bytes = 8 << 20;        // larger bodies: 413
  int http_threads = 256;                  // connections served at once
  std::chrono::milliseconds shutdown_grace{10'000};  // in-flight requests may finish this long
};

class HttpServer {
 public:
  HttpServer(engine::Engine& engine, HttpServerOptions options);
  ~HttpServer();

  // Binds the socket; returns the port. Throws nibble::Error if it cannot.
  int bind();
  // Serves until shutdown(); returns after the last response was written. Returns at once if
  // shutdown() came first.
  void serve();
  // Any thread (a signal watcher): the sequence above. Returns once serve() has returned (or will
  // not start). Idempotent: a second call returns at once.
  void shutdown();

 private:
  enum class ServeState : uint8_t { kNotStarted, kServing, kReturned };
  void install_routes();
  void stop_listening();

  engine::Engine& engine_;
  HttpServerOptions options_;
  DrainGate gate_;
  std::unique_ptr<ConnectionServer> server_;
  std::atomic<bool> shutdown_started_{false};
  std::mutex serve_mutex_;
  std::condition_variable serve_changed_;
  ServeState serve_state_ = ServeState::kNotStarted;  // under serve_mutex_
  std::atomic<uint64_t> next_response_id_{1};
};

}  // namespace nibble::server
