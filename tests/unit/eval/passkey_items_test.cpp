// Passkey items on the stories260k tokenizer: determined by the seed, within the requested length,
// the needle at the requested depth, and the digit-run scorer.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>

#include "common/error.h"
#include "eval/passkey.h"
#include "unit/eval/stories_tokenizer.h"

namespace nibble::eval {
namespace {

PasskeyOptions passkey_options(uint64_t seed) {
  return {.lengths = {400, 800}, .depths = {0.0, 0.5, 1.0}, .samples = 3, .seed = seed};
}

TEST(PasskeyItems, DeterminedBySeed) {
  const auto a = make_passkey_items(stories_tokenizer(), passkey_options(11));
  const auto b = make_passkey_items(stories_tokenizer(), passkey_options(11));
  const auto c = make_passkey_items(stories_tokenizer(), passkey_options(12));
  ASSERT_EQ(a.size(), 2u * 3u * 3u);  // lengths x depths x samples
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].key, b[i].key);
    EXPECT_EQ(a[i].prompt, b[i].prompt);
  }
  int same = 0;
  for (size_t i = 0; i < a.size(); ++i) same += a[i].key == c[i].key;
  EXPECT_LT(same, 3);
  // Keys: 5 digits, first one non-zero, and the documented sequence: 10000 + mt19937_64(seed)() %
  // 90000 in item order (the engine's output sequence is fixed by the C++ standard).
  std::mt19937_64 rng(11);
  std::set<std::string> keys;
  for (const auto& item : a) {
    ASSERT_EQ(item.key.size(), 5u);
    EXPECT_NE(item.key[0], '0');
    EXPECT_EQ(item.key, std::to_string(10000 + rng() % 90000));
    keys.insert(item.key);
  }
  EXPECT_GT(keys.size(), a.size() - 2);
}

TEST(PasskeyItems, FitTheLengthAndHideTheKeyAtTheDepth) {
  const auto items = make_passkey_items(stories_tokenizer(), passkey_options(3));
  for (const PasskeyItem& item : items) {
    EXPECT_LE(static_cast<int64_t>(item.prompt.size()), item.length);
    // Largest filler count that fits: one more filler sentence (~20+ tokens) would overflow.
    EXPECT_GT(static_cast<int64_t>(item.prompt.size()), item.length - 40);
    const std::string text = stories_tokenizer().decode(item.prompt, true);
    const size_t needle = text.find(passkey_needle(item.key));
    ASSERT_NE(needle, std::string::npos) << text;
    // Depth is measured within the filler region (between the intro and the question); the needle
    // sits at a sentence boundary, so within half a sentence of the requested depth.
    const std::string intro_end = "I will ask you about it.\n";
    const size_t intro = text.find(intro_end), question = text.find("What is the pass key?");
    ASSERT_NE(intro, std::string::npos);
    ASSERT_NE(question, std::string::npos);
    const size_t filler_begin = intro + intro_end.size();
    const double filler_chars = static_cast<double>(question - filler_begin - passkey_needle(item.key).size());
    const double relative = static_cast<double>(needle - filler_begin) / filler_chars;
    ASSERT_GE(item.filler_sentences, 4);
    EXPECT_NEAR(relative, item.depth, 0.5 / static_cast<double>(item.filler_sentences) + 0.02)
        << "depth " << item.depth << " length " << item.length;
    EXPECT_EQ(item.needle_after, std::llround(item.depth * item.filler_sentences));
    EXPECT_NE(text.find("What is the pass key?"), std::string::npos);
  }
}

TEST(PasskeyItems, RejectBadOptions) {
  EXPECT_THROW(make_passkey_items(stories_tokenizer(), {.lengths = {200}, .depths = {1.5}}), Error);
  EXPECT_THROW(make_passkey_items(stories_tokenizer(), {.lengths = {200}, .depths = {0.5}, .samples = 0}), Error);
  EXPECT_THROW(make_passkey_items(stories_tokenizer(), {.lengths = {20}, .depths = {0.5}}), Error);  // too short
}

TEST(PasskeyScoring, FirstDigitRun) {
  EXPECT_EQ(first_digit_run(" 12345. Remember"), "12345");
  EXPECT_EQ(first_digit_run("key is 123456"), "123456");
  EXPECT_EQ(first_digit_run("no digits"), "");
  EXPECT_EQ(first_digit_run("1 2345"), "1");
}

}  // namespace
}  // namespace nibble::eval
