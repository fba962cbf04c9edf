#include "server/request_parser.h"

#include <cmath>
#include <limits>

#include <fmt/format.h>

namespace nibble::server {

namespace {

using nlohmann::json;

// Thrown inside the parser only; parse_request turns it into its result.
struct Reject {
  ApiError error;
};

[[noreturn]] void reject(const std::string& param, const std::string& message) {
  throw Reject{invalid_param(param, message)};
}

const json* field(const json& body, const char* name) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return nullptr;
  return &*it;
}

bool get_bool(const json& body, const char* name, bool fallback) {
  const json* v = field(body, name);
  if (!v) return fallback;
  if (!v->is_boolean()) reject(name, fmt::format("'{}' must be a boolean, got {}", name, v->type_name()));
  return v->get<bool>();
}

std::optional<int64_t> get_int(const json& body, const char* name, int64_t lo, int64_t hi) {
  const json* v = field(body, name);
  if (!v) return std::nullopt;
  // 5.0 is accepted as 5 (some clients send floats); 5.5 is not.
  int64_t value = 0;
  if (v->is_number_integer()) {
    if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      reject(name, fmt::format("'{}' is out of range: must be between {} and {}", name, lo, hi));
    }
    value = v->get<int64_t>();
  } else if (v->is_number_float()) {
    const double d = v->get<double>();
    if (!std::isfinite(d) || d != std::floor(d) || std::fabs(d) > 9e15) {
      reject(name, fmt::format("'{}' must be an integer", name));
    }
    value = static_cast<int64_t>(d);
  } else {
    reject(name, fmt::format("'{}' must be an integer, got {}", name, v->type_name()));
  }
  if (value < lo || value > hi) {
    reject(name, fmt::format("'{}' is {}; it must be between {} and {}", name, value, lo, hi));
  }
  return value;
}

std::optional<double> get_number(const json& body, const char* name, double lo, double hi) {
  const json* v = field(body, name);
  if (!v) return std::nullopt;
  if (!v->is_number()) reject(name, fmt::format("'{}' must be a number, got {}", name, v->type_name()));
  const double value = v->get<double>();
  if (!std::isfinite(value) || value < lo || value > hi) {
    reject(name, fmt::format("'{}' is {}; it must be between {} and {}", name, value, lo, hi));
  }
  return value;
}

// A message content: a string, or an array of {"type": "text", "text": ...} parts (joined).
std::string message_content(const json& content, size_t index) {
  const std::string param = fmt::format("messages[{}].content", index);
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) reject(param, fmt::format("'{}' must be a string or an array of text parts", param));
  std::string text;
  for (const json& part : content) {
    if (!part.is_object() || part.value("type", json()) != "text" || !part.contains("text") ||
        !part["text"].is_string()) {
      reject(param, fmt::format("'{}': only parts {{\"type\": \"text\", \"text\": string}} are supported", param));
    }
    text += part["text"].get<std::string>();
  }
  return text;
}

json parse_messages(const json& body) {
  const json* messages = field(body, "messages");
  if (!messages) reject("messages", "'messages' is required");
  if (!messages->is_array() || messages->empty()) reject("messages", "'messages' must be a non-empty array");
  json out = json::array();
  for (size_t i = 0; i < messages->size(); ++i) {
    const json& m = (*messages)[i];
    if (!m.is_object()) reject(fmt::format("messages[{}]", i), fmt::format("messages[{}] must be an object", i));
    const json* role = field(m, "role");
    if (!role || !role->is_string()) {
      reject(fmt::format("messages[{}].role", i), fmt::format("messages[{}].role must be a string", i));
    }
    const json* content = field(m, "content");
    const std::string text = content ? message_content(*content, i) : std::string();
    out.push_back({{"role", role->get<std::string>()}, {"content", text}});
  }
  return out;
}

std::vector<int32_t> token_ids(const json& array) {
  std::vector<int32_t> ids;
  for (const json& v : array) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > std::numeric_limits<int32_t>::max()) {
      reject("prompt", "'prompt' token ids must be non-negative integers");
    }
    ids.push_back(static_cast<int32_t>(v.get<int64_t>()));
  }
  if (ids.empty()) reject("prompt", "'prompt' must not be an empty list of token ids");
  return ids;
}

