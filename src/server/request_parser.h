#pragma once
// OpenAI request bodies -> nibble requests, as pure functions (no HTTP, no engine) so they can be
// unit-tested and fuzzed:
//   1. parse_request(endpoint, body)  JSON text -> ParsedRequest, or the 400 the API returns for
//      malformed JSON, a wrong type, a value out of range, an unsupported option (n != 1, ...);
//   2. to_generation_request(parsed, tokenizer, limits)  -> the engine's GenerationRequest:
//      chat template / tokenization, the default max_tokens, the context-length check.
// Unknown fields are ignored (clients send many); fields nibble cannot honour are rejected, never
// silently dropped.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "sampling/sampler.h"
#include "server/api_error.h"
#include "tokenizer/tokenizer.h"

namespace nibble::server {

enum class Endpoint : uint8_t { kChatCompletions, kCompletions };

inline constexpr int64_t kMaxStopStrings = 16;
inline constexpr int64_t kMaxStopBytes = 1024;
inline constexpr int64_t kMaxCompletionLogprobs = 5;  // /v1/completions `logprobs` (OpenAI's bound)

struct ParsedRequest {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string model;
  nlohmann::json messages;                  // chat: [{"role", "content": string}], contents flattened
  std::optional<std::string> prompt_text;   // completions: a string prompt ...
  std::vector<int32_t> prompt_ids;          // ... or token ids (exactly one of the two)
  std::optional<int64_t> max_tokens;        // unset: the rest of the context (chat) or 16 (completions)
  sampling::SamplingParams sampling;        // temperature default 1 as in OpenAI
  bool seed_given = false;                  // else the server draws a seed
  std::vector<std::string> stop;
  bool stream = false;
  bool include_usage = false;               // stream_options.include_usage
  bool logprobs = false;
  int64_t top_logprobs = 0;
  bool echo = false;                        // completions: the prompt is returned before the text
  bool ignore_eos = false;                  // vLLM's extension, used by benchmarks
};

using ParseResult = std::variant<ParsedRequest, ApiError>;

// Never throws: every problem with `body` is an ApiError (status 400).
ParseResult parse_request(Endpoint endpoint, std::string_view body);

struct ServingLimits {
  std::string model_name;  // the one model served; a request naming another is refused
  int64_t max_context = 0; // tokens (prompt + generated)
  int64_t default_completion_max_tokens = 16;
};

struct PreparedRequest {
  engine::GenerationRequest generation;
  std::string prompt_text;  // what echo returns: the prompt string, or the decoded ids
};

using PrepareResult = std::variant<PreparedRequest, ApiError>;

// Tokenizes and checks against the limits. Never throws (tokenizer or template errors become 400s).
PrepareResult prepare_request(const ParsedRequest& request, const Tokenizer& tokenizer, const ServingLimits& limits);

}  // namespace nibble::server
