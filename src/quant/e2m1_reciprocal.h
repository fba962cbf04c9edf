#pragma once
// E2M1 codes of x / d by multiplication: bit-identical to e2m1_from_f32(x / d), the correctly
// rounded float32 quotient that nvfp4's definition divides by (quant/nvfp4.h: q_i = e2m1(x_i /
// (float(s)·g))). The CUDA write path (backend/cuda/kv_write.cuh) runs this rule instead of 16 true
// divisions per block; tests/backend/cuda_kv_write/test_e2m1_reciprocal.cpp checks it on the host.
//
// The rule. Once per block: r_hi = RN(1/d), r_lo = RN(RN(1 − d·r_hi)·r_hi) (the residual is exact),
// so r_hi + r_lo = (1/d)(1 + ε) with |ε| < 3·2^-48. Per element, with a = |x| and y = a/d:
//   p = fma(a, r_hi, RN(a·r_lo)),   |p − y| < 2^-46·y,   q = RN(p)   (one multiply and one FMA).
// The code of a float z changes only where RN(z) crosses a threshold T of e2m1_from_f32 (0.25, 0.75,
// 1.25, 1.75, 2.5, 3.5, 5), i.e. at the midpoints M = T ± ulp/2 between T and its neighbours; q and
// RN(y) get the same code unless such an M lies between p and y, i.e. |y − M| < 2^-46·y.
//
// kProven: d has at most 16 significant bits (every d = float(s)·g with g a power of two: s has 4).
//   Write d = m·2^E with m odd, m < 2^16, and X = y·m (so x = X·2^E is a float). Each T has at most 3
//   significant bits, so T·m is a multiple of ulp(X), and M·m = T·m ± m·2^(e−24) (2^e <= T < 2^(e+1);
//   2^(e−25) below T = 0.25) sits an odd multiple of 2^(e−24) (2^(e−25)) away from every multiple of
//   ulp(X) >= 2^(e−23). Hence |y − M| = |X − M·m|/m >= 2^(e−25)/2^16 = 2^(e−41) > 2^(e−45) > |p − y|:
//   q's code is the reference's for every x, with no check at all (the CPU test also runs every E4M3
//   scale against thresholds ± many ulps, exact ties included). (m = 1: r_lo = 0 and p = y.)
// kChecked: any other d in range. There the quotient is a single product, q = RN(a·r_hi): |q − y| <
//   (2^-23 + 2^-48)·y < 2·ulp(y). If the codes of q and RN(y) differ, a threshold T lies between them
//   (inclusive), so |q − T| < 2.5·ulp(y): q's bit pattern is within 2 steps of T's (5 below T = 0.25,
//   whose lower binade has half-size ulps). Every T has at most 3 significant bits, so the low 21
//   mantissa bits of its pattern are zero; e2m1_near_decision_point() flags every q whose pattern is
//   within kE2m1NearSteps = 8 of such a pattern (conservatively: grid values, zero and +Inf too).
//   Only those elements are decided exactly, by an FMA residual against T's rounding midpoints
//   (e2m1_magnitude_code_near), still without a division.
// kDivide: d outside [2^-60, 2^60] (the bounds keep r_lo and a·r_lo normal): divide every element.
//
// NaN x is outside the rule (nvfp4 turns a NaN block into a NaN scale before any element is coded);
// ±Inf x gives p = Inf or NaN (Inf − Inf), both coded 7 like the reference's Inf quotient.
#include <cmath>
#include <cstdint>

#include "quant/bits.h"
#include "quant/e2m1.h"

