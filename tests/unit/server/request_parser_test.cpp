// Request parsing and validation: every rejection is a 400 naming the parameter; accepted requests
// carry exactly the values sent. prepare_request is checked with stories260k's tokenizer.
#include <gtest/gtest.h>

#include "server/request_parser.h"

namespace nibble::server {
namespace {

const std::string kModelDir = NIBBLE_SOURCE_DIR "/models/stories260k";

ApiError error_of(Endpoint e, const std::string& body) {
  ParseResult r = parse_request(e, body);
  EXPECT_TRUE(std::holds_alternative<ApiError>(r)) << body;
  return std::holds_alternative<ApiError>(r) ? std::get<ApiError>(r) : ApiError{};
}

ParsedRequest ok(Endpoint e, const std::string& body) {
  ParseResult r = parse_request(e, body);
  if (auto* err = std::get_if<ApiError>(&r)) ADD_FAILURE() << body << " -> " << err->message;
  return std::holds_alternative<ParsedRequest>(r) ? std::get<ParsedRequest>(r) : ParsedRequest{};
}

constexpr Endpoint kChat = Endpoint::kChatCompletions;
constexpr Endpoint kCompl = Endpoint::kCompletions;

TEST(RequestParser, CompletionFields) {
  const ParsedRequest r = ok(kCompl, R"({"model": "m", "prompt": "hi", "max_tokens": 7, "temperature": 0.5,
      "top_p": 0.9, "top_k": 40, "min_p": 0.05, "seed": 42, "stop": ["a", "bc"], "stream": true,
      "stream_options": {"include_usage": true}, "logprobs": 3, "user": "ignored"})");
  EXPECT_EQ(r.model, "m");
  EXPECT_EQ(r.prompt_text, "hi");
  EXPECT_EQ(r.max_tokens, 7);
  EXPECT_FLOAT_EQ(r.sampling.temperature, 0.5f);
  EXPECT_FLOAT_EQ(r.sampling.top_p, 0.9f);
  EXPECT_EQ(r.sampling.top_k, 40);
  EXPECT_FLOAT_EQ(r.sampling.min_p, 0.05f);
  EXPECT_EQ(r.sampling.seed, 42u);
  EXPECT_TRUE(r.seed_given);
  EXPECT_EQ(r.stop, (std::vector<std::string>{"a", "bc"}));
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  EXPECT_TRUE(r.logprobs);
  EXPECT_EQ(r.top_logprobs, 3);
}

TEST(RequestParser, DefaultsAndPromptForms) {
  const ParsedRequest r = ok(kCompl, R"({"model": "m", "prompt": [1, 2, 3]})");
  EXPECT_EQ(r.prompt_ids, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_FALSE(r.max_tokens.has_value());
  EXPECT_FLOAT_EQ(r.sampling.temperature, 1.0f);
  EXPECT_FALSE(r.seed_given);
  EXPECT_FALSE(r.logprobs);
  EXPECT_EQ(ok(kCompl, R"({"model": "m", "prompt": [[4, 5]]})").prompt_ids, (std::vector<int32_t>{4, 5}));
  EXPECT_EQ(ok(kCompl, R"({"model": "m", "prompt": ["x"], "stop": "s"})").prompt_text, "x");
  EXPECT_EQ(ok(kCompl, R"({"model": "m", "prompt": "x", "stop": "s"})").stop, std::vector<std::string>{"s"});
  const ParsedRequest echo = ok(kCompl, R"({"model": "m", "prompt": "x", "echo": true, "logprobs": 0, "max_tokens": 0})");
  EXPECT_TRUE(echo.echo);
  EXPECT_TRUE(echo.logprobs);
  EXPECT_EQ(echo.top_logprobs, 0);
  EXPECT_EQ(echo.max_tokens, 0);
  EXPECT_EQ(ok(kCompl, R"({"model": "m", "prompt": "x", "max_tokens": 5.0})").max_tokens, 5);
}

TEST(RequestParser, ChatMessages) {
  const ParsedRequest r = ok(kChat, R"({"model": "m", "messages": [{"role": "system", "content": "be brief"},
      {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}],
      "logprobs": true, "top_logprobs": 2, "max_completion_tokens": 9})");
  ASSERT_EQ(r.messages.size(), 2u);
  EXPECT_EQ(r.messages[1]["content"], "ab");
  EXPECT_EQ(r.messages[0]["role"], "system");
  EXPECT_TRUE(r.logprobs);
  EXPECT_EQ(r.top_logprobs, 2);
  EXPECT_EQ(r.max_tokens, 9);
}

