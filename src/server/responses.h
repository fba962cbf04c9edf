#pragma once
// OpenAI response bodies and Server-Sent Events, as pure functions of what the engine reported:
//   non-streaming  {"id", "object": "chat.completion" | "text_completion", "created", "model",
//                   "choices": [{"index": 0, "message" | "text", "logprobs", "finish_reason"}], "usage"}
//   streaming      one "chat.completion.chunk" / "text_completion" per event, each sent as
//                  "data: {json}\n\n"; a last chunk with "choices": [] and "usage" when the client
//                  asked (stream_options.include_usage); then "data: [DONE]\n\n".
// usage always carries prompt_tokens_details.cached_tokens (prefix-cache hits).
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/logprobs.h"
#include "engine/request_stream.h"
#include "server/request_parser.h"
#include "tokenizer/tokenizer.h"

namespace nibble::server {

struct ResponseContext {
  std::string id;        // "chatcmpl-..." / "cmpl-..."
  int64_t created = 0;   // unix seconds
  std::string model;
  Endpoint endpoint = Endpoint::kCompletions;
};

std::string sse_event(const nlohmann::json& data);  // "data: <compact json>\n\n"
std::string sse_done();                             // "data: [DONE]\n\n"

nlohmann::json usage_json(const engine::Usage& usage);
nlohmann::json finish_reason_json(engine::FinishReason reason);  // "stop" / "length" / null

// Logprobs in the endpoint's format, built up token by token. Token strings are the text each token
// adds to the decoded stream, special tokens skipped (so completions' text_offset indexes the
// returned text; BOS/EOS are ""); alternatives are each token decoded alone.
//   completions: {"tokens": [...], "token_logprobs": [...], "top_logprobs": [{text: logprob} | null],
//                 "text_offset": [...]}
//   chat:        {"content": [{"token", "logprob", "bytes", "top_logprobs": [{"token", "logprob", "bytes"}]}]}
class LogprobsBuilder {
 public:
  LogprobsBuilder(const Tokenizer& tokenizer, Endpoint endpoint, int64_t text_offset = 0);
  // One token; `logprob` nullopt for the first prompt token (no context): null entries.
  void add(int32_t token, const std::optional<engine::TokenLogprob>& logprob);
  // The entries added since the last take() (a streaming chunk's), or all of them.
  nlohmann::json take();

 private:
  void reset();
  const Tokenizer& tokenizer_;
  Endpoint endpoint_;
  StreamingDetokenizer detok_;
  int64_t text_offset_;
  nlohmann::json entries_;
};

nlohmann::json completion_response(const ResponseContext& ctx, const std::string& text, engine::FinishReason finish,
                                   const engine::Usage& usage, const nlohmann::json& logprobs);
// delta: {"role": "assistant"} on the first chunk, {"content": text} after; logprobs null if none.
nlohmann::json stream_chunk(const ResponseContext& ctx, const std::string& text, bool first,
                            engine::FinishReason finish, const nlohmann::json& logprobs);
nlohmann::json usage_chunk(const ResponseContext& ctx, const engine::Usage& usage);

}  // namespace nibble::server
