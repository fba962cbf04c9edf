// Multi-needle items on the stories260k tokenizer: determined by the seed, within the length
// budget, N distinct names and values, the asked needle one of them and at the requested depth,
// the needles spread through the filler; scoring with the confusion count; and the summary.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "common/error.h"
#include "eval/multi_needle.h"
#include "unit/eval/stories_tokenizer.h"

namespace nibble::eval {
namespace {

MultiNeedleOptions needle_options(uint64_t seed, int64_t needles = 4) {
  return {.lengths = {400, 800}, .depths = {0.0, 0.5, 1.0}, .needles = needles, .samples = 3, .seed = seed};
}

std::string values_of(const MultiNeedleItem& item) {
  std::string s;
  for (const Needle& n : item.needles) s += n.name + "=" + n.value + ";";
  return s;
}

TEST(MultiNeedleItems, DeterminedBySeed) {
  const auto a = make_multi_needle_items(stories_tokenizer(), needle_options(11));
  const auto b = make_multi_needle_items(stories_tokenizer(), needle_options(11));
  const auto c = make_multi_needle_items(stories_tokenizer(), needle_options(12));
  ASSERT_EQ(a.size(), 2u * 3u * 3u);
  ASSERT_EQ(c.size(), a.size());
  int same = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(values_of(a[i]), values_of(b[i]));
    EXPECT_EQ(a[i].asked, b[i].asked);
    EXPECT_EQ(a[i].prompt, b[i].prompt);
    same += values_of(a[i]) == values_of(c[i]);
  }
  EXPECT_EQ(same, 0);
  // Across items the asked position and the names vary (a seed does not fix one pattern).
  std::set<int64_t> asked;
  std::set<std::string> names;
  for (const auto& item : a) {
    asked.insert(item.asked);
    for (const Needle& n : item.needles) names.insert(n.name);
  }
  EXPECT_GE(asked.size(), 3u);
  EXPECT_GE(names.size(), 10u);
}

TEST(MultiNeedleItems, NeedlesFitDistinctAndAsked) {
  for (int64_t n : {1, 4, 7}) {
    const auto items = make_multi_needle_items(stories_tokenizer(), needle_options(5, n));
    for (const MultiNeedleItem& item : items) {
      ASSERT_EQ(static_cast<int64_t>(item.needles.size()), n);
      EXPECT_LE(static_cast<int64_t>(item.prompt.size()), item.length);
      EXPECT_GT(static_cast<int64_t>(item.prompt.size()), item.length - 40);  // the largest filler that fits
      ASSERT_GE(item.asked, 0);
      ASSERT_LT(item.asked, n);
      std::set<std::string> names, values;
      for (const Needle& nd : item.needles) {
        names.insert(nd.name);
        values.insert(nd.value);
        ASSERT_EQ(nd.value.size(), 5u);
        EXPECT_TRUE(std::all_of(nd.value.begin(), nd.value.end(), [](char ch) { return ch >= '0' && ch <= '9'; }));
        EXPECT_NE(nd.value[0], '0');
        EXPECT_NE(std::find(kMultiNeedleNames.begin(), kMultiNeedleNames.end(), nd.name), kMultiNeedleNames.end());
      }
      EXPECT_EQ(static_cast<int64_t>(names.size()), n);
      EXPECT_EQ(static_cast<int64_t>(values.size()), n);
      // The text holds every needle, in the listed (prompt) order, each once, all before the
      // question, which names the asked needle; the asked needle sits at the requested depth.
      const std::string text = stories_tokenizer().decode(item.prompt, true);
      const size_t question = text.find(multi_needle_question(item.needles[item.asked].name));
      ASSERT_NE(question, std::string::npos) << text;
      size_t previous = 0;
      for (const Needle& nd : item.needles) {
        const std::string needle = multi_needle_text(nd.name, nd.value);
        const size_t at = text.find(needle);
        ASSERT_NE(at, std::string::npos) << needle;
        EXPECT_EQ(text.find(needle, at + 1), std::string::npos);
        EXPECT_GE(at, previous);
        EXPECT_LT(at, question);
        previous = at;
        EXPECT_EQ(nd.after, std::llround(nd.depth * static_cast<double>(item.filler_sentences)));
        EXPECT_GE(nd.depth, 0.0);
        EXPECT_LE(nd.depth, 1.0);
      }
      EXPECT_EQ(item.needles[item.asked].depth, item.depth);
      ASSERT_GE(item.filler_sentences, 2);
      // Spread: the non-asked depths fall in distinct strata of N equal parts of [0, 1].
      std::set<int64_t> strata;
      for (int64_t j = 0; j < n; ++j) {
        if (j != item.asked) strata.insert(static_cast<int64_t>(item.needles[j].depth * static_cast<double>(n)));
      }
      EXPECT_EQ(static_cast<int64_t>(strata.size()), n - 1);
    }
  }
}

TEST(MultiNeedleItems, RejectBadOptions) {
  EXPECT_THROW(make_multi_needle_items(stories_tokenizer(), {.lengths = {400}, .depths = {1.5}}), Error);
  EXPECT_THROW(make_multi_needle_items(stories_tokenizer(), {.lengths = {400}, .needles = 0}), Error);
  EXPECT_THROW(make_multi_needle_items(stories_tokenizer(), {.lengths = {400}, .needles = 17}), Error);
  EXPECT_THROW(make_multi_needle_items(stories_tokenizer(), {.lengths = {400}, .samples = 0}), Error);
  EXPECT_THROW(make_multi_needle_items(stories_tokenizer(), {.lengths = {40}, .needles = 4}), Error);  // too short
}

MultiNeedleItem hand_item() {
  MultiNeedleItem item{.length = 64, .depth = 0.5};
  item.needles = {{.name = "Alice", .value = "12345"}, {.name = "Bob", .value = "67890"}, {.name = "Carol", .value = "55555"}};
  item.asked = 1;
  return item;
}

TEST(MultiNeedleScoring, ContainsAskedValueAndConfusion) {
  const MultiNeedleItem item = hand_item();
  const auto ok = score_multi_needle(item, " 67890.");
  EXPECT_TRUE(ok.pass);
  EXPECT_FALSE(ok.confused);
  const auto also_other = score_multi_needle(item, " 12345 or 67890");  // contains the asked value: a pass
  EXPECT_TRUE(also_other.pass);
  EXPECT_FALSE(also_other.confused);
  const auto wrong = score_multi_needle(item, " 12345. The");
  EXPECT_FALSE(wrong.pass);
  EXPECT_TRUE(wrong.confused);
  const auto none = score_multi_needle(item, " 99999");
  EXPECT_FALSE(none.pass);
  EXPECT_FALSE(none.confused);
  EXPECT_FALSE(score_multi_needle(item, "6789").pass);  // a prefix is not the value
}

TEST(MultiNeedleSummary, CountsConfusionsAndPairs) {
  // 6 items in two cells; reference passes all; config passes items 0, 1 and is confused on 2, 3.
  std::vector<MultiNeedleItem> items(6, hand_item());
  for (int i = 0; i < 6; ++i) items[i].length = i < 3 ? 64 : 128;
  std::vector<MultiNeedleOutcome> ref, cfg;
  for (int i = 0; i < 6; ++i) ref.push_back(score_multi_needle(items[i], "67890"));
  const char* outputs[] = {"67890", " 67890", "12345", "55555", "none", ""};
  for (const char* o : outputs) cfg.push_back(score_multi_needle(items[0], o));
  const MultiNeedleSummary s = summarize_multi_needle(items, {"f32", "fp8"}, {ref, cfg});
  ASSERT_EQ(s.confusions.size(), 2u);
  EXPECT_EQ(s.confusions[0], 0);
  EXPECT_EQ(s.confusions[1], 2);
  const ConfigRetrievalSummary& c = s.retrieval.configs[1];
  EXPECT_EQ(s.retrieval.configs[0].passed, 6);
  EXPECT_EQ(c.passed, 2);
  ASSERT_TRUE(c.vs_reference.has_value());
  EXPECT_EQ(c.vs_reference->only_a, 4);
  EXPECT_EQ(c.vs_reference->only_b, 0);
  EXPECT_NEAR(c.mcnemar_p, 2.0 / 16.0, 1e-15);  // two-sided exact binomial, b = 4, c = 0: 2 * 0.5^4
  ASSERT_EQ(c.cells.size(), 2u);
  EXPECT_EQ(c.cells[0].passed, 2);
  EXPECT_EQ(c.cells[1].passed, 0);
  EXPECT_THROW(summarize_multi_needle(items, {"f32"}, {ref, cfg}), Error);
}

}  // namespace
}  // namespace nibble::eval