TEST(RequestParser, Rejections) {
  struct Case {
    Endpoint endpoint;
    const char* body;
    const char* param;  // "" = none
  };
  const Case cases[] = {
      {kCompl, R"({"model": "m", "prompt": "x")", ""},                       // malformed JSON
      {kCompl, R"([1, 2])", ""},                                              // not an object
      {kCompl, R"({"prompt": "x"})", "model"},
      {kCompl, R"({"model": 3, "prompt": "x"})", "model"},
      {kCompl, R"({"model": "m"})", "prompt"},
      {kCompl, R"({"model": "m", "prompt": 5})", "prompt"},
      {kCompl, R"({"model": "m", "prompt": ["a", "b"]})", "prompt"},          // several prompts
      {kCompl, R"({"model": "m", "prompt": [1, -2]})", "prompt"},
      {kCompl, R"({"model": "m", "prompt": []})", "prompt"},
      {kCompl, R"({"model": "m", "prompt": "x", "max_tokens": -1})", "max_tokens"},
      {kCompl, R"({"model": "m", "prompt": "x", "max_tokens": "5"})", "max_tokens"},
      {kCompl, R"({"model": "m", "prompt": "x", "max_tokens": 2.5})", "max_tokens"},
      {kCompl, R"({"model": "m", "prompt": "x", "max_tokens": 99999999999})", "max_tokens"},
      {kCompl, R"({"model": "m", "prompt": "x", "temperature": -0.1})", "temperature"},
      {kCompl, R"({"model": "m", "prompt": "x", "temperature": "hot"})", "temperature"},
      {kCompl, R"({"model": "m", "prompt": "x", "top_p": 0})", "top_p"},
      {kCompl, R"({"model": "m", "prompt": "x", "top_p": 1.5})", "top_p"},
      {kCompl, R"({"model": "m", "prompt": "x", "min_p": 2})", "min_p"},
      {kCompl, R"({"model": "m", "prompt": "x", "top_k": -5})", "top_k"},
      {kCompl, R"({"model": "m", "prompt": "x", "n": 2})", "n"},
      {kCompl, R"({"model": "m", "prompt": "x", "stop": [1]})", "stop"},
      {kCompl, R"({"model": "m", "prompt": "x", "stream": "yes"})", "stream"},
      {kCompl, R"({"model": "m", "prompt": "x", "stream_options": {"include_usage": true}})", "stream_options"},
      {kCompl, R"({"model": "m", "prompt": "x", "logprobs": 6})", "logprobs"},
      {kCompl, R"({"model": "m", "prompt": "x", "logprobs": true})", "logprobs"},
      {kCompl, R"({"model": "m", "prompt": "x", "echo": true, "stream": true})", "echo"},
      {kCompl, R"({"model": "m", "prompt": "x", "presence_penalty": 0.5})", "presence_penalty"},
      {kChat, R"({"model": "m"})", "messages"},
      {kChat, R"({"model": "m", "messages": []})", "messages"},
      {kChat, R"({"model": "m", "messages": [{"content": "x"}]})", "messages[0].role"},
      {kChat, R"({"model": "m", "messages": [{"role": "user", "content": 5}]})", "messages[0].content"},
      {kChat, R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokens": 0})", "max_tokens"},
      {kChat, R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})", "top_logprobs"},
      {kChat, R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "logprobs": true, "top_logprobs": 21})",
       "top_logprobs"},
  };
  for (const Case& c : cases) {
    const ApiError e = error_of(c.endpoint, c.body);
    EXPECT_EQ(e.status, 400) << c.body;
    EXPECT_EQ(e.param, c.param) << c.body << ": " << e.message;
    EXPECT_FALSE(e.message.empty());
    const nlohmann::json body = error_body(e);
    EXPECT_TRUE(body["error"].contains("type") && body["error"].contains("code") && body["error"].contains("param"));
  }
}

TEST(PrepareRequest, TokenizesAndChecksTheContext) {
  const Tokenizer tok = Tokenizer::load(kModelDir);
  const ServingLimits limits{.model_name = "m", .max_context = 16};
  const auto prepare = [&](Endpoint e, const std::string& body) { return prepare_request(ok(e, body), tok, limits); };

  PrepareResult r = prepare(kCompl, R"({"model": "m", "prompt": "Once upon a time"})");
  ASSERT_TRUE(std::holds_alternative<PreparedRequest>(r));
  const PreparedRequest& p = std::get<PreparedRequest>(r);
  EXPECT_EQ(p.generation.prompt, tok.encode("Once upon a time"));
  EXPECT_EQ(p.generation.max_tokens, 11);  // the default 16 capped by the context: 16 - 5
  EXPECT_EQ(p.prompt_text, "Once upon a time");

  const auto error = [&](PrepareResult res) { return std::get<ApiError>(res); };
  EXPECT_EQ(error(prepare(kCompl, R"({"model": "other", "prompt": "x"})")).code, "model_not_found");
  ApiError too_long = error(prepare(kCompl, R"({"model": "m", "prompt": "Once upon a time there was a little girl named Lily who loved"})"));
  EXPECT_EQ(too_long.code, "context_length_exceeded");
  EXPECT_EQ(too_long.status, 400);
  EXPECT_EQ(error(prepare(kCompl, R"({"model": "m", "prompt": "Once", "max_tokens": 15})")).code,
            "context_length_exceeded");
  EXPECT_EQ(error(prepare(kCompl, R"({"model": "m", "prompt": [1, 100000]})")).param, "prompt");
  // stories260k has no chat template
  EXPECT_EQ(error(prepare(kChat, R"({"model": "m", "messages": [{"role": "user", "content": "x"}]})")).param,
            "messages");
  PrepareResult score = prepare(kCompl, R"({"model": "m", "prompt": [1, 2, 3], "max_tokens": 0, "echo": true, "logprobs": 1})");
  ASSERT_TRUE(std::holds_alternative<PreparedRequest>(score));
  EXPECT_TRUE(std::get<PreparedRequest>(score).generation.prompt_logprobs);
  EXPECT_EQ(std::get<PreparedRequest>(score).generation.top_logprobs, 1);
}

}  // namespace
}  // namespace nibble::server
