#include "bench/sse.h"

#include <nlohmann/json.hpp>

#include "common/error.h"

namespace nibble::bench {

void SseParser::feed(std::string_view bytes) {
  for (const char c : bytes) {
    if (after_cr_) {
      after_cr_ = false;
      if (c == '\n') continue;  // the "\n" of a "\r\n" whose "\r" already ended the line
    }
    if (c == '\n' || c == '\r') {
      after_cr_ = c == '\r';
      line(pending_);
      pending_.clear();
    } else {
      pending_ += c;
    }
  }
}

void SseParser::line(std::string_view text) {
  if (text.empty()) {
    if (has_data_) on_event_(data_);
    data_.clear();
    has_data_ = false;
    return;
  }
  if (text.front() == ':') return;
  const size_t colon = text.find(':');
  const std::string_view field = text.substr(0, colon);
  std::string_view value = colon == std::string_view::npos ? std::string_view{} : text.substr(colon + 1);
  if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  if (field != "data") return;
  if (has_data_) data_ += '\n';
  data_ += value;
  has_data_ = true;
}

StreamChunk parse_stream_chunk(std::string_view data) {
  StreamChunk chunk;
  if (data == "[DONE]") {
    chunk.done = true;
    return chunk;
  }
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(data);
  } catch (const nlohmann::json::exception& e) {
    NIBBLE_FAIL("stream event is not JSON ({}): {:.200}", e.what(), data);
  }
  NIBBLE_CHECK(j.is_object(), "stream event is not a JSON object: {:.200}", data);
  if (j.contains("error")) {
    const nlohmann::json& e = j["error"];
    chunk.error = e.is_object() && e.contains("message") && e["message"].is_string() ? e["message"].get<std::string>()
                                                                                     : e.dump();
    return chunk;
  }
  if (j.contains("choices") && j["choices"].is_array() && !j["choices"].empty()) {
    const nlohmann::json& choice = j["choices"][0];
    if (choice.contains("text") && choice["text"].is_string()) chunk.text += choice["text"].get<std::string>();
    if (choice.contains("delta") && choice["delta"].is_object()) {
      const nlohmann::json& delta = choice["delta"];
      for (const char* key : {"reasoning_content", "content"}) {
        if (delta.contains(key) && delta[key].is_string()) chunk.text += delta[key].get<std::string>();
      }
    }
  }
  if (j.contains("usage") && j["usage"].is_object()) {
    const nlohmann::json& u = j["usage"];
    chunk.has_usage = true;
    chunk.prompt_tokens = u.value("prompt_tokens", int64_t{0});
    chunk.completion_tokens = u.value("completion_tokens", int64_t{0});
    if (u.contains("prompt_tokens_details") && u["prompt_tokens_details"].is_object()) {
      const nlohmann::json& d = u["prompt_tokens_details"];
      if (d.contains("cached_tokens") && d["cached_tokens"].is_number()) chunk.cached_tokens = d["cached_tokens"];
    }
  }
  return chunk;
}

}  // namespace nibble::bench
