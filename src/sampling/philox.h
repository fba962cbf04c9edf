#pragma once
// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11): a counter-based
// generator, the same on the host and the device. The on-device sampler (backend seam's sample())
// draws u = uniform53(philox(key = seed, counter = draw index)) for draw number `draw` of a request,
// so a request's stream depends only on (seed, draw) and never on batching or launch order.
#include <cstdint>

#if defined(__CUDACC__)
#define NIBBLE_HOST_DEVICE __host__ __device__
#else
#define NIBBLE_HOST_DEVICE
#endif

namespace nibble::sampling {

struct Philox4x32 {
  uint32_t v[4];
};

// Ten rounds of Philox4x32 on counter (c0..c3) with key (k0, k1).
NIBBLE_HOST_DEVICE inline Philox4x32 philox4x32_10(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, uint32_t k0,
                                                   uint32_t k1) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u, kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(kM0) * c0;
    const uint64_t p1 = static_cast<uint64_t>(kM1) * c2;
    const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    const uint32_t n0 = hi1 ^ c1 ^ k0, n1 = lo1, n2 = hi0 ^ c3 ^ k1, n3 = lo0;
    c0 = n0;
    c1 = n1;
    c2 = n2;
    c3 = n3;
    k0 += kW0;
    k1 += kW1;
  }
  return {{c0, c1, c2, c3}};
}

// A uniform double in [0, 1) with 53 random bits: the `draw`-th uniform of the stream keyed by `seed`.
NIBBLE_HOST_DEVICE inline double philox_uniform(uint64_t seed, uint64_t draw) {
  const Philox4x32 r = philox4x32_10(static_cast<uint32_t>(draw), static_cast<uint32_t>(draw >> 32), 0u, 0u,
                                     static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
  const uint64_t bits = (static_cast<uint64_t>(r.v[0]) << 32 | r.v[1]) >> 11;
  return static_cast<double>(bits) * (1.0 / 9007199254740992.0);  // 2^-53
}

}  // namespace nibble::sampling
