#pragma once
// The normalized Sylvester Hadamard transform along a head vector: H_n / sqrt(n), n a power of two.
// It is orthogonal and symmetric, so it is its own inverse. Rotating q and k leaves q·k unchanged;
// rotating v rotates the attention output, which the inverse (the same transform) undoes.
// Rotation spreads outliers across the vector before it is quantized (QuaRot / TurboQuant).
#include <cmath>
#include <cstdint>

#include "quant/hd.h"

namespace nibble::quant {

NIBBLE_HD bool is_power_of_two(int64_t n) { return n > 0 && (n & (n - 1)) == 0; }

// In place, x: [n], n a power of two (the caller checks; see kv_format.h validate_rotation).
// Fast Walsh–Hadamard butterflies in Sylvester order, then one multiply by 1/sqrt(n).
NIBBLE_HD void hadamard_inplace(float* x, int n) {
  for (int half = 1; half < n; half *= 2) {
    for (int i = 0; i < n; i += 2 * half) {
      for (int j = i; j < i + half; ++j) {
        const float a = x[j], b = x[j + half];
        x[j] = a + b;
        x[j + half] = a - b;
      }
    }
  }
  const float norm = 1.0f / sqrtf(static_cast<float>(n));
  for (int i = 0; i < n; ++i) x[i] *= norm;
}

}  // namespace nibble::quant
