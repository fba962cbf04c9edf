// Response bodies, SSE framing and the Prometheus text, checked against the formats' specifications
// (OpenAI's schema, the SSE "data: ...\n\n" framing, Prometheus exposition format 0.0.4).
#include <gtest/gtest.h>

#include <sstream>

#include "server/metrics_text.h"
#include "server/responses.h"

namespace nibble::server {
namespace {

using nlohmann::json;
const std::string kStoriesDir = NIBBLE_SOURCE_DIR "/models/stories260k";

TEST(Sse, Framing) {
  EXPECT_EQ(sse_event(json{{"a", 1}}), "data: {\"a\":1}\n\n");
  EXPECT_EQ(sse_done(), "data: [DONE]\n\n");
  // A newline inside the text is escaped by JSON: one event stays one line.
  EXPECT_EQ(sse_event(json{{"t", "x\ny"}}), "data: {\"t\":\"x\\ny\"}\n\n");
}

TEST(Responses, CompletionAndChunks) {
  const engine::Usage usage{.prompt_tokens = 5, .cached_tokens = 3, .completion_tokens = 2};
  const ResponseContext ctx{.id = "cmpl-1", .created = 7, .model = "m", .endpoint = Endpoint::kCompletions};
  const json full = completion_response(ctx, "hi", engine::FinishReason::kLength, usage, nullptr);
  EXPECT_EQ(full["object"], "text_completion");
  EXPECT_EQ(full["choices"][0]["text"], "hi");
  EXPECT_EQ(full["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(full["usage"]["total_tokens"], 7);
  EXPECT_EQ(full["usage"]["prompt_tokens_details"]["cached_tokens"], 3);

  const ResponseContext chat{.id = "c", .created = 7, .model = "m", .endpoint = Endpoint::kChatCompletions};
  const json first = stream_chunk(chat, "a", true, engine::FinishReason::kNone, nullptr);
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
  EXPECT_TRUE(first["choices"][0]["finish_reason"].is_null());
  const json last = stream_chunk(chat, "b", false, engine::FinishReason::kStop, nullptr);
  EXPECT_FALSE(last["choices"][0]["delta"].contains("role"));
  EXPECT_EQ(last["choices"][0]["finish_reason"], "stop");
  const json u = usage_chunk(chat, usage);
  EXPECT_TRUE(u["choices"].empty());
  EXPECT_EQ(u["usage"]["completion_tokens"], 2);
  EXPECT_EQ(completion_response(chat, "x", engine::FinishReason::kStop, usage, nullptr)["choices"][0]["message"]["content"],
            "x");
}

TEST(Responses, CompletionLogprobsOffsetsIndexTheText) {
  const Tokenizer tok = Tokenizer::load(kStoriesDir);
  const std::vector<int32_t> ids = tok.encode("Once upon a time");
  LogprobsBuilder b(tok, Endpoint::kCompletions);
  b.add(ids[0], std::nullopt);
  for (size_t i = 1; i < ids.size(); ++i) {
    b.add(ids[i], engine::TokenLogprob{.token = ids[i], .logprob = -0.5f * static_cast<float>(i),
                                       .top = {{.token = ids[i], .logprob = -0.1f}}});
  }
  const json lp = b.take();
  const std::string text = tok.decode(ids, /*skip_special=*/true);
  ASSERT_EQ(lp["tokens"].size(), ids.size());
  EXPECT_TRUE(lp["token_logprobs"][0].is_null());
  EXPECT_TRUE(lp["top_logprobs"][0].is_null());
  std::string joined;
  for (size_t i = 0; i < ids.size(); ++i) {
    EXPECT_EQ(lp["text_offset"][i].get<size_t>(), joined.size());
    joined += lp["tokens"][i].get<std::string>();
  }
  EXPECT_EQ(joined, text);
  EXPECT_FLOAT_EQ(lp["token_logprobs"][2].get<float>(), -1.0f);
  EXPECT_EQ(lp["top_logprobs"][1].size(), 1u);
  EXPECT_TRUE(b.take()["tokens"].empty());  // take() starts a new chunk
}

TEST(MetricsText, PrometheusFormat) {
  engine::EngineMetrics m;
  m.kv_pages_total = 64;
  m.kv_pages_requests = 5;
  m.kv_pages_cached = 3;
  m.kv_pages_evictable = 2;
  m.waiting_requests = 7;
  m.waiting_for_pages = 7;
  m.prefix_cache_hit_tokens = 48;
  m.time_to_first_token.observe(0.003);   // bucket le=0.005
  m.time_to_first_token.observe(100.0);   // +Inf only
  const std::string text = metrics_text(m, "st\"ories");
  EXPECT_NE(text.find("# TYPE nibble_kv_pages_total gauge\nnibble_kv_pages_total{model=\"st\\\"ories\"} 64\n"),
            std::string::npos);
  EXPECT_NE(text.find("nibble_kv_pages_used{model=\"st\\\"ories\"} 5\n"), std::string::npos);
  EXPECT_NE(text.find("nibble_kv_pages_cached{model=\"st\\\"ories\"} 3\n"), std::string::npos);
  EXPECT_NE(text.find("nibble_kv_pages_evictable{model=\"st\\\"ories\"} 2\n"), std::string::npos);
  EXPECT_NE(text.find("nibble_requests_waiting_for_pages{model=\"st\\\"ories\"} 7\n"), std::string::npos);
  EXPECT_NE(text.find("nibble_requests_waiting_for_running_cap{model=\"st\\\"ories\"} 0\n"), std::string::npos);
  EXPECT_NE(text.find("# TYPE nibble_prefix_cache_hit_tokens_total counter\n"), std::string::npos);
  EXPECT_NE(text.find("nibble_time_to_first_token_seconds_bucket{model=\"st\\\"ories\",le=\"0.001\"} 0\n"),
            std::string::npos);
  EXPECT_NE(text.find("nibble_time_to_first_token_seconds_bucket{model=\"st\\\"ories\",le=\"0.005\"} 1\n"),
            std::string::npos);
  EXPECT_NE(text.find("nibble_time_to_first_token_seconds_bucket{model=\"st\\\"ories\",le=\"60\"} 1\n"),
            std::string::npos);
  EXPECT_NE(text.find("nibble_time_to_first_token_seconds_bucket{model=\"st\\\"ories\",le=\"+Inf\"} 2\n"),
            std::string::npos);
  EXPECT_NE(text.find("nibble_time_to_first_token_seconds_count{model=\"st\\\"ories\"} 2\n"), std::string::npos);
  // Every non-comment line is "name{labels} value" with a numeric value.
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty() || line[0] == '#') continue;
    const size_t space = line.rfind(' ');
    ASSERT_NE(space, std::string::npos) << line;
    size_t used = 0;
    std::stod(line.substr(space + 1), &used);
    EXPECT_EQ(used, line.size() - space - 1) << line;
  }
}

}  // namespace
}  // namespace nibble::server
