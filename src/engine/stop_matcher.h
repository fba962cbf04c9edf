#pragma once
// StopMatcher: finds stop strings in generated text that arrives in pieces (text deltas), also when a
// stop string spans several tokens. Text that might be the start of a stop string is held back
// until the next piece decides it, so nothing after a stop string is ever released. The text is cut
// where the first stop string to complete (reading byte by byte) begins, however it was split.
//
//   StopMatcher m({"\n\n", "END"});
//   m.push("Hello\n")  -> {.text = "Hello", .stopped = false}   ("\n" held: it may start "\n\n")
//   m.push("\nmore")   -> {.text = "",      .stopped = true}    (the text is cut before the stop)
//   m.flush()          -> what is still held, when the request ends for another reason
//
// Bytes, not characters: stop strings and deltas are UTF-8, and a held suffix always starts where a
// stop string (valid UTF-8) starts matching, so released text never ends inside a character.
#include <string>
#include <string_view>
#include <vector>

namespace nibble::engine {

struct StopMatch {
  std::string text;      // text safe to release now
  bool stopped = false;  // a stop string matched: `text` ends right before it; push nothing more
};

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);  // empty strings are ignored

  StopMatch push(std::string_view delta);
  std::string flush();  // the held text, released (no stop matched); the matcher is then empty
  bool stopped() const { return stopped_; }
  size_t held_bytes() const { return held_.size(); }

 private:
  std::vector<std::string> stops_;
  std::string held_;  // a suffix of the text so far that is a proper prefix of some stop string
  bool stopped_ = false;
};

}  // namespace nibble::engine