// A string, [string], [int...] or [[int...]]; several prompts are refused (one choice per request).
void parse_prompt(const json& body, ParsedRequest& out) {
  const json* prompt = field(body, "prompt");
  if (!prompt) reject("prompt", "'prompt' is required");
  if (prompt->is_string()) {
    out.prompt_text = prompt->get<std::string>();
    return;
  }
  if (!prompt->is_array() || prompt->empty()) {
    reject("prompt", "'prompt' must be a string, a list of token ids, or a list with one of those");
  }
  if ((*prompt)[0].is_number()) {
    out.prompt_ids = token_ids(*prompt);
    return;
  }
  if (prompt->size() != 1) reject("prompt", "only one prompt per request is supported (got a list of several)");
  const json& only = (*prompt)[0];
  if (only.is_string()) {
    out.prompt_text = only.get<std::string>();
  } else if (only.is_array()) {
    out.prompt_ids = token_ids(only);
  } else {
    reject("prompt", "'prompt' must be a string, a list of token ids, or a list with one of those");
  }
}

void parse_stop(const json& body, ParsedRequest& out) {
  const json* stop = field(body, "stop");
  if (!stop) return;
  const auto add = [&](const json& s) {
    if (!s.is_string()) reject("stop", "'stop' must be a string or a list of strings");
    if (static_cast<int64_t>(s.get_ref<const std::string&>().size()) > kMaxStopBytes) {
      reject("stop", fmt::format("a stop string may be at most {} bytes", kMaxStopBytes));
    }
    out.stop.push_back(s.get<std::string>());
  };
  if (stop->is_array()) {
    if (static_cast<int64_t>(stop->size()) > kMaxStopStrings) {
      reject("stop", fmt::format("at most {} stop strings are supported, got {}", kMaxStopStrings, stop->size()));
    }
    for (const json& s : *stop) add(s);
  } else {
    add(*stop);
  }
}

ParsedRequest parse_body(Endpoint endpoint, const json& body) {
  ParsedRequest out;
  out.endpoint = endpoint;
  const bool chat = endpoint == Endpoint::kChatCompletions;
  const json* model = field(body, "model");
  if (!model) reject("model", "'model' is required");
  if (!model->is_string()) reject("model", fmt::format("'model' must be a string, got {}", model->type_name()));
  out.model = model->get<std::string>();

  if (chat) {
    out.messages = parse_messages(body);
  } else {
    parse_prompt(body, out);
  }
  constexpr int64_t kMaxTokensBound = std::numeric_limits<int32_t>::max();
  out.max_tokens = get_int(body, "max_tokens", chat ? 1 : 0, kMaxTokensBound);
  if (chat) {
    if (auto v = get_int(body, "max_completion_tokens", 1, kMaxTokensBound)) out.max_tokens = v;
  }
  if (auto n = get_int(body, "n", 1, std::numeric_limits<int32_t>::max()); n && *n != 1) {
    reject("n", fmt::format("only n = 1 is supported, got {}", *n));
  }
  if (auto b = get_int(body, "best_of", 1, std::numeric_limits<int32_t>::max()); b && *b != 1) {
    reject("best_of", "only best_of = 1 is supported");
  }
  for (const char* penalty : {"presence_penalty", "frequency_penalty"}) {
    if (auto p = get_number(body, penalty, -2.0, 2.0); p && *p != 0.0) {
      reject(penalty, fmt::format("'{}' is not supported (only 0)", penalty));
    }
  }
  if (const json* bias = field(body, "logit_bias"); bias && !(bias->is_object() && bias->empty())) {
    reject("logit_bias", "'logit_bias' is not supported");
  }
  out.sampling.temperature = static_cast<float>(get_number(body, "temperature", 0.0, 2.0).value_or(1.0));
  out.sampling.top_p = static_cast<float>(get_number(body, "top_p", 0.0, 1.0).value_or(1.0));
  if (out.sampling.top_p <= 0.0f) reject("top_p", "'top_p' must be greater than 0");
  // vLLM's extensions; -1 and 0 both mean "off".
  out.sampling.top_k = std::max<int64_t>(get_int(body, "top_k", -1, std::numeric_limits<int32_t>::max()).value_or(0), 0);
  out.sampling.min_p = static_cast<float>(get_number(body, "min_p", 0.0, 1.0).value_or(0.0));
  if (auto seed = get_int(body, "seed", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max())) {
    out.sampling.seed = static_cast<uint64_t>(*seed);
    out.seed_given = true;
  }
  parse_stop(body, out);
  out.stream = get_bool(body, "stream", false);
  if (const json* options = field(body, "stream_options")) {
    if (!options->is_object()) reject("stream_options", "'stream_options' must be an object");
    if (!out.stream) reject("stream_options", "'stream_options' is only allowed with stream: true");
    out.include_usage = get_bool(*options, "include_usage", false);
  }
  out.ignore_eos = get_bool(body, "ignore_eos", false);

  if (chat) {
    out.logprobs = get_bool(body, "logprobs", false);
    out.top_logprobs = get_int(body, "top_logprobs", 0, engine::kMaxTopLogprobs).value_or(0);
    if (field(body, "top_logprobs") && !out.logprobs) {
      reject("top_logprobs", "'top_logprobs' needs 'logprobs': true");
    }
  } else {
    // /v1/completions: logprobs is the number of alternatives (0 = only the chosen token's).
    if (auto n = get_int(body, "logprobs", 0, kMaxCompletionLogprobs)) {
      out.logprobs = true;
      out.top_logprobs = *n;
    }
    out.echo = get_bool(body, "echo", false);
    if (out.echo && out.stream) reject("echo", "'echo' is not supported with stream: true");
    if (const json* suffix = field(body, "suffix"); suffix && !(suffix->is_string() && suffix->empty())) {
      reject("suffix", "'suffix' is not supported");
    }
  }
  return out;
}

}  // namespace

