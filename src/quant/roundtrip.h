#pragma once
// What a KV number format does to a tensor: quantize every head vector (the last dimension),
// dequantize it again, and measure the error. `nibble kvq roundtrip` is a thin shell over this.
#include <cstdint>
#include <span>
#include <vector>

#include "quant/kv_format.h"

namespace nibble::quant {

struct RoundtripOptions {
  ElemFormat format = ElemFormat::kF32;
  float global_scale = 1.0f;  // g of fp8 / nvfp4: positive and finite (checked for every format)
  Rotation rotation = Rotation::kNone;
};

// Checks that vectors of vector_dim elements suit the options: vector_dim a positive multiple of
// 16 (whatever the format, so every format sees the same tensors), a power of two with the
// Hadamard rotation, and the global scale positive and finite. Throws nibble::Error naming the problem.
void validate_roundtrip(const RoundtripOptions& options, int64_t vector_dim);

// x: [n_vectors, vector_dim] float32, C order (x.size() a multiple of vector_dim) ->
// x̂: [n_vectors, vector_dim]. Each vector independently:
//   no rotation:  x̂ = dequantize(quantize(x))   bit-exact to quantize_head_vector / dequantize_head_vector
//   hadamard:     x̂ = H(dequantize(quantize(H(x))))   H the normalized Sylvester transform (its own inverse)
std::vector<float> roundtrip_vectors(std::span<const float> x, int64_t vector_dim, const RoundtripOptions& options);

// Error of an approximation x̂ of x (same length). Elements whose x is NaN or ±Inf carry no finite
// error and are left out (counted in nonfinite_inputs); all sums are in double.
struct ErrorStats {
  int64_t elements = 0;          // elements measured (finite x)
  int64_t nonfinite_inputs = 0;  // elements left out
  double rmse = 0.0;             // sqrt(mean((x - x̂)^2))
  double max_abs_error = 0.0;    // max |x - x̂|
  double signal_power = 0.0;     // sum x^2
  double noise_power = 0.0;      // sum (x - x̂)^2
  double sqnr_db = 0.0;          // 10·log10(signal_power / noise_power); +inf when noise_power == 0
};

ErrorStats error_stats(std::span<const float> x, std::span<const float> x_hat);

}  // namespace nibble::quant
