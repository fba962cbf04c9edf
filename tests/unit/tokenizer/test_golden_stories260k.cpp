// The 44 tokenizer cases of models/stories260k/golden.json (ids from the original implementation)
// must match exactly, and decode must give back the text.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>

#include "tokenizer/tokenizer.h"

namespace {

const std::string kModelDir = std::string(NIBBLE_SOURCE_DIR) + "/models/stories260k";

nlohmann::json golden_cases() {
  std::ifstream in(kModelDir + "/golden.json");
  return nlohmann::json::parse(in).at("tokenizer_cases");
}

TEST(TokenizerGolden, Stories260kEncodeMatchesAll44Cases) {
  const nibble::Tokenizer tok = nibble::Tokenizer::load(kModelDir);
  const nlohmann::json cases = golden_cases();
  ASSERT_EQ(cases.size(), 44u);
  for (const auto& c : cases) {
    const std::string text = c.at("text");
    EXPECT_EQ(tok.encode(text, true), c.at("ids").get<std::vector<int32_t>>()) << "text: " << text;
  }
}

TEST(TokenizerGolden, Stories260kDecodeRoundTrips) {
  const nibble::Tokenizer tok = nibble::Tokenizer::load(kModelDir);
  for (const auto& c : golden_cases()) {
    const std::string text = c.at("text");
    const auto ids = c.at("ids").get<std::vector<int32_t>>();
    // SentencePiece decode drops the BOS (skip_special) and the leading space the normalizer added.
    EXPECT_EQ(tok.decode(ids, /*skip_special=*/true), text) << "text: " << text;
  }
}

TEST(TokenizerGolden, Stories260kSpecialTokensAndConfig) {
  const nibble::Tokenizer tok = nibble::Tokenizer::load(kModelDir);
  EXPECT_EQ(tok.vocab_size(), 512);
  EXPECT_EQ(tok.bos_id(), std::optional<int32_t>(1));
  EXPECT_EQ(tok.eos_ids(), std::vector<int32_t>{2});
  EXPECT_TRUE(tok.is_special(1));
  EXPECT_FALSE(tok.is_special(300));
  EXPECT_EQ(tok.encode("", false), std::vector<int32_t>{});
  EXPECT_FALSE(tok.has_chat_template());
}

}  // namespace
