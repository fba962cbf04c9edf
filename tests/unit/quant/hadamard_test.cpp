// The normalized Sylvester Hadamard transform (quant/hadamard.h) against the explicit matrix
// H[i][j] = (-1)^popcount(i & j) / sqrt(n), computed in double.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <random>
#include <vector>

#include "quant/hadamard.h"

namespace nibble::quant {
namespace {

std::vector<float> random_vector(int n, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(n);
  for (float& v : x) v = normal(rng);
  return x;
}

double norm(const std::vector<float>& x) {
  double s = 0;
  for (float v : x) s += static_cast<double>(v) * v;
  return std::sqrt(s);
}

double dot(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}

TEST(Hadamard, PowersOfTwo) {
  EXPECT_TRUE(is_power_of_two(1));
  EXPECT_TRUE(is_power_of_two(128));
  EXPECT_TRUE(is_power_of_two(int64_t{1} << 40));
  EXPECT_FALSE(is_power_of_two(0));
  EXPECT_FALSE(is_power_of_two(-64));
  EXPECT_FALSE(is_power_of_two(48));
  EXPECT_FALSE(is_power_of_two(96));
}

TEST(Hadamard, SmallCasesByHand) {
  float one[1] = {3.5f};
  hadamard_inplace(one, 1);
  EXPECT_EQ(one[0], 3.5f);
  float two[2] = {1.0f, 3.0f};  // [1 1; 1 -1]/sqrt2 · (1, 3) = (4, -2)/sqrt2
  hadamard_inplace(two, 2);
  EXPECT_NEAR(two[0], 4.0 / std::sqrt(2.0), 1e-6);
  EXPECT_NEAR(two[1], -2.0 / std::sqrt(2.0), 1e-6);
  float four[4] = {1.0f, 0.0f, 0.0f, 0.0f};  // first column of H4/2: all 0.5
  hadamard_inplace(four, 4);
  for (float v : four) EXPECT_EQ(v, 0.5f);
}

TEST(Hadamard, EqualsTheExplicitSylvesterMatrixProduct) {
  std::mt19937 rng(7);
  for (int n = 1; n <= 512; n *= 2) {
    const std::vector<float> x = random_vector(n, rng);
    std::vector<float> y = x;
    hadamard_inplace(y.data(), n);
    for (int i = 0; i < n; ++i) {
      double want = 0;
      for (int j = 0; j < n; ++j) {
        want += (std::popcount(static_cast<unsigned>(i & j)) % 2 ? -1.0 : 1.0) * x[j];
      }
      want /= std::sqrt(static_cast<double>(n));
      EXPECT_NEAR(y[i], want, 1e-6 * norm(x)) << "n = " << n << ", row " << i;
    }
  }
}

TEST(Hadamard, IsItsOwnInverse) {
  std::mt19937 rng(11);
  for (int n = 1; n <= 1024; n *= 2) {
    const std::vector<float> x = random_vector(n, rng);
    std::vector<float> y = x;
    hadamard_inplace(y.data(), n);
    hadamard_inplace(y.data(), n);
    for (int i = 0; i < n; ++i) EXPECT_NEAR(y[i], x[i], 2e-6 * norm(x)) << "n = " << n << ", element " << i;
  }
}

TEST(Hadamard, PreservesDotProductsAndNorms) {
  // q·k is unchanged when both are rotated: the reason rotating the KV cache leaves scores alone.
  std::mt19937 rng(13);
  for (int n = 16; n <= 256; n *= 2) {
    std::vector<float> q = random_vector(n, rng), k = random_vector(n, rng);
    const double before = dot(q, k), norm_q = norm(q), norm_k = norm(k);
    hadamard_inplace(q.data(), n);
    hadamard_inplace(k.data(), n);
    EXPECT_NEAR(dot(q, k), before, 1e-5 * norm_q * norm_k) << "n = " << n;
    EXPECT_NEAR(norm(q), norm_q, 1e-5 * norm_q) << "n = " << n;
  }
}

TEST(Hadamard, SpreadsAnOutlierEvenly) {
  // A single spike of height a becomes n entries of magnitude a/sqrt(n).
  std::vector<float> x(128, 0.0f);
  x[37] = 64.0f;
  hadamard_inplace(x.data(), 128);
  for (float v : x) EXPECT_NEAR(std::fabs(v), 64.0 / std::sqrt(128.0), 1e-5);
}

}  // namespace
}  // namespace nibble::quant