namespace nibble::quant {

enum class E2m1DivisorMode : uint8_t { kProven, kChecked, kDivide };

inline constexpr float kE2m1ReciprocalMinDivisor = 0x1p-60f;
inline constexpr float kE2m1ReciprocalMaxDivisor = 0x1p60f;

struct E2m1Divisor {
  float d = 1.0f;     // the divisor, float(s)·g as the definition rounds it
  float r_hi = 0.0f;  // RN(1/d)
  float r_lo = 0.0f;  // 1/d − r_hi to ~2^-48 relative
  E2m1DivisorMode mode = E2m1DivisorMode::kDivide;
};

NIBBLE_HD float fma_f32(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}

// Splits 1/d (d > 0) once per block.
NIBBLE_HD E2m1Divisor e2m1_divisor(float d) {
  E2m1Divisor v;
  v.d = d;
  if (!(d >= kE2m1ReciprocalMinDivisor && d <= kE2m1ReciprocalMaxDivisor)) return v;  // NaN too
  v.r_hi = 1.0f / d;
  const float residual = fma_f32(-d, v.r_hi, 1.0f);  // 1 − d·r_hi, exact for r_hi = RN(1/d)
  v.r_lo = residual * v.r_hi;
  v.mode = (f32_bits(d) & 0xFFu) == 0 ? E2m1DivisorMode::kProven : E2m1DivisorMode::kChecked;
  return v;
}

// q = RN(|x|·(r_hi + r_lo)) as above: the candidate for |x| / d (kProven).
NIBBLE_HD float e2m1_reciprocal_quotient(float x, const E2m1Divisor& v) {
  const float a = abs_f32(x);
  return fma_f32(a, v.r_hi, mul_rn(a, v.r_lo));
}

// q = RN(|x|·r_hi): the kChecked candidate, checked by e2m1_near_decision_point().
NIBBLE_HD float e2m1_checked_quotient(float x, const E2m1Divisor& v) { return mul_rn(abs_f32(x), v.r_hi); }

// The candidate of v's mode (kProven or kChecked).
NIBBLE_HD float e2m1_quotient(float x, const E2m1Divisor& v) {
  return v.mode == E2m1DivisorMode::kProven ? e2m1_reciprocal_quotient(x, v) : e2m1_checked_quotient(x, v);
}

// Rounding by addition: q + M with M = 2^22, 2^23, 2^24 for q in [0, 2), [2, 4), [4, ∞) rounds q
// to the E2M1 grid there (steps 0.5, 1, 2; ties to even, the reference's tie rule at every
// threshold). Returns M's bits, chosen from q's binade: 1, 2, 4 clamped, times 2^22.
NIBBLE_HD uint32_t e2m1_grid_magic_bits(float q) {
  uint32_t binade = f32_bits(q) & 0x7F800000u;  // 2^floor(log2 q); 0 below 2^-126
  binade = binade < 0x3F800000u ? 0x3F800000u : binade;
  binade = binade > 0x40800000u ? 0x40800000u : binade;
  return binade + (22u << 23);
}

// The E2M1 magnitude code (0..7) of q >= +0: e2m1_from_f32(q) & 7 for every such float, +Inf
// included; any NaN gives 7. The sum's low bits are q's index on its grid; the regions start at
// codes 0, 2, 4 (= (M_bits >> 22) − 298), and everything from 6 up clamps to code 7.
NIBBLE_HD uint32_t e2m1_magnitude_code(float q) {
  const uint32_t m_bits = e2m1_grid_magic_bits(q);
  const uint32_t sum_bits = f32_bits(q + f32_from_bits(m_bits));
  const uint32_t code = sum_bits - m_bits + (m_bits >> 22) - 298u;  // unsigned: NaN sums stay huge
  return code < 7u ? code : 7u;
}

// Whether q >= +0 lies within kE2m1NearSteps bit patterns of a float whose low 21 mantissa bits are
// zero (every decision point is one), as an unsigned key: q is near iff e2m1_near_key(q) <
// kE2m1NearKeyLimit. Keys combine by min over a block, so a kernel can test 16 elements with one
// compare (two integer operations per element: a multiply-add and a min).
inline constexpr uint32_t kE2m1NearSteps = 8;
inline constexpr uint32_t kE2m1NearKeyLimit = (2 * kE2m1NearSteps + 1) << 11;
NIBBLE_HD uint32_t e2m1_near_key(float q) { return f32_bits(q) * 2048u + (kE2m1NearSteps << 11); }
NIBBLE_HD bool e2m1_near_decision_point(float q) { return e2m1_near_key(q) < kE2m1NearKeyLimit; }

// The exact magnitude code of |x| / d for an element whose quotient q = e2m1_quotient() was flagged
// by e2m1_near_decision_point() (d in [2^-60, 2^60]), without a division. T = the
// decision point next to q (the grid value (q + M) − M ± half a step); RN(|x|/d) is T exactly when
// |x|/d lies within T's rounding midpoints, above it past T + ulp(T)/2, below it past T − ulp⁻(T)/2
// (ulp⁻ = ulp below T, half of ulp(T) when T is a power of two; the midpoints round to T, whose
// last mantissa bit is even). With r = |x| − T·d, that is r vs (ulp/2)·d: exact comparisons, as r
// is an exact FMA here (|r| < 2^-16·T·d and r is a multiple of 2^-25·2^e(T)·2^e(d), so it needs
// at most 10 bits) and (ulp/2)·d is d times a power of two. The code is then that of T, of T's
// successor or of its predecessor. A q the check flags without being near a decision point (a grid
// value, zero) gets the T next to it, |r| ≥ T·d/5 and only r's sign decides: RN keeps it.
NIBBLE_HD uint32_t e2m1_magnitude_code_near(float x, float q, float d) {
  const float m = f32_from_bits(e2m1_grid_magic_bits(q));
  const float nearest = (q + m) - m;
  const float half_step = m * 0x1p-24f;  // 0.25, 0.5, 1 on the grids of step 0.5, 1, 2
  const float t = q >= nearest ? nearest + half_step : nearest - half_step;
  const float residual = fma_f32(-t, d, abs_f32(x));
  const uint32_t t_bits = f32_bits(t);
  const float half_ulp_above = f32_from_bits(t_bits & 0x7F800000u) * 0x1p-24f;
  const float half_ulp_below = (t_bits & 0x7FFFFFu) == 0 ? half_ulp_above * 0.5f : half_ulp_above;
  uint32_t rounded_bits = t_bits;
  if (residual > half_ulp_above * d) {
    rounded_bits = t_bits + 1;
  } else if (residual < -(half_ulp_below * d)) {
    rounded_bits = t_bits - 1;
  }
  return e2m1_magnitude_code(f32_from_bits(rounded_bits));
}

// The whole rule for one element: e2m1_from_f32(x / v.d) for every x that is not NaN.
NIBBLE_HD uint8_t e2m1_code_by_reciprocal(float x, const E2m1Divisor& v) {
  if (v.mode == E2m1DivisorMode::kDivide) return e2m1_from_f32(x / v.d);
  const float q = e2m1_quotient(x, v);
  const uint32_t sign = (f32_bits(x) >> 28) & 0x8u;
  if (v.mode == E2m1DivisorMode::kChecked && e2m1_near_decision_point(q)) {
    return static_cast<uint8_t>(sign | e2m1_magnitude_code_near(x, q, v.d));
  }
  return static_cast<uint8_t>(sign | e2m1_magnitude_code(q));
}

}  // namespace nibble::quant
