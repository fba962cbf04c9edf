#pragma once
// Adversarial nvfp4 blocks for the "4 over 6" rule (quant::nvfp4_quantize_block_4over6): blocks whose
// two candidate errors err4 (t = amax/4) and err6 (t = amax/6) are equal or 1–2 ulps apart, where a
// write path that rounds the error sums differently (an FMA contraction, another summation order)
// would keep the other candidate. Host code; test_cuda_kv_write.cpp writes these blocks on the GPU.
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "quant/bits.h"
#include "quant/e2m1.h"
#include "quant/e4m3.h"
#include "quant/nvfp4.h"

namespace nibble::nvfp4_ties {

// The two candidates' block errors, by quant/nvfp4.h's definition of each (x: [16]).
struct Nvfp4CandidateErrors {
  float err6 = 0.0f, err4 = 0.0f;
  bool has_four = false;  // false: s4 is zero or NaN, the rule keeps amax/6 without comparing
};

inline Nvfp4CandidateErrors nvfp4_candidate_errors(const float* x, float g) {
  Nvfp4CandidateErrors e;
  uint8_t p6[quant::kNvfp4BlockBytes];
  const uint8_t s6 = quant::nvfp4_quantize_block(x, g, p6);
  e.err6 = quant::nvfp4_block_squared_error(x, p6, s6, g);
  float amax = 0.0f;
  for (int i = 0; i < quant::kNvfp4Block; ++i) amax = quant::amax_nan(amax, x[i]);
  const uint8_t s4 = quant::e4m3_from_f32((amax / 4.0f) / g);
  const float s = quant::f32_from_e4m3(s4);
  if (s == 0.0f || quant::is_nan(s)) return e;
  uint8_t codes[quant::kNvfp4Block], p4[quant::kNvfp4BlockBytes];
  for (int i = 0; i < quant::kNvfp4Block; ++i) codes[i] = quant::e2m1_from_f32(x[i] / (s * g));
  quant::nvfp4_pack_codes(codes, p4);
  e.err4 = quant::nvfp4_block_squared_error(x, p4, s4, g);
  e.has_four = true;
  return e;
}

// Distance of err4 from err6 in float steps (0 = exact tie); huge when either is not finite.
inline int64_t nvfp4_error_ulps(const Nvfp4CandidateErrors& e) {
  if (!e.has_four || !std::isfinite(e.err4) || !std::isfinite(e.err6)) return INT64_MAX;
  return std::llabs(static_cast<int64_t>(quant::f32_bits(e.err4)) - static_cast<int64_t>(quant::f32_bits(e.err6)));
}

// `count` blocks (appended to `out`, 16 floats each) with err4 and err6 at most 2 ulps apart. Each
// block: element 0 sets amax = 6·s·g (s a random E4M3 scale), elements 2..15 lie on both candidates'
// grids or are zero (little error of their own), one of them (or none) off-grid noise; element 1
// is moved across a point where err4 − err6 changes sign (bisection over float bit patterns), and
// the floats a few steps around that point are kept when their errors are within 2 ulps.
inline void append_near_tie_blocks(float g, int count, uint32_t seed, std::vector<float>& out) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  int made = 0;
  for (int attempt = 0; made < count && attempt < 20000; ++attempt) {
    float x[quant::kNvfp4Block];
    const float s = quant::f32_from_e4m3(static_cast<uint8_t>(0x20 + rng() % 0x50));  // ~2^-4 .. 2^6
    const float u = s * g;
    x[0] = (rng() % 2 ? -6.0f : 6.0f) * u;
    constexpr float kBoth[] = {0.0f, 1.5f, 3.0f, 6.0f};  // on the grid of s and of 1.5·s
    for (int i = 2; i < quant::kNvfp4Block; ++i) x[i] = (rng() % 2 ? -1.0f : 1.0f) * kBoth[rng() % 4] * u;
    if (rng() % 2) x[2 + rng() % 14] = (unit(rng) * 5.5f) * u;  // off-grid noise
    auto f = [&](float v) {
      x[1] = v;
      const Nvfp4CandidateErrors e = nvfp4_candidate_errors(x, g);
      return e.has_four ? static_cast<double>(e.err4) - static_cast<double>(e.err6) : 0.0;
    };
    // Sample element 1 over (0, 5.9·u) and bisect the first sign change found.
    const float hi_end = 5.9f * u;
    float lo = hi_end * (1 + rng() % 8) / 64.0f;
    const double f_lo = f(lo);
    bool found = false;
    float hi = lo;
    for (int k = 1; k <= 64 && !found; ++k) {
      hi = lo + (hi_end - lo) * k / 64.0f;
      const double f_hi = f(hi);
      if ((f_lo < 0) != (f_hi < 0)) found = true;
    }
    if (!found) continue;
    uint32_t a = quant::f32_bits(lo), b = quant::f32_bits(hi);  // positive floats: bits are ordered
    const bool lo_negative = f_lo < 0;
    while (b - a > 1) {
      const uint32_t m = a + (b - a) / 2;
      ((f(quant::f32_from_bits(m)) < 0) == lo_negative ? a : b) = m;
    }
    for (int step = -3; step <= 3 && made < count; ++step) {
      x[1] = quant::f32_from_bits(static_cast<uint32_t>(static_cast<int64_t>(b) + step));
      if (nvfp4_error_ulps(nvfp4_candidate_errors(x, g)) > 2) continue;
      out.insert(out.end(), x, x + quant::kNvfp4Block);
      ++made;
    }
  }
}

}  // namespace nibble::nvfp4_ties
