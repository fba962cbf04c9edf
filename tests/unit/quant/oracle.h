#pragma once
// Independent oracles for the KV number formats, written from the format definitions (OCP FP8/FP4,
// IEEE round-to-nearest-even, DESIGN.md's nvfp4 recipe) and NOT from src/quant: decoding by the
// textbook formula in double, encoding by brute force over every decoded value of the table.
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>

namespace nibble::quant::oracle {

inline uint32_t bits_of(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}

inline float float_of(uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

// OCP E4M3FN: value = (-1)^s · 2^(e-7) · (1 + m/8) for e > 0, (-1)^s · 2^-6 · (m/8) for e = 0;
// S.1111.111 is NaN; there are no infinities.
inline double e4m3_value(int code) {
  const int s = (code >> 7) & 1, e = (code >> 3) & 0xF, m = code & 7;
  if (e == 0xF && m == 7) return std::numeric_limits<double>::quiet_NaN();
  const double magnitude = e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1.0 + m / 8.0, e - 7);
  return s ? -magnitude : magnitude;
}

// E2M1: value = (-1)^s · 2^(e-1) · (1 + m/2) for e > 0, (-1)^s · m/2 for e = 0 (bias 1).
inline double e2m1_value(int code) {
  const int s = (code >> 3) & 1, e = (code >> 1) & 3, m = code & 1;
  const double magnitude = e == 0 ? m / 2.0 : std::ldexp(1.0 + m / 2.0, e - 1);
  return s ? -magnitude : magnitude;
}

// Nearest magnitude code in [0, N) of an ascending table of decoded values, ties to the even
// code; a magnitude beyond the last entry is nearest to it (saturation / clamping), +Inf included.
template <size_t N>
int nearest_code(double magnitude, const std::array<double, N>& table) {
  if (magnitude >= table[N - 1]) return static_cast<int>(N - 1);
  int best = 0;
  double best_distance = std::fabs(magnitude - table[0]);
  for (size_t c = 1; c < N; ++c) {
    const double distance = std::fabs(magnitude - table[c]);
    if (distance < best_distance || (distance == best_distance && c % 2 == 0)) {
      best = static_cast<int>(c);
      best_distance = distance;
    }
  }
  return best;
}

// The non-negative finite values by code, from the formulas above: E4M3 0x00..0x7E, E2M1 0..7.
inline const std::array<double, 0x7F>& e4m3_table() {
  static const std::array<double, 0x7F> table = [] {
    std::array<double, 0x7F> t{};
    for (int c = 0; c < 0x7F; ++c) t[c] = e4m3_value(c);
    return t;
  }();
  return table;
}

inline const std::array<double, 8>& e2m1_table() {
  static const std::array<double, 8> table = [] {
    std::array<double, 8> t{};
    for (int c = 0; c < 8; ++c) t[c] = e2m1_value(c);
    return t;
  }();
  return table;
}

// Saturating, round-to-nearest-even float -> E4M3FN; NaN -> S.1111.111; the sign follows x (-0 too).
inline uint8_t e4m3_encode(float x) {
  const int sign = (bits_of(x) >> 31) ? 0x80 : 0;
  if (std::isnan(x)) return static_cast<uint8_t>(sign | 0x7F);
  return static_cast<uint8_t>(sign | nearest_code(std::fabs(static_cast<double>(x)), e4m3_table()));
}

// Round-to-nearest-even float -> E2M1, clamped to ±6; the sign follows x.
inline uint8_t e2m1_encode(float x) {
  const int sign = (bits_of(x) >> 31) ? 0x8 : 0;
  return static_cast<uint8_t>(sign | nearest_code(std::fabs(static_cast<double>(x)), e2m1_table()));
}

// IEEE round-to-nearest-even float32 -> bf16 for a non-NaN x: pick the nearer of the two bf16
// values that bracket |x| (truncation and the next one up), ties to the one with an even last bit.
// Past the largest bf16 the next value up is +Inf, which IEEE rounding treats as 2^128.
inline uint16_t bf16_encode(float x) {
  const uint32_t u = bits_of(x);
  const uint32_t sign = u & 0x80000000u, magnitude_bits = u & 0x7FFFFFFFu;
  const uint32_t below = magnitude_bits & 0xFFFF0000u, above = below + 0x10000u;
  const double a = std::fabs(static_cast<double>(x));
  const double below_value = float_of(below);
  const double above_value = above >= 0x7F800000u ? std::ldexp(1.0, 128) : float_of(above);
  if (magnitude_bits == below) return static_cast<uint16_t>((sign | below) >> 16);  // exact (±Inf too)
  const double d_below = a - below_value, d_above = above_value - a;
  const bool up = d_above < d_below || (d_above == d_below && ((below >> 16) & 1u));
  return static_cast<uint16_t>((sign | (up ? above : below)) >> 16);
}

// nvfp4 block, DESIGN.md's order of operations in float32, with the brute-force encoders above:
//   t = amax/6; s = e4m3(t/g); s == 0 -> all codes 0; q_i = e2m1(x_i / (s·g)); x̂_i = q_i·s·g.
// amax propagates NaN; a NaN scale leaves the codes 0 (the scale carries the NaN).
struct Nvfp4Block {
  uint8_t scale = 0;
  uint8_t codes[16] = {};  // one E2M1 code per element, unpacked
};

// docs/kv_layout.md's packing, written from its words: byte j of group k (bytes 4k .. 4k+3) holds
// element 8k+j upright (sign bit 7, exponent bits 3-2, mantissa bit 1) and element 8k+j+4 as the
// upright byte with its 8 bits reversed.
inline uint8_t nvfp4_upright_byte(uint8_t code) {
  const int sign = (code >> 3) & 1, e1 = (code >> 2) & 1, e0 = (code >> 1) & 1, m = code & 1;
  return static_cast<uint8_t>(sign << 7 | e1 << 3 | e0 << 2 | m << 1);
}
inline uint8_t reversed_byte(uint8_t b) {
  uint8_t r = 0;
  for (int i = 0; i < 8; ++i) r = static_cast<uint8_t>(r | (((b >> i) & 1) << (7 - i)));
  return r;
}
inline uint8_t nvfp4_packed_byte(const uint8_t codes[16], int byte) {
  const int k = byte / 4, j = byte % 4;
  return static_cast<uint8_t>(nvfp4_upright_byte(codes[8 * k + j]) | reversed_byte(nvfp4_upright_byte(codes[8 * k + j + 4])));
}
// The code of element i read back from 8 packed bytes, by the same words.
inline uint8_t nvfp4_unpacked_code(const uint8_t* packed, int i) {
  const int k = i / 8, j = i % 8;
  const uint8_t b = j < 4 ? packed[4 * k + j] : reversed_byte(packed[4 * k + j - 4]);
  return static_cast<uint8_t>(((b >> 7) & 1) << 3 | ((b >> 3) & 1) << 2 | ((b >> 2) & 1) << 1 | ((b >> 1) & 1));
}

inline Nvfp4Block nvfp4_encode(const float* x, float g) {
  float amax = 0.0f;
  bool has_nan = false;
  for (int i = 0; i < 16; ++i) {
    if (std::isnan(x[i])) has_nan = true;
    amax = std::fabs(x[i]) > amax ? std::fabs(x[i]) : amax;
  }
  Nvfp4Block block;
  if (has_nan) {
    block.scale = 0x7F;  // the sign of the NaN is not part of the contract; tests mask it
    return block;
  }
  volatile float t = amax / 6.0f;  // volatile: each step is rounded to float32, as the definition says
  volatile float t_over_g = t / g;
  block.scale = e4m3_encode(t_over_g);
  const float s = static_cast<float>(e4m3_value(block.scale));
  if (s == 0.0f) return block;
  volatile float denominator = s * g;
  for (int i = 0; i < 16; ++i) {
    volatile float y = x[i] / denominator;
    block.codes[i] = e2m1_encode(y);
  }
  return block;
}

inline float nvfp4_decode(uint8_t code, uint8_t scale, float g) {
  volatile float qs = static_cast<float>(e2m1_value(code)) * static_cast<float>(e4m3_value(scale));
  return qs * g;
}

}  // namespace nibble::quant::oracle
