#include "engine/stop_matcher.h"

#include <algorithm>

#include "common/error.h"

namespace nibble::engine {

StopMatcher::StopMatcher(std::vector<std::string> stops) {
  for (std::string& s : stops) {
    if (!s.empty()) stops_.push_back(std::move(s));
  }
}

StopMatch StopMatcher::push(std::string_view delta) {
  NIBBLE_CHECK(!stopped_, "StopMatcher: push() after a stop string matched");
  std::string text = held_ + std::string(delta);
  held_.clear();
  // The stop string that completes first (smallest end; on a tie the longest), as if the text had
  // arrived byte by byte, so the result does not depend on how it was split into deltas. Every
  // occurrence starts inside `text`: a suffix of earlier text that could start one was held back.
  size_t first = std::string::npos;
  size_t first_end = std::string::npos;
  for (const std::string& stop : stops_) {
    const size_t at = text.find(stop);
    if (at == std::string::npos) continue;
    const size_t end = at + stop.size();
    if (end < first_end || (end == first_end && at < first)) {
      first = at;
      first_end = end;
    }
  }
  if (first != std::string::npos) {
    stopped_ = true;
    text.resize(first);
    return {.text = std::move(text), .stopped = true};
  }
  // Hold back the longest suffix that is a proper prefix of a stop string.
  size_t hold = 0;
  for (const std::string& stop : stops_) {
    const size_t longest = std::min(stop.size() - 1, text.size());
    for (size_t len = longest; len > hold; --len) {
      if (std::string_view(text).substr(text.size() - len) == std::string_view(stop).substr(0, len)) {
        hold = len;
        break;
      }
    }
  }
  held_ = text.substr(text.size() - hold);
  text.resize(text.size() - hold);
  return {.text = std::move(text), .stopped = false};
}

std::string StopMatcher::flush() {
  std::string out = std::move(held_);
  held_.clear();
  return out;
}

}  // namespace nibble::engine
