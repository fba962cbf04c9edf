#pragma once
// The HTTP plumbing of `nibble serve` over cpp-httplib: routes, body-size limit, SSE streaming,
// cancellation of a request whose client went away, graceful shutdown. Request parsing and the
// response bodies live in request_parser.h / responses.h; this file only moves bytes.
//
//   POST /v1/chat/completions, /v1/completions   (OpenAI schema, streaming or not)
//   GET  /v1/models, /health, /metrics
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "engine/engine.h"

namespace httplib {
class Server;
}

namespace nibble::server {

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
  // Serves until shutdown(); returns after the last handler finished.
  void serve();
  // Any thread (a signal watcher): stop accepting work (new requests get 503), let in-flight
  // requests finish for up to shutdown_grace, cancel the rest (their streams end), stop listening.
  void shutdown();

 private:
  void install_routes();
  engine::Engine& engine_;
  HttpServerOptions options_;
  std::unique_ptr<httplib::Server> server_;
  std::atomic<bool> shutting_down_{false};
  // Streaming responses still writing. httplib's stop() aborts a chunked response mid-stream, so
  // shutdown() waits for these to write their last chunk first.
  std::atomic<int> streams_writing_{0};
  std::atomic<uint64_t> next_response_id_{1};
};

}  // namespace nibble::server
