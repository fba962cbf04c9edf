#include "server/drain_gate.h"

#include "common/error.h"

namespace nibble::server {

bool DrainGate::try_enter() {
  std::lock_guard lock(mutex_);
  if (closed_) return false;
  ++in_flight_;
  return true;
}

void DrainGate::leave() {
  bool now_empty = false;
  {
    std::lock_guard lock(mutex_);
    NIBBLE_ASSERT(in_flight_ > 0);
    now_empty = --in_flight_ == 0;
  }
  if (now_empty) empty_.notify_all();
}

void DrainGate::close() {
  std::lock_guard lock(mutex_);
  closed_ = true;
}

bool DrainGate::closed() const {
  std::lock_guard lock(mutex_);
  return closed_;
}

int64_t DrainGate::in_flight() const {
  std::lock_guard lock(mutex_);
  return in_flight_;
}

bool DrainGate::wait_empty(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  return empty_.wait_for(lock, timeout, [&] { return in_flight_ == 0; });
}

}  // namespace nibble::server
