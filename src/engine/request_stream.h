#pragma once
// What one request hears from the engine, and the thread-safe channel it hears it through.
// The engine thread pushes events; the consumer (an HTTP handler, a test) pops them. The last event
// of a request has finish != kNone; nothing follows it.
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "engine/logprobs.h"

namespace nibble::engine {

using RequestId = uint64_t;

enum class FinishReason : uint8_t {
  kNone,       // more events follow
  kStop,       // an EOS id or a stop string
  kLength,     // max_tokens reached (also: max_tokens 0, the prompt was only scored)
  kCancelled,  // Engine::cancel() or shutdown
  kError,      // the engine failed while running the request (message in EngineEvent::error)
};

const char* finish_reason_name(FinishReason reason);  // "stop", "length", "cancelled", "error", "none"

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t cached_tokens = 0;      // prompt tokens served by the prefix cache
  int64_t completion_tokens = 0;  // generated tokens, the stop token included
};

struct EngineEvent {
  std::string text;               // new UTF-8 text: complete characters, stop strings cut off, text
                                  // that may start a stop string held back until it is decided
  std::vector<int32_t> tokens;    // the tokens generated since the previous event
  std::vector<TokenLogprob> logprobs;  // [tokens.size()] when the request asked for logprobs
  // [prompt tokens] on the first event when the request asked for prompt logprobs; entry 0 is
  // nullopt (the first token has no context), entry i is log p(prompt[i] | prompt[0, i)).
  std::vector<std::optional<TokenLogprob>> prompt_logprobs;
  FinishReason finish = FinishReason::kNone;
  std::string error;  // kError only
  Usage usage;        // up to date on every event; final on the last one
};

class RequestStream {
 public:
  explicit RequestStream(RequestId id) : id_(id) {}
  RequestId id() const { return id_; }

  // The next event, waiting up to `timeout`; nullopt on a timeout or once the last event was taken.
  std::optional<EngineEvent> next(std::chrono::milliseconds timeout);
  bool done() const;  // the last event was taken

  // Engine side. push() after the last event is an internal error (nibble::Error).
  void push(EngineEvent event);

 private:
  const RequestId id_;
  mutable std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<EngineEvent> events_;
  bool closed_ = false;  // the last event was pushed
  bool done_ = false;    // the last event was taken
};

}  // namespace nibble::engine
