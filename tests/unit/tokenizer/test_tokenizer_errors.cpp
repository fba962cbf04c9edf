// A malformed or unsupported tokenizer.json is a nibble::Error naming the problem; long inputs stay fast.
#include <gtest/gtest.h>

#include <chrono>

#include "common/error.h"
#include "tokenizer/tokenizer.h"

namespace {

std::string error_of(const std::string& json) {
  try {
    nibble::Tokenizer::from_json(json);
  } catch (const nibble::Error& e) {
    return e.what();
  }
  return "(no error)";
}

const std::string kMinimalModel = R"({"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]})";

TEST(TokenizerErrors, MalformedFilesAreNamed) {
  EXPECT_NE(error_of("{not json").find("not valid JSON"), std::string::npos);
  EXPECT_NE(error_of("{}").find("\"model\""), std::string::npos);
  EXPECT_NE(error_of(R"({"model": {"type": "Unigram", "vocab": []}})").find("Unigram"), std::string::npos);
  EXPECT_NE(error_of(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a c"]}})").find("merge 0"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"model": {"type": "BPE", "vocab": {"a": -5}, "merges": []}})").find("out of range"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"normalizer": {"type": "NFKD"}, "model": )" + kMinimalModel + "}").find("NFKD"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"pre_tokenizer": {"type": "Split", "pattern": {"Regex": "(unclosed"}, "behavior": "Isolated"},
                         "model": )" + kMinimalModel + "}").find("does not compile"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"decoder": {"type": "CTC"}, "model": )" + kMinimalModel + "}").find("CTC"), std::string::npos);
}

TEST(TokenizerErrors, InvalidUtf8InputAndBadIds) {
  const auto tok = nibble::Tokenizer::from_json(R"({"model": )" + kMinimalModel + "}");
  EXPECT_EQ(tok.encode("abab", false), (std::vector<int32_t>{2, 2}));
  EXPECT_THROW(tok.encode("a\xFF", false), nibble::Error);
  const std::vector<int32_t> bad{7};
  EXPECT_THROW(tok.decode(bad, false), nibble::Error);
  EXPECT_THROW(nibble::Tokenizer::load("/nonexistent/model"), nibble::Error);
}

TEST(TokenizerPerformance, LongInputsAreNotQuadratic) {
  const nibble::Tokenizer tok = nibble::Tokenizer::load(std::string(NIBBLE_SOURCE_DIR) + "/models/stories260k");
  std::string text;
  while (text.size() < 200'000) text += "Once upon a time there was a little girl named Lily. 中文! ";
  const auto start = std::chrono::steady_clock::now();
  const auto ids = tok.encode(text, true);  // no pre-tokenizer: the whole text is one BPE word
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(tok.decode(ids, true), text);
  EXPECT_LT(seconds, 5.0) << "200 KB took " << seconds << " s";
}

}  // namespace
