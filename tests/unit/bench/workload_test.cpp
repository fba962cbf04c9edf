// Workloads: the same seed gives the same prompts, every sampled length lies in its range (and the
// range's ends occur), shared-prefix groups share exactly their prefix, agent turns extend the
// previous turn's prompt.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>

#include "bench/workload.h"
#include "common/error.h"

namespace nibble::bench {
namespace {

std::vector<int32_t> flat(const Turn& t) {
  std::vector<int32_t> ids;
  for (const Segment& s : t.segments) ids.insert(ids.end(), s.units.begin(), s.units.end());
  return ids;
}

TEST(LengthRange, Parses) {
  EXPECT_EQ(parse_length_range("17", "--x").min, 17);
  EXPECT_EQ(parse_length_range("17", "--x").max, 17);
  EXPECT_EQ(parse_length_range("3:9", "--x").min, 3);
  EXPECT_EQ(parse_length_range("3:9", "--x").max, 9);
  EXPECT_THROW(parse_length_range("9:3", "--x"), Error);
  EXPECT_THROW(parse_length_range("a", "--x"), Error);
  EXPECT_THROW(parse_length_range("-1:3", "--x"), Error);
  EXPECT_THROW(parse_length_range("3:", "--x"), Error);
}

TEST(SampleUniform, CoversTheInclusiveRangeEvenly) {
  std::mt19937_64 rng(1);
  std::map<int64_t, int> counts;
  constexpr int kDraws = 70000;
  for (int i = 0; i < kDraws; ++i) ++counts[sample_uniform(rng, -3, 3)];
  ASSERT_EQ(counts.size(), 7u);
  EXPECT_EQ(counts.begin()->first, -3);
  EXPECT_EQ(counts.rbegin()->first, 3);
  // Chi-square with 6 degrees of freedom: 22.46 is the 0.999 quantile.
  double chi2 = 0;
  for (const auto& [v, n] : counts) chi2 += (n - kDraws / 7.0) * (n - kDraws / 7.0) / (kDraws / 7.0);
  EXPECT_LT(chi2, 22.46);
  EXPECT_EQ(sample_uniform(rng, 5, 5), 5);
  EXPECT_THROW(sample_uniform(rng, 2, 1), Error);
}

TEST(SampleUniform, IsTheDocumentedRejectionSampler) {
  // Independent restatement of the documented algorithm: span = 10, accept draws below
  // 2^64 - (2^64 mod 10), value = lo + draw mod 10.
  std::mt19937_64 a(42), b(42);
  const uint64_t limit = UINT64_MAX - UINT64_MAX % 10;
  for (int i = 0; i < 1000; ++i) {
    uint64_t d = b();
    while (d >= limit) d = b();
    EXPECT_EQ(sample_uniform(a, 100, 109), 100 + static_cast<int64_t>(d % 10));
  }
}

TEST(Workload, RandomIsDeterministicPerSeedAndWithinRanges) {
  const WorkloadSpec spec{.input_len = {5, 9}, .output_len = {2, 4}, .num_requests = 400, .seed = 3, .token_ids = {10, 20}};
  const auto a = generate_workload(spec), b = generate_workload(spec);
  WorkloadSpec other = spec;
  other.seed = 4;
  const auto c = generate_workload(other);
  ASSERT_EQ(a.size(), 400u);
  std::set<int64_t> in_lens, out_lens;
  std::set<int32_t> ids;
  bool any_difference = false;
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].turns.size(), 1u);
    EXPECT_EQ(flat(a[i].turns[0]), flat(b[i].turns[0]));
    EXPECT_EQ(a[i].turns[0].max_tokens, b[i].turns[0].max_tokens);
    any_difference |= flat(a[i].turns[0]) != flat(c[i].turns[0]);
    in_lens.insert(a[i].turns[0].prompt_units());
    EXPECT_EQ(a[i].turns[0].reusable_units, 0);  // nothing of a random prompt was sent before
    out_lens.insert(a[i].turns[0].max_tokens);
    for (int32_t id : flat(a[i].turns[0])) ids.insert(id);
  }
  EXPECT_TRUE(any_difference);
  EXPECT_EQ(in_lens, (std::set<int64_t>{5, 6, 7, 8, 9}));
  EXPECT_EQ(out_lens, (std::set<int64_t>{2, 3, 4}));
  EXPECT_EQ(*ids.begin(), 10);
  EXPECT_EQ(*ids.rbegin(), 20);
  EXPECT_EQ(ids.size(), 11u);
}

