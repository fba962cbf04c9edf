#pragma once
// Sequence lengths of a serving batch's mix of contexts, for the benchmarks' --mixed SEED: each of
// `batch` lengths drawn log-uniformly from [ctx / 16, ctx] by splitmix64 seeded with the seed and
// the shape, so every format, plan and program of a run sees the same lengths for a shape. Seed 0:
// every sequence ctx long.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace nibble::bench {

inline std::vector<int32_t> mixed_lengths(int64_t ctx, int64_t batch, uint64_t seed) {
  std::vector<int32_t> lens(static_cast<size_t>(batch), static_cast<int32_t>(ctx));
  if (seed == 0) return lens;
  uint64_t state = seed ^ (static_cast<uint64_t>(ctx) << 20) ^ static_cast<uint64_t>(batch);
  auto next = [&state] {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  };
  const double lo = std::log(std::max<double>(1.0, static_cast<double>(ctx) / 16.0));
  const double hi = std::log(static_cast<double>(ctx));
  for (int32_t& len : lens) {
    const double u = static_cast<double>(next() >> 11) * 0x1.0p-53;  // [0, 1)
    len = std::clamp<int32_t>(static_cast<int32_t>(std::exp(lo + u * (hi - lo))), 1, static_cast<int32_t>(ctx));
  }
  return lens;
}

}  // namespace nibble::bench
