// SSE framing (split anywhere, every line ending) and the OpenAI stream chunk fields.
#include <gtest/gtest.h>

#include "bench/sse.h"
#include "common/error.h"

namespace nibble::bench {
namespace {

std::vector<std::string> parse_in_pieces(const std::string& stream, size_t piece) {
  std::vector<std::string> events;
  SseParser parser([&](std::string_view d) { events.emplace_back(d); });
  for (size_t i = 0; i < stream.size(); i += piece) parser.feed(std::string_view(stream).substr(i, piece));
  return events;
}

TEST(SseParser, EventsSurviveAnySplit) {
  const std::string stream =
      ": keep-alive comment\r\n"
      "event: message\r\n"
      "data: {\"a\":1}\r\n\r\n"
      "data:{\"b\":2}\n\n"
      "data: line one\n"
      "data: line two\n\n"
      "id: 7\r\r"
      "data: cr only\r\r"
      "data: [DONE]\n\n"
      "data: unterminated";
  const std::vector<std::string> expected = {"{\"a\":1}", "{\"b\":2}", "line one\nline two", "cr only", "[DONE]"};
  for (size_t piece = 1; piece <= stream.size(); ++piece) EXPECT_EQ(parse_in_pieces(stream, piece), expected) << piece;
}

TEST(SseParser, CrLfSplitBetweenChunksIsOneLineEnd) {
  std::vector<std::string> events;
  SseParser parser([&](std::string_view d) { events.emplace_back(d); });
  parser.feed("data: x\r");
  parser.feed("\n\r");
  EXPECT_EQ(events, std::vector<std::string>{"x"});  // "\r\n" ended the line, the next "\r" the event
  parser.feed("\ndata: y\n\n");
  EXPECT_EQ(events, (std::vector<std::string>{"x", "y"}));
}

TEST(StreamChunk, CompletionsChatUsageDoneAndErrors) {
  StreamChunk c = parse_stream_chunk(R"({"choices":[{"index":0,"text":"Hi"}],"usage":null})");
  EXPECT_EQ(c.text, "Hi");
  EXPECT_FALSE(c.has_usage);
  c = parse_stream_chunk(R"({"choices":[{"delta":{"role":"assistant","content":"yo"}}]})");
  EXPECT_EQ(c.text, "yo");
  c = parse_stream_chunk(
      R"({"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":5,"prompt_tokens_details":{"cached_tokens":8}}})");
  EXPECT_TRUE(c.has_usage);
  EXPECT_EQ(c.prompt_tokens, 12);
  EXPECT_EQ(c.completion_tokens, 5);
  EXPECT_EQ(c.cached_tokens, 8);
  c = parse_stream_chunk(R"({"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":1,"prompt_tokens_details":null}})");
  EXPECT_EQ(c.cached_tokens, 0);
  EXPECT_TRUE(parse_stream_chunk("[DONE]").done);
  EXPECT_EQ(parse_stream_chunk(R"({"error":{"message":"KV pool full","code":503}})").error, "KV pool full");
  EXPECT_THROW(parse_stream_chunk("not json"), Error);
  EXPECT_THROW(parse_stream_chunk("[1,2]"), Error);
}

}  // namespace
}  // namespace nibble::bench
