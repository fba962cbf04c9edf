// UTF-8 helpers against Rust's from_utf8_lossy rules, and NFC against textbook compositions.
#include <gtest/gtest.h>

#include "tokenizer/unicode_nfc.h"
#include "tokenizer/utf8.h"

namespace {

TEST(Utf8, LossyReplacesMaximalInvalidSubparts) {
  using nibble::utf8::lossy;
  EXPECT_EQ(lossy("abc"), "abc");
  EXPECT_EQ(lossy("\xE4\xB8"), "\xEF\xBF\xBD");                 // truncated 3-byte char: one U+FFFD
  EXPECT_EQ(lossy("\xE4\xB8x"), "\xEF\xBF\xBDx");
  EXPECT_EQ(lossy("\xFF\xFE"), "\xEF\xBF\xBD\xEF\xBF\xBD");     // two invalid bytes: two U+FFFD
  EXPECT_EQ(lossy("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // surrogate: 3 (Unicode 3-7)
  EXPECT_EQ(lossy("\xC0\xAF"), "\xEF\xBF\xBD\xEF\xBF\xBD");     // overlong
}

TEST(Utf8, IncompleteTail) {
  using nibble::utf8::incomplete_tail_length;
  EXPECT_EQ(incomplete_tail_length("a\xE4\xB8"), 2u);
  EXPECT_EQ(incomplete_tail_length("a\xE4\xB8\xAD"), 0u);
  EXPECT_EQ(incomplete_tail_length("\xF0\x9F\x98"), 3u);
  EXPECT_EQ(incomplete_tail_length("a\xFF"), 0u);  // invalid, not incomplete
}

TEST(Nfc, ComposesDecomposesAndReorders) {
  EXPECT_EQ(nibble::nfc("e\u0301"), "\u00e9");
  EXPECT_EQ(nibble::nfc("\u00e9"), "\u00e9");
  EXPECT_EQ(nibble::nfc("A\u030a"), "\u00c5");
  EXPECT_EQ(nibble::nfc("\u212b"), "\u00c5");                   // Angstrom sign -> Å (singleton)
  EXPECT_EQ(nibble::nfc("q\u0307\u0323"), "q\u0323\u0307");     // canonical reordering (ccc 220 before 230)
  EXPECT_EQ(nibble::nfc("\u1e0b\u0323"), "\u1e0d\u0307");       // ḋ + dot below -> ḍ + dot above
  EXPECT_EQ(nibble::nfc("\u1100\u1161\u11a8"), "\uac01");       // Hangul jamo -> 각
  EXPECT_EQ(nibble::nfc("\u0344"), "\u0308\u0301");             // composition exclusion stays decomposed
  EXPECT_EQ(nibble::nfc("\ufb01"), "\ufb01");                   // compatibility ligature untouched by NFC
}

}  // namespace
