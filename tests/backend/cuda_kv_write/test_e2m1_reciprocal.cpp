// The division-free E2M1 rule of the CUDA write path (quant/e2m1_reciprocal.h) against the
// definition, e2m1_from_f32(x / d) with a correctly rounded division, on the host (the same
// NIBBLE_HD code the kernel runs): every positive E4M3 block scale s times several global scales g,
// x at and around every E2M1 decision point (±many ulps, exact ties, bf16 neighbours, both signs),
// random x, and the special values. Runs without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <random>
#include <vector>

#include "quant/bf16.h"
#include "quant/e2m1.h"
#include "quant/e2m1_reciprocal.h"
#include "quant/e4m3.h"

namespace nibble::quant {
namespace {

constexpr float kThresholds[] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};

float step_ulps(float x, int k) { return f32_from_bits(static_cast<uint32_t>(static_cast<int64_t>(f32_bits(x)) + k)); }

bool is_power_of_two(float g) { return (f32_bits(g) & 0x807FFFFFu) == 0 && g > 0.0f; }

TEST(E2m1Reciprocal, MagnitudeCodeMatchesTheDefinition) {
  std::vector<uint32_t> patterns;
  // Every float within ±2^16 ulps of each threshold, grid value and region edge.
  for (float c : {0.0f, 0.25f, 0.5f, 0.75f, 1.0f, 1.25f, 1.5f, 1.75f, 2.0f, 2.5f, 3.0f, 3.5f, 4.0f, 5.0f, 6.0f, 7.0f}) {
    const int64_t center = f32_bits(c);
    for (int64_t k = -(1 << 16); k <= (1 << 16); ++k)
      if (center + k >= 0) patterns.push_back(static_cast<uint32_t>(center + k));
  }
  // A stride through every non-negative finite float, and +Inf.
  for (uint32_t u = 0; u < 0x7F800000u; u += 1021) patterns.push_back(u);
  patterns.push_back(0x7F800000u);
  for (uint32_t u : patterns) {
    const float q = f32_from_bits(u);
    ASSERT_EQ(e2m1_magnitude_code(q), e2m1_from_f32(q) & 0x7u) << "q = " << q << " (bits " << u << ")";
  }
  // NaN (either sign, as x86 and the GPU produce them from Inf − Inf) codes as 7.
  for (uint32_t nan : {0x7FC00000u, 0xFFC00000u, 0x7FFFFFFFu}) EXPECT_EQ(e2m1_magnitude_code(f32_from_bits(nan)), 7u);
}

TEST(E2m1Reciprocal, NearDecisionPointFlagsEveryQuotientWithinEightStepsOfAThreshold) {
  for (float t : kThresholds) {
    for (int k = -8; k <= 8; ++k) EXPECT_TRUE(e2m1_near_decision_point(step_ulps(t, k))) << t << " + " << k << " ulps";
    EXPECT_FALSE(e2m1_near_decision_point(step_ulps(t, 9))) << t << " + 9 ulps";
    EXPECT_FALSE(e2m1_near_decision_point(step_ulps(t, -9))) << t << " - 9 ulps";
  }
  // Values away from every pattern with zero low mantissa bits are not flagged.
  for (float q : {0.4f, 1.1f, 2.2f, 4.5f, 5.5f, 1e-30f, 1e30f})
    EXPECT_FALSE(e2m1_near_decision_point(q)) << q;
  // Grid values, zero and +Inf are (conservatively): the exact decision is right for them too
  // (the sweep below checks it wherever the check fires).
  for (float q : {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f, std::numeric_limits<float>::infinity()})
    EXPECT_TRUE(e2m1_near_decision_point(q)) << q;
}

// Counts of the sweep below, so the test can say what it exercised.
struct SweepCounts {
  int64_t checked_elements = 0;
  int64_t naive_reciprocal_wrong = 0;  // e2m1(RN(x·RN(1/d))) != reference: the cases a plain reciprocal misses
  int64_t proven_divisors = 0, checked_divisors = 0, divide_divisors = 0;
  int64_t near_decisions = 0;  // elements whose quotient was flagged near a decision point
};

// One x against the definition, with the rule's internal claims checked too: in kProven mode the
// quotient's code needs no check, in kChecked mode a wrong quotient code is always flagged as near.
void expect_rule_matches(float x, const E2m1Divisor& v, SweepCounts& counts) {
  const uint8_t expected = e2m1_from_f32(x / v.d);
  ASSERT_EQ(e2m1_code_by_reciprocal(x, v), expected) << "x = " << x << " d = " << v.d << " (bits " << f32_bits(x)
                                                     << " / " << f32_bits(v.d) << ")";
  if (v.mode != E2m1DivisorMode::kDivide) {
    const float q = e2m1_quotient(x, v);
    const uint8_t unchecked = static_cast<uint8_t>(((f32_bits(x) >> 28) & 0x8u) | e2m1_magnitude_code(q));
    if (v.mode == E2m1DivisorMode::kProven) {
      ASSERT_EQ(unchecked, expected) << "proven divisor d = " << v.d << " fails at x = " << x;
    } else if (unchecked != expected) {
      ASSERT_TRUE(e2m1_near_decision_point(q)) << "unflagged wrong quotient: x = " << x << " d = " << v.d;
    }
    // The exact near-point decision is right wherever the check would call it (any mode in range).
    if (e2m1_near_decision_point(q)) {
      const uint8_t near = static_cast<uint8_t>(((f32_bits(x) >> 28) & 0x8u) | e2m1_magnitude_code_near(x, q, v.d));
      ASSERT_EQ(near, expected) << "near-point decision: x = " << x << " d = " << v.d << " q = " << q;
      ++counts.near_decisions;
    }
    if (e2m1_from_f32(x * v.r_hi) != expected) ++counts.naive_reciprocal_wrong;
  }
  ++counts.checked_elements;
}

TEST(E2m1Reciprocal, EveryE4M3ScaleAtEveryDecisionPointMatchesTheDivision) {
  // Powers of two (kProven: the default g = 1, calibrated shifts), arbitrary g (kChecked), and g
  // that push s·g outside [2^-60, 2^60] for some or all scales (kDivide).
  const float globals[] = {1.0f, 0.5f, 0x1p-7f, 0x1p9f, 0.37f, 1.7f, 0.1f, 3.3e-3f, 0.375f, 0x1p-58f, 0x1p57f};
  SweepCounts counts;
  for (float g : globals) {
    for (uint32_t code = 0x01; code <= 0x7E; ++code) {
      const float s = f32_from_e4m3(static_cast<uint8_t>(code));
      const float d = s * g;  // as nvfp4_quantize_block computes the divisor
      const E2m1Divisor v = e2m1_divisor(d);
      const bool in_range = d >= kE2m1ReciprocalMinDivisor && d <= kE2m1ReciprocalMaxDivisor;
      if (is_power_of_two(g) && in_range) {
        ASSERT_EQ(v.mode, E2m1DivisorMode::kProven) << "s = " << s << " g = " << g;
      }
      if (!in_range) {
        ASSERT_EQ(v.mode, E2m1DivisorMode::kDivide) << "d = " << d;
      }
      counts.proven_divisors += v.mode == E2m1DivisorMode::kProven;
      counts.checked_divisors += v.mode == E2m1DivisorMode::kChecked;
      counts.divide_divisors += v.mode == E2m1DivisorMode::kDivide;
      for (float t : kThresholds) {
        const float center = t * d;  // the exact tie T·d when representable, else its rounding
        for (int k = -48; k <= 48; ++k) {
          const float x = step_ulps(center, k);
          expect_rule_matches(x, v, counts);
          expect_rule_matches(-x, v, counts);
          if (testing::Test::HasFatalFailure()) return;
        }
        // bf16 activations: the bf16 neighbours of T·d (exact ties are common there).
        const uint16_t b = bf16_from_f32(center);
        for (int k = -4; k <= 4; ++k) {
          expect_rule_matches(f32_from_bf16(static_cast<uint16_t>(b + k)), v, counts);
          if (testing::Test::HasFatalFailure()) return;
        }
      }
      // Block maxima (amax = 6·s·g and its neighbours) and the special values.
      for (int k = -8; k <= 8; ++k) expect_rule_matches(step_ulps(6.0f * d, k), v, counts);
      for (float x : {0.0f, -0.0f, std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                      std::numeric_limits<float>::max(), -std::numeric_limits<float>::max(),
                      std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::min()})
        expect_rule_matches(x, v, counts);
      if (testing::Test::HasFatalFailure()) return;
    }
  }
  // The sweep must have exercised all three modes and cases where a plain reciprocal is wrong.
  EXPECT_GT(counts.proven_divisors, 0);
  EXPECT_GT(counts.checked_divisors, 0);
  EXPECT_GT(counts.divide_divisors, 0);
  EXPECT_GT(counts.naive_reciprocal_wrong, 0);
  EXPECT_GT(counts.near_decisions, 0);
  std::printf("measured: %lld elements, %lld where x·RN(1/d) alone gives a different code, %lld near-point "
              "decisions; divisors %lld proven, %lld checked, %lld divide\n",
              static_cast<long long>(counts.checked_elements), static_cast<long long>(counts.naive_reciprocal_wrong),
              static_cast<long long>(counts.near_decisions),
              static_cast<long long>(counts.proven_divisors), static_cast<long long>(counts.checked_divisors),
              static_cast<long long>(counts.divide_divisors));
}

TEST(E2m1Reciprocal, RandomBlocksMatchTheDivision) {
  // Whole nvfp4-like blocks: the scale from amax as the definition derives it, every element coded.
  std::mt19937 rng(20261130);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-20, 20);
  SweepCounts counts;
  for (int block = 0; block < 40000; ++block) {
    const float magnitude = std::ldexp(1.0f, exponent(rng));
    const float g = block % 3 == 0 ? 1.0f : (block % 3 == 1 ? 0.37f : 0x1p-4f);
    float x[16];
    float amax = 0.0f;
    for (float& e : x) {
      e = normal(rng) * magnitude;
      amax = std::max(amax, std::fabs(e));
    }
    const float s = f32_from_e4m3(e4m3_from_f32(amax / 6.0f / g));
    if (s == 0.0f) continue;
    const E2m1Divisor v = e2m1_divisor(s * g);
    for (float e : x) expect_rule_matches(e, v, counts);
    if (testing::Test::HasFatalFailure()) return;
  }
  EXPECT_GT(counts.checked_elements, 400000);
}

}  // namespace
}  // namespace nibble::quant
