#pragma once
// Helpers for testing the CUDA backend against the CPU backend through the ops seam: both backends
// made by the factory, random host data, device copies of host tensors, and error measures.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cpu/cpu_backend.h"

namespace nibble::backend::test {

// Uniform random floats in [-scale, scale].
inline std::vector<float> random_floats(int64_t n, std::mt19937& rng, float scale = 1.0f) {
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(rng);
  return v;
}

// A float32 tensor [rows, cols] in a backend's memory, filled from the host.
struct OwnedTensor {
  std::unique_ptr<Buffer> buffer;
  Tensor view;
};

inline OwnedTensor upload(Backend& be, const std::vector<float>& host, int64_t rows, int64_t cols) {
  EXPECT_EQ(static_cast<int64_t>(host.size()), rows * cols);
  OwnedTensor t;
  t.buffer = be.allocate(std::max<int64_t>(1, rows * cols) * static_cast<int64_t>(sizeof(float)));
  be.copy_from_host(t.buffer->data(), host.data(), rows * cols * static_cast<int64_t>(sizeof(float)));
  t.view = {t.buffer->floats(), rows, cols};
  return t;
}

inline std::vector<float> download(Backend& be, Tensor t) {
  std::vector<float> host(static_cast<size_t>(t.numel()));
  be.copy_to_host(host.data(), t.data, t.numel() * static_cast<int64_t>(sizeof(float)));
  return host;
}

// max_i |a_i - b_i| / (max_i |b_i| + floor): the error relative to the reference's scale.
inline double relative_max_error(const std::vector<float>& got, const std::vector<float>& want, double floor = 1e-6) {
  EXPECT_EQ(got.size(), want.size());
  double err = 0.0, scale = floor;
  for (size_t i = 0; i < want.size() && i < got.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    err = std::max(err, std::fabs(static_cast<double>(got[i]) - want[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(want[i])));
  }
  return err / scale;
}

inline double max_abs_error(const std::vector<float>& got, const std::vector<float>& want) {
  EXPECT_EQ(got.size(), want.size());
  double err = 0.0;
  for (size_t i = 0; i < want.size() && i < got.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    err = std::max(err, std::fabs(static_cast<double>(got[i]) - want[i]));
  }
  return err;
}

}  // namespace nibble::backend::test
