#include "quant/roundtrip.h"

#include <cmath>
#include <limits>

#include "common/error.h"

namespace nibble::quant {

void validate_roundtrip(const RoundtripOptions& options, int64_t vector_dim) {
  NIBBLE_CHECK(vector_dim > 0 && vector_dim % kNvfp4Block == 0,
               "the last dimension must be a positive multiple of {} (one nvfp4 block), got {}", kNvfp4Block,
               vector_dim);
  NIBBLE_CHECK(vector_dim <= std::numeric_limits<int>::max(), "the last dimension {} is too large", vector_dim);
  NIBBLE_CHECK(options.rotation != Rotation::kHadamard || is_power_of_two(vector_dim),
               "the Hadamard rotation needs the last dimension to be a power of two, got {}", vector_dim);
  NIBBLE_CHECK(std::isfinite(options.global_scale) && options.global_scale > 0.0f,
               "the global scale must be positive and finite, got {}", options.global_scale);
  validate_head_dim(options.format, options.rotation, vector_dim);
}

std::vector<float> roundtrip_vectors(std::span<const float> x, int64_t vector_dim, const RoundtripOptions& options) {
  validate_roundtrip(options, vector_dim);
  NIBBLE_CHECK(x.size() % static_cast<size_t>(vector_dim) == 0,
               "{} elements do not split into vectors of {}", x.size(), vector_dim);
  const int dim = static_cast<int>(vector_dim);
  const size_t n_vectors = x.size() / static_cast<size_t>(dim);

  std::vector<float> x_hat(x.size());
  std::vector<float> vec(dim);                                        // [dim] one (rotated) vector
  std::vector<float> data_words((data_bytes(options.format, dim) + 3) / 4);  // [data_bytes] codes, float-aligned
  std::vector<uint8_t> scales(scale_bytes(options.format, dim));      // [dim / 16] nvfp4 block scales
  auto* data = reinterpret_cast<uint8_t*>(data_words.data());
  for (size_t v = 0; v < n_vectors; ++v) {
    const float* in = x.data() + v * dim;
    float* out = x_hat.data() + v * dim;
    const float* source = in;
    if (options.rotation == Rotation::kHadamard) {
      vec.assign(in, in + dim);
      hadamard_inplace(vec.data(), dim);
      source = vec.data();
    }
    quantize_head_vector(options.format, source, dim, options.global_scale, data, scales.data());
    dequantize_head_vector(options.format, data, scales.data(), dim, options.global_scale, out);
    if (options.rotation == Rotation::kHadamard) hadamard_inplace(out, dim);
  }
  return x_hat;
}

ErrorStats error_stats(std::span<const float> x, std::span<const float> x_hat) {
  NIBBLE_CHECK(x.size() == x_hat.size(), "error_stats: {} reference elements but {} approximations", x.size(),
               x_hat.size());
  ErrorStats stats;
  for (size_t i = 0; i < x.size(); ++i) {
    if (!std::isfinite(x[i])) {
      ++stats.nonfinite_inputs;
      continue;
    }
    const double ref = x[i];
    const double err = ref - static_cast<double>(x_hat[i]);  // NaN or Inf when x̂ is
    ++stats.elements;
    stats.signal_power += ref * ref;
    stats.noise_power += err * err;
    const double abs_err = std::fabs(err);
    // A NaN error (x̂ NaN for a finite x) must show, so it sticks once seen.
    if (!std::isnan(stats.max_abs_error) && !(abs_err <= stats.max_abs_error)) stats.max_abs_error = abs_err;
  }
  if (stats.elements > 0) stats.rmse = std::sqrt(stats.noise_power / static_cast<double>(stats.elements));
  if (stats.noise_power == 0.0) {
    stats.sqnr_db = std::numeric_limits<double>::infinity();
  } else {
    stats.sqnr_db = 10.0 * std::log10(stats.signal_power / stats.noise_power);
  }
  return stats;
}

}  // namespace nibble::quant