ParseResult parse_request(Endpoint endpoint, std::string_view body) {
  json parsed = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) {
    return ApiError{.message = "the request body is not valid JSON", .code = "invalid_json"};
  }
  if (!parsed.is_object()) {
    return ApiError{.message = fmt::format("the request body must be a JSON object, got {}", parsed.type_name()),
                    .code = "invalid_json"};
  }
  try {
    return parse_body(endpoint, parsed);
  } catch (const Reject& r) {
    return r.error;
  } catch (const nlohmann::json::exception& e) {
    return ApiError{.message = fmt::format("malformed request: {}", e.what()), .code = "invalid_value"};
  }
}

PrepareResult prepare_request(const ParsedRequest& request, const Tokenizer& tokenizer, const ServingLimits& limits) {
  if (request.model != limits.model_name) {
    return ApiError{.status = 400,
                    .message = fmt::format("the model '{}' does not exist; this server serves '{}'", request.model,
                                           limits.model_name),
                    .param = "model",
                    .code = "model_not_found"};
  }
  PreparedRequest out;
  engine::GenerationRequest& gen = out.generation;
  const bool chat = request.endpoint == Endpoint::kChatCompletions;
  try {
    if (chat) {
      if (!tokenizer.has_chat_template()) {
        return invalid_param("messages", "this model has no chat template; use /v1/completions");
      }
      const std::string text = tokenizer.apply_chat_template(nlohmann::ordered_json(request.messages));
      gen.prompt = tokenizer.encode(text, /*add_special=*/false);
      out.prompt_text = text;
    } else if (request.prompt_text) {
      gen.prompt = tokenizer.encode(*request.prompt_text);
      out.prompt_text = *request.prompt_text;
    } else {
      gen.prompt = request.prompt_ids;
      for (int32_t id : gen.prompt) {
        if (id >= tokenizer.vocab_size()) {
          return invalid_param("prompt", fmt::format("token id {} is outside the vocabulary of {}", id,
                                                     tokenizer.vocab_size()));
        }
      }
      out.prompt_text = tokenizer.decode(gen.prompt);
    }
  } catch (const Error& e) {
    return invalid_param(chat ? "messages" : "prompt", e.what());
  }
  const char* prompt_param = chat ? "messages" : "prompt";
  if (gen.prompt.empty()) return invalid_param(prompt_param, "the prompt encodes to no tokens");
  const int64_t prompt_tokens = static_cast<int64_t>(gen.prompt.size());
  if (prompt_tokens >= limits.max_context + (chat ? 0 : 1)) {
    // A completion may score a prompt of the whole context (max_tokens 0); a chat needs one token of room.
    return context_length_exceeded(
        prompt_param, fmt::format("this model's maximum context length is {} tokens, but the prompt has {} tokens",
                                  limits.max_context, prompt_tokens));
  }
  const int64_t room = limits.max_context - prompt_tokens;
  gen.max_tokens = request.max_tokens.value_or(chat ? room : std::min(limits.default_completion_max_tokens, room));
  if (gen.max_tokens > room) {
    return context_length_exceeded(
        "max_tokens", fmt::format("this model's maximum context length is {} tokens, but {} tokens were requested "
                                  "({} in the prompt, {} to generate)",
                                  limits.max_context, prompt_tokens + gen.max_tokens, prompt_tokens, gen.max_tokens));
  }
  gen.sampling = request.sampling;
  gen.stop = request.stop;
  gen.ignore_eos = request.ignore_eos;
  gen.logprobs = request.logprobs;
  gen.top_logprobs = request.top_logprobs;
  gen.prompt_logprobs = request.echo && request.logprobs;
  return out;
}

}  // namespace nibble::server
