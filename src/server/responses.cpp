#include "server/responses.h"

namespace nibble::server {

using nlohmann::json;

std::string sse_event(const json& data) {
  // error_handler_t::replace: text cut at a token boundary is valid UTF-8 by construction, but a
  // stop string or prompt from the client is passed through as given.
  return "data: " + data.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
}

std::string sse_done() { return "data: [DONE]\n\n"; }

json usage_json(const engine::Usage& usage) {
  return {{"prompt_tokens", usage.prompt_tokens},
          {"completion_tokens", usage.completion_tokens},
          {"total_tokens", usage.prompt_tokens + usage.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", usage.cached_tokens}}}};
}

json finish_reason_json(engine::FinishReason reason) {
  switch (reason) {
    case engine::FinishReason::kStop: return "stop";
    case engine::FinishReason::kLength: return "length";
    case engine::FinishReason::kCancelled: return "abort";
    case engine::FinishReason::kError: return "error";
    case engine::FinishReason::kNone: break;
  }
  return nullptr;
}

namespace {

json utf8_bytes(const std::string& s) {
  json out = json::array();
  for (unsigned char c : s) out.push_back(static_cast<int>(c));
  return out;
}

}  // namespace

LogprobsBuilder::LogprobsBuilder(const Tokenizer& tokenizer, Endpoint endpoint, int64_t text_offset)
    : tokenizer_(tokenizer), endpoint_(endpoint), detok_(tokenizer, /*skip_special=*/true), text_offset_(text_offset) {
  reset();
}

void LogprobsBuilder::reset() {
  if (endpoint_ == Endpoint::kChatCompletions) {
    entries_ = {{"content", json::array()}};
  } else {
    entries_ = {{"tokens", json::array()},
                {"token_logprobs", json::array()},
                {"top_logprobs", json::array()},
                {"text_offset", json::array()}};
  }
}

void LogprobsBuilder::add(int32_t token, const std::optional<engine::TokenLogprob>& logprob) {
  const std::string piece = detok_.push(token);
  if (endpoint_ == Endpoint::kChatCompletions) {
    json top = json::array();
    if (logprob) {
      for (const engine::TopLogprob& alt : logprob->top) {
        const std::string text = tokenizer_.decode(std::span(&alt.token, 1));
        top.push_back({{"token", text}, {"logprob", alt.logprob}, {"bytes", utf8_bytes(text)}});
      }
    }
    entries_["content"].push_back({{"token", piece},
                                   {"logprob", logprob ? json(logprob->logprob) : json(nullptr)},
                                   {"bytes", utf8_bytes(piece)},
                                   {"top_logprobs", top}});
  } else {
    entries_["tokens"].push_back(piece);
    entries_["text_offset"].push_back(text_offset_);
    if (logprob) {
      entries_["token_logprobs"].push_back(logprob->logprob);
      json top = json::object();
      for (const engine::TopLogprob& alt : logprob->top) {
        const std::string text = tokenizer_.decode(std::span(&alt.token, 1));
        if (!top.contains(text)) top[text] = alt.logprob;  // two ids may decode alike: keep the likelier
      }
      entries_["top_logprobs"].push_back(top);
    } else {
      entries_["token_logprobs"].push_back(nullptr);
      entries_["top_logprobs"].push_back(nullptr);
    }
  }
  text_offset_ += static_cast<int64_t>(piece.size());
}

json LogprobsBuilder::take() {
  json out = std::move(entries_);
  reset();
  return out;
}

json completion_response(const ResponseContext& ctx, const std::string& text, engine::FinishReason finish,
                         const engine::Usage& usage, const json& logprobs) {
  json choice = {{"index", 0}, {"logprobs", logprobs}, {"finish_reason", finish_reason_json(finish)}};
  const bool chat = ctx.endpoint == Endpoint::kChatCompletions;
  if (chat) {
    choice["message"] = {{"role", "assistant"}, {"content", text}};
  } else {
    choice["text"] = text;
  }
  return {{"id", ctx.id},
          {"object", chat ? "chat.completion" : "text_completion"},
          {"created", ctx.created},
          {"model", ctx.model},
          {"choices", json::array({choice})},
          {"usage", usage_json(usage)}};
}

json stream_chunk(const ResponseContext& ctx, const std::string& text, bool first, engine::FinishReason finish,
                  const json& logprobs) {
  const bool chat = ctx.endpoint == Endpoint::kChatCompletions;
  json choice = {{"index", 0}, {"logprobs", logprobs}, {"finish_reason", finish_reason_json(finish)}};
  if (chat) {
    choice["delta"] = first ? json{{"role", "assistant"}, {"content", text}} : json{{"content", text}};
  } else {
    choice["text"] = text;
  }
  return {{"id", ctx.id},
          {"object", chat ? "chat.completion.chunk" : "text_completion"},
          {"created", ctx.created},
          {"model", ctx.model},
          {"choices", json::array({choice})}};
}

json usage_chunk(const ResponseContext& ctx, const engine::Usage& usage) {
  const bool chat = ctx.endpoint == Endpoint::kChatCompletions;
  return {{"id", ctx.id},
          {"object", chat ? "chat.completion.chunk" : "text_completion"},
          {"created", ctx.created},
          {"model", ctx.model},
          {"choices", json::array()},
          {"usage", usage_json(usage)}};
}

}  // namespace nibble::server
