#pragma once
// DrainGate: how the HTTP server shuts down without cutting a response. A request that will start
// work (a completion) is admitted with try_enter() and counted until its response is written
// (leave()); close() refuses every admission after it, and wait_empty() then waits for the count to
// reach zero.
//
// The contract (what makes shutdown correct by design): try_enter() and close() take one mutex, so
// a request is either admitted before close() — and wait_empty() after close() returns only once
// its response, streamed or not, is fully written — or refused, and answers 503 having started
// nothing. Refused requests are not counted: a flood of them cannot hold up the wait.
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>

namespace nibble::server {

class DrainGate {
 public:
  bool try_enter();  // false once closed
  void leave();      // an admitted request's response was written, or its connection failed
  void close();      // idempotent
  bool closed() const;
  int64_t in_flight() const;
  // True once no admitted request is in flight, false if `timeout` passed first.
  bool wait_empty(std::chrono::milliseconds timeout);

 private:
  mutable std::mutex mutex_;
  std::condition_variable empty_;
  int64_t in_flight_ = 0;
  bool closed_ = false;
};

}  // namespace nibble::server
