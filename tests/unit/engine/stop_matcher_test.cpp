// StopMatcher against a brute-force oracle: the released text must equal the whole text cut at the
// earliest occurrence of any stop string, however the text is split into deltas, and no release may
// ever go past that cut.
#include <gtest/gtest.h>

#include <random>

#include "common/error.h"
#include "engine/stop_matcher.h"

namespace nibble::engine {
namespace {

// Reading byte by byte: the first prefix that contains a stop string; cut where that stop begins.
std::string expected_cut(const std::string& text, const std::vector<std::string>& stops, bool& stopped) {
  for (size_t end = 0; end <= text.size(); ++end) {
    const std::string prefix = text.substr(0, end);
    size_t cut = std::string::npos;
    for (const std::string& s : stops) {
      if (!s.empty() && prefix.size() >= s.size() && prefix.compare(end - s.size(), s.size(), s) == 0) {
        cut = std::min(cut, end - s.size());
      }
    }
    if (cut != std::string::npos) {
      stopped = true;
      return text.substr(0, cut);
    }
  }
  stopped = false;
  return text;
}

TEST(StopMatcher, ExampleAcrossDeltas) {
  StopMatcher m({"\n\n", "END"});
  StopMatch a = m.push("Hello\n");
  EXPECT_EQ(a.text, "Hello");
  EXPECT_FALSE(a.stopped);
  EXPECT_EQ(m.held_bytes(), 1u);
  StopMatch b = m.push("\nmore");
  EXPECT_EQ(b.text, "");
  EXPECT_TRUE(b.stopped);
  EXPECT_THROW(m.push("x"), Error);
}

TEST(StopMatcher, HeldPrefixReleasedWhenItDoesNotMatch) {
  StopMatcher m({"END"});
  EXPECT_EQ(m.push("the E").text, "the ");
  EXPECT_EQ(m.push("N").text, "");
  EXPECT_EQ(m.push("D?").text, "");
  EXPECT_TRUE(m.stopped());
  StopMatcher n({"END"});
  EXPECT_EQ(n.push("EN").text, "");
  EXPECT_EQ(n.push("d").text, "ENd");
  EXPECT_EQ(n.push("EN").text, "");
  EXPECT_EQ(n.flush(), "EN");
}

TEST(StopMatcher, MultiByteStopKeepsCharactersWhole) {
  StopMatcher m({"café"});
  StopMatch a = m.push("a caf");
  EXPECT_EQ(a.text, "a ");
  StopMatch b = m.push("\xc3\xa9!");
  EXPECT_TRUE(b.stopped);
  EXPECT_EQ(b.text, "");
}

TEST(StopMatcher, RandomSplitsMatchBruteForce) {
  std::mt19937 rng(1234);
  const std::string alphabet = "ab\n";
  for (int trial = 0; trial < 3000; ++trial) {
    std::uniform_int_distribution<int> len(0, 24), pick(0, 2), stop_len(0, 4), nstops(0, 3);
    std::string text;
    for (int i = len(rng); i > 0; --i) text += alphabet[pick(rng)];
    std::vector<std::string> stops;
    for (int s = nstops(rng); s > 0; --s) {
      std::string stop;
      for (int i = stop_len(rng); i > 0; --i) stop += alphabet[pick(rng)];
      stops.push_back(stop);
    }
    bool want_stop = false;
    const std::string want = expected_cut(text, stops, want_stop);
    StopMatcher m(stops);
    std::string got;
    bool stopped = false;
    size_t pos = 0;
    while (pos < text.size() && !stopped) {
      const size_t n = std::min<size_t>(std::uniform_int_distribution<size_t>(0, 4)(rng), text.size() - pos);
      StopMatch r = m.push(std::string_view(text).substr(pos, n));
      got += r.text;
      stopped = r.stopped;
      pos += n;
      ASSERT_EQ(want.compare(0, got.size(), got), 0) << "released past the cut: text '" << text << "' stops " << testing::PrintToString(stops) << " got '" << got << "'";
    }
    if (!stopped) got += m.flush();
    EXPECT_EQ(got, want) << "text '" << text << "'";
    EXPECT_EQ(stopped, want_stop) << "text '" << text << "'";
  }
}

}  // namespace
}  // namespace nibble::engine
