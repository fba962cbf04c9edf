#include "engine/request_stream.h"

#include "common/error.h"

namespace nibble::engine {

const char* finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::kNone: return "none";
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kCancelled: return "cancelled";
    case FinishReason::kError: return "error";
  }
  return "unknown";
}

std::optional<EngineEvent> RequestStream::next(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  if (done_) return std::nullopt;
  if (!ready_.wait_for(lock, timeout, [&] { return !events_.empty(); })) return std::nullopt;
  EngineEvent event = std::move(events_.front());
  events_.pop_front();
  if (event.finish != FinishReason::kNone) done_ = true;
  return event;
}

bool RequestStream::done() const {
  std::lock_guard lock(mutex_);
  return done_;
}

void RequestStream::push(EngineEvent event) {
  {
    std::lock_guard lock(mutex_);
    NIBBLE_CHECK(!closed_, "request {}: an event after the last one", id_);
    closed_ = event.finish != FinishReason::kNone;
    events_.push_back(std::move(event));
  }
  ready_.notify_all();
}

}  // namespace nibble::engine