TEST(Workload, SweepPointsHaveTheirOwnSeeds) {
  for (uint64_t seed : {uint64_t{0}, uint64_t{7}, ~uint64_t{0}, kWarmupSeedMix}) {
    EXPECT_EQ(sweep_point_seed(seed, 0), seed);
    std::set<uint64_t> seen{seed, seed ^ kWarmupSeedMix};
    for (size_t point = 1; point <= 100'000; ++point) {
      ASSERT_TRUE(seen.insert(sweep_point_seed(seed, point)).second) << "seed " << seed << " point " << point;
    }
  }
  // Other seeds, other prompts: the first point's and the second's random prompts differ.
  WorkloadSpec spec{.kind = WorkloadKind::kRandom, .input_len = {32, 32}, .num_requests = 2, .seed = 3};
  const std::vector<Session> first = generate_workload(spec);
  spec.seed = sweep_point_seed(3, 1);
  const std::vector<Session> second = generate_workload(spec);
  EXPECT_NE(first[0].turns[0].segments.at(0).units, second[0].turns[0].segments.at(0).units);
}

TEST(Workload, SharedPrefixGroupsShareExactlyTheirPrefix) {
  const WorkloadSpec spec{.kind = WorkloadKind::kSharedPrefix, .input_len = {4, 4}, .output_len = {1, 1},
                          .prefix_len = 32, .num_groups = 3, .num_requests = 9, .seed = 5, .token_ids = {0, 1000000}};
  const auto s = generate_workload(spec);
  ASSERT_EQ(s.size(), 9u);
  for (size_t i = 0; i < 9; ++i) {
    const auto p = flat(s[i].turns[0]);
    ASSERT_EQ(p.size(), 36u);
    for (size_t j = 0; j < i; ++j) {
      const auto q = flat(s[j].turns[0]);
      const bool same_group = i % 3 == j % 3;
      EXPECT_EQ(std::equal(p.begin(), p.begin() + 32, q.begin()), same_group) << i << " " << j;
      EXPECT_EQ(s[i].turns[0].reusable_units, i < 3 ? 0 : 32) << i;  // the group's first has none
      EXPECT_NE(std::vector<int32_t>(p.begin() + 32, p.end()), std::vector<int32_t>(q.begin() + 32, q.end()));
    }
  }
  EXPECT_THROW(generate_workload({.kind = WorkloadKind::kSharedPrefix, .prefix_len = 0}), Error);
}

TEST(Workload, AgentTurnsExtendThePreviousPrompt) {
  const WorkloadSpec spec{.kind = WorkloadKind::kAgent, .input_len = {3, 6}, .output_len = {2, 5}, .turns = 4,
                          .num_requests = 10, .seed = 9};
  const auto s = generate_workload(spec);
  ASSERT_EQ(s.size(), 3u);  // 4 + 4 + 2 turns
  EXPECT_EQ(s[0].turns.size(), 4u);
  EXPECT_EQ(s[2].turns.size(), 2u);
  for (const Session& session : s) {
    for (size_t t = 0; t < session.turns.size(); ++t) {
      const Turn& turn = session.turns[t];
      ASSERT_EQ(turn.segments.size(), 2 * t + 1);
      EXPECT_EQ(turn.segments.back().role, Role::kUser);
      EXPECT_GE(turn.segments.back().units.size(), 3u);
      EXPECT_LE(turn.segments.back().units.size(), 6u);
      if (t == 0) {
        EXPECT_EQ(turn.reusable_units, 0);
        continue;
      }
      const Turn& prev = session.turns[t - 1];
      EXPECT_EQ(turn.reusable_units, prev.prompt_units());  // not the synthetic reply after it
      const auto p = flat(prev), q = flat(turn);
      EXPECT_TRUE(std::equal(p.begin(), p.end(), q.begin()));
      // The synthetic reply in between has the previous turn's requested output length.
      EXPECT_EQ(turn.segments[2 * t - 1].role, Role::kAssistant);
      EXPECT_EQ(static_cast<int64_t>(turn.segments[2 * t - 1].units.size()), prev.max_tokens);
    }
  }
}

TEST(Workload, RejectsBadSpecs) {
  EXPECT_THROW(generate_workload({.input_len = {0, 3}}), Error);
  EXPECT_THROW(generate_workload({.num_requests = 0}), Error);
  EXPECT_THROW(generate_workload({.kind = WorkloadKind::kAgent, .turns = 0}), Error);
  EXPECT_THROW(parse_workload_kind("chatty"), Error);
}

TEST(Workload, WordsMapUnitsToAFixedList) {
  EXPECT_EQ(units_to_words({0, 1, 64}), "time year time");
}

}  // namespace
}  // namespace nibble::bench
