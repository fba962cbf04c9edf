// The tensor round trip behind `nibble kvq` (quant/roundtrip.h): bit-exact to the head-vector
// definitions without rotation, H·dq(q(H·x)) with it, error statistics against hand-worked values.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "common/error.h"
#include "quant/roundtrip.h"
#include "support/expect_error.h"
#include "unit/quant/oracle.h"

namespace nibble::quant {
namespace {

using test_support::expect_error;

std::vector<float> random_tensor(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.5f);
  std::vector<float> x(n);
  for (float& v : x) v = normal(rng);
  return x;
}

// x: [n, d] -> per-vector quantize/dequantize by the head-vector definitions, optionally rotated.
std::vector<float> reference(ElemFormat f, const std::vector<float>& x, int d, float g, bool rotate) {
  std::vector<float> out(x.size());
  std::vector<float> data_words(d);     // room for the largest format (f32), float-aligned
  std::vector<uint8_t> scales(d / 16);  // [d/16]
  for (size_t v = 0; v < x.size() / d; ++v) {
    std::vector<float> vec(x.begin() + v * d, x.begin() + (v + 1) * d);
    if (rotate) hadamard_inplace(vec.data(), d);
    auto* data = reinterpret_cast<uint8_t*>(data_words.data());
    quantize_head_vector(f, vec.data(), d, g, data, scales.data());
    dequantize_head_vector(f, data, scales.data(), d, g, out.data() + v * d);
    if (rotate) hadamard_inplace(out.data() + v * d, d);
  }
  return out;
}

TEST(Roundtrip, BitExactToTheHeadVectorDefinitions) {
  const std::vector<float> x = random_tensor(6 * 48, 1);  // [6, 48]
  for (ElemFormat f : {ElemFormat::kF32, ElemFormat::kBF16, ElemFormat::kFP8, ElemFormat::kNVFP4}) {
    for (float g : {1.0f, 0.03f}) {
      const std::vector<float> got = roundtrip_vectors(x, 48, {.format = f, .global_scale = g});
      const std::vector<float> want = reference(f, x, 48, uses_global_scale(f) ? g : 1.0f, false);
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_EQ(oracle::bits_of(got[i]), oracle::bits_of(want[i])) << elem_format_name(f) << " g " << g << " i " << i;
      }
    }
  }
}

TEST(Roundtrip, HadamardRotatesQuantizesAndRotatesBack) {
  const std::vector<float> x = random_tensor(4 * 64, 2);  // [4, 64]
  for (ElemFormat f : {ElemFormat::kF32, ElemFormat::kFP8, ElemFormat::kNVFP4}) {
    const std::vector<float> got =
        roundtrip_vectors(x, 64, {.format = f, .global_scale = 1.0f, .rotation = Rotation::kHadamard});
    const std::vector<float> want = reference(f, x, 64, 1.0f, true);
    for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], want[i]) << elem_format_name(f) << " i " << i;
  }
  // f32 with rotation is the identity up to float rounding of two transforms.
  const std::vector<float> f32 = roundtrip_vectors(x, 64, {.rotation = Rotation::kHadamard});
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(f32[i], x[i], 1e-5);
}

TEST(Roundtrip, ValidationErrorsNameTheProblem) {
  const std::vector<float> x(96, 1.0f);
  expect_error([&] { roundtrip_vectors(x, 24, {.format = ElemFormat::kFP8}); }, "multiple of 16");
  expect_error([&] { roundtrip_vectors(x, 24, {.format = ElemFormat::kF32}); }, "got 24");
  expect_error([&] { roundtrip_vectors(x, 48, {.format = ElemFormat::kBF16, .rotation = Rotation::kHadamard}); },
               "power of two, got 48");
  expect_error([&] { roundtrip_vectors(x, 64, {.format = ElemFormat::kFP8}); }, "do not split into vectors of 64");
  for (float g : {0.0f, -1.0f, std::numeric_limits<float>::infinity(), std::nanf("")}) {
    expect_error([&] { roundtrip_vectors(x, 16, {.format = ElemFormat::kNVFP4, .global_scale = g}); },
                 "global scale must be positive and finite");
  }
}

TEST(ErrorStats, HandWorkedValues) {
  const std::vector<float> x = {1.0f, 2.0f, 3.0f, 4.0f};
  const std::vector<float> x_hat = {1.0f, 2.0f, 3.0f, 5.0f};
  const ErrorStats s = error_stats(x, x_hat);
  EXPECT_EQ(s.elements, 4);
  EXPECT_EQ(s.nonfinite_inputs, 0);
  EXPECT_DOUBLE_EQ(s.rmse, 0.5);                          // sqrt(1/4)
  EXPECT_DOUBLE_EQ(s.max_abs_error, 1.0);
  EXPECT_DOUBLE_EQ(s.signal_power, 30.0);                 // 1 + 4 + 9 + 16
  EXPECT_DOUBLE_EQ(s.noise_power, 1.0);
  EXPECT_NEAR(s.sqnr_db, 14.771212547196624, 1e-12);      // 10·log10(30)
}

TEST(ErrorStats, ExactCopyHasInfiniteSqnrAndNonFiniteInputsAreCounted) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> x = {1.0f, std::nanf(""), -inf, 2.0f};
  const ErrorStats s = error_stats(x, x);
  EXPECT_EQ(s.elements, 2);
  EXPECT_EQ(s.nonfinite_inputs, 2);
  EXPECT_EQ(s.rmse, 0.0);
  EXPECT_EQ(s.sqnr_db, std::numeric_limits<double>::infinity());

  // A finite input that comes back NaN must show as a NaN error, not vanish.
  const std::vector<float> y = {1.0f, 2.0f, 3.0f};
  const std::vector<float> y_hat = {std::nanf(""), 2.0f, 3.5f};
  const ErrorStats bad = error_stats(y, y_hat);
  EXPECT_TRUE(std::isnan(bad.max_abs_error));
  EXPECT_TRUE(std::isnan(bad.rmse));
  expect_error([&] { error_stats(y, x); }, "3 reference elements but 4");
}

}  // namespace
}  // namespace nibble::quant
