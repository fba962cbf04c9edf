#pragma once
// Server-sent events (the text/event-stream format) as OpenAI-compatible servers stream them, parsed
// incrementally: bytes arrive in arbitrary chunks (a line, even a "\r\n", may be split across two).
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace nibble::bench {

// Lines end in "\n", "\r\n" or "\r". "data:" lines (one optional space after the colon) accumulate,
// joined by "\n"; a blank line dispatches the event; ":" lines are comments; other fields (event:,
// id:, retry:) are ignored. A stream that ends without a final blank line does not dispatch its last
// partial event (as the HTML spec says).
class SseParser {
 public:
  using EventHandler = std::function<void(std::string_view data)>;
  explicit SseParser(EventHandler on_event) : on_event_(std::move(on_event)) {}
  void feed(std::string_view bytes);

 private:
  void line(std::string_view text);
  EventHandler on_event_;
  std::string pending_;       // bytes of an unfinished line
  std::string data_;          // data of the event being built
  bool has_data_ = false;
  bool after_cr_ = false;     // the previous byte was '\r' (a following '\n' belongs to the same line end)
};

// One streamed chunk of /v1/completions or /v1/chat/completions, as far as the benchmark needs it.
struct StreamChunk {
  bool done = false;            // the "[DONE]" sentinel
  std::string text;             // choices[0].text or choices[0].delta.content (+ reasoning_content)
  bool has_usage = false;       // a non-null "usage" object (stream_options.include_usage)
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;    // usage.prompt_tokens_details.cached_tokens, 0 when absent
  std::string error;            // an "error" object's message, when the server streamed one
};

// Parses one event's data. Throws nibble::Error when it is neither "[DONE]" nor a JSON object.
StreamChunk parse_stream_chunk(std::string_view data);

}  // namespace nibble::bench
