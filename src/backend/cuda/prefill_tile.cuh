#pragma once
// The pieces of one key tile of the tensor-core prefill kernel (prefill_attention_tc.cuh composes
// them into its key loops): the tile configuration, the swizzled shared-memory layout and its
// cp.async loads, and the per-warp steps S = Q K^T, causal mask, online softmax (two schedules),
// P -> bf16 A fragments, O += P V. Fragment layouts: prefill_mma.cuh.
//
// Shared-memory tile layout: row r (a key), 16-byte chunk c (8 bf16 of head_dim) is stored at chunk
// c ^ (r % 8) of the row: the 8 rows an ldmatrix reads at one logical chunk fall in 8 different
// 16-byte bank groups (no bank conflicts), and a cp.async chunk stays 16-byte aligned.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/prefill_mma.cuh"

namespace nibble::cuda::detail {

// How a warp orders the work of a key tile.
//  kBaseline:    S_i = Q K_i; softmax (exp2f, O and l rescaled every tile); O += P_i V_i.
//  kLazyRescale: the same order; exp2 in one MUFU.EX2, and O, l are rescaled only when some row's
//                running max grows by more than 2^kRescaleLog2 (warp-uniform vote; the probabilities
//                are then <= 2^8 instead of <= 1, the result is the same up to rounding).
//  kPipelined:   kLazyRescale's softmax, software-pipelined across tiles: iteration i issues the MMAs
//                of S_i = Q K_i, then those of O += P_{i-1} V_{i-1}, then runs the softmax of S_i
//                while the tensor cores still work on P_{i-1} V_{i-1} (FA3's intra-warp overlap).
//                Needs S_i and P_{i-1} live at once: a 32-key tile at kM = 2, >= 3 K/V stages.
enum class PrefillSchedule { kBaseline, kLazyRescale, kPipelined };

inline constexpr float kRescaleLog2 = 8.0f;

// A tile configuration: kWarps warps, each owning kM blocks of 16 query rows (its K/V fragments
// are reused kM times), kKeys keys per K/V tile, and the occupancy asked of the register allocator.
// kQInSmem: Q is staged once in shared memory (bf16, swizzled) and its fragments are re-read by
// ldmatrix for every key tile, instead of living in registers (frees kM * D / 4 registers).
// kStages: K/V tiles in shared memory (kBaseline / kLazyRescale: 2 = tile i + 1 loads while tile i
// is multiplied, 3 = two ahead; kPipelined: 3 = one ahead, as it reads tiles i and i - 1).
template <int D, int kWarps_, int kM_, int kKeys_, int kMinBlocks_, bool kQInSmem_ = false, int kStages_ = 2,
          PrefillSchedule kSchedule_ = PrefillSchedule::kBaseline>
struct PrefillTile {
  static constexpr int kWarps = kWarps_;
  static constexpr int kM = kM_;                        // m16 row blocks per warp
  static constexpr int kKeys = kKeys_;                  // keys per tile
  static constexpr int kMinBlocks = kMinBlocks_;
  static constexpr bool kQInSmem = kQInSmem_;
  static constexpr PrefillSchedule kSchedule = kSchedule_;
  static constexpr bool kLazy = kSchedule != PrefillSchedule::kBaseline;
  static constexpr bool kPipelined = kSchedule == PrefillSchedule::kPipelined;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kRowsWarp = 16 * kM;
  static constexpr int kRowsQ = kRowsWarp * kWarps;     // query rows per block
  static constexpr int kChunks = D / 8;                 // 16-byte chunks per K/V row
  static constexpr int kN = kKeys / 8;                  // n8 tiles of S per key tile
  static constexpr int kD16 = D / 16;                   // k16 steps of QK^T; also pairs of n8 tiles of O
  static constexpr int kTileElems = kKeys * D;          // one K or V tile, bf16
  static constexpr int kStages = kStages_;
  // Q fragments held in registers: [kQRegsM][kQRegsD][4] bf16x2 (a placeholder [1][1][4] with Q in smem).
  static constexpr int kQRegsM = kQInSmem ? 1 : kM;
  static constexpr int kQRegsD = kQInSmem ? 1 : kD16;
  static_assert(kStages >= (kPipelined ? 3 : 2), "K/V stages: >= 2, >= 3 when pipelined");
  static constexpr int kKvBytes = kStages * 2 * kTileElems * 2;     // [stage][K|V][kKeys][D] bf16
  static constexpr int kQBytes = kQInSmem ? kRowsQ * D * 2 : 0;     // [kRowsQ][D] bf16
  static constexpr int kSmemBytes = kKvBytes + kQBytes;
  static_assert(D % 64 == 0, "the swizzle needs >= 8 chunks per row");
  static_assert(kKeys % 16 == 0 && kRowsQ % kKeys == 0, "a query tile covers whole key tiles");
  static_assert(kThreads % kChunks == 0 && kKeys % (kThreads / kChunks) == 0,
                "every thread copies the same chunk of the same number of rows");
  static_assert((kRowsQ * kChunks) % kThreads == 0, "every thread stages the same number of Q chunks");
};

// Byte offset of (row, chunk) in a swizzled tile.
template <int D>
__device__ __forceinline__ uint32_t swizzled_bytes(int row, int chunk) {
  return static_cast<uint32_t>(row * D * 2 + ((chunk ^ (row & 7)) << 4));
}

// Copies rows [key0, key0 + kKeys) of one KV head into the swizzled tile at shared address `tile`;
// rows at or past `key_end` (outside the sequence) are zero-filled so no garbage (NaN) meets a
// zero probability. `chunk_src` is this thread's 16-byte chunk (threadIdx.x % kChunks) of the
// sequence's key 0; the thread copies rows threadIdx.x / kChunks + kThreads / kChunks · it. A
// zero-filled copy reads nothing but still names a mapped address: the last row inside the
// sequence (the row index is clamped rather than a second pointer kept in registers).
template <int D, typename T>
__device__ __forceinline__ void load_kv_tile(uint32_t tile, const __nv_bfloat16* chunk_src, int64_t row_stride,
                                             int key0, int key_end) {
  constexpr int kRowsPerIt = T::kThreads / T::kChunks;
  const int r0 = threadIdx.x / T::kChunks, c = threadIdx.x % T::kChunks;
#pragma unroll
  for (int it = 0; it < T::kKeys / kRowsPerIt; ++it) {
    const int r = r0 + it * kRowsPerIt;
    const int key = key0 + r;
    const int row = key < key_end ? key : key_end - 1;
    cp_async_16(tile + swizzled_bytes<D>(r, c), chunk_src + row * row_stride, key < key_end);
  }
}

// ldmatrix lane offsets. A fragment load at logical chunk 2s + b of a row r with r % 8 == x =
// lane % 8 lands at physical chunk (2s + b) ^ x = 8 (s / 4) + ((2 (s % 4)) ^ (x ^ b)) (b <= 1):
// byte offset 128 (s / 4) + (lane_base ^ 32 (s % 4)) with lane_base = r · 2D + 16 (x ^ b). Every
// tile, Q row block and stage starts at a multiple of 128 bytes, so with `tile_lane` = tile +
// lane_base the address is (tile_lane ^ 32 (s % 4)) + a compile-time constant: one register per
// operand instead of four precomputed offsets.
template <int D>
__device__ __forceinline__ uint32_t ldmatrix_lane_base(int row, int b, int lane) {
  return static_cast<uint32_t>(row * D * 2 + (((lane & 7) ^ b) << 4));
}

// Address of logical chunk pair s (chunks 2s, 2s + 1) of the lane's row; tile_lane = tile + lane base.
__device__ __forceinline__ uint32_t fragment_address(uint32_t tile_lane, int s) {
  return (tile_lane ^ static_cast<uint32_t>((s % 4) << 5)) + (static_cast<uint32_t>((2 * s) & ~7) << 4);
}

// S = Q K^T for one key tile: s [kM][kN][4] (kN n8 tiles per 16-row block). Q from the register
// fragments qf, or by ldmatrix from q_warp (this warp's first Q row in shared memory). K fragments:
// matrices (keys 16 jp + 0..7 | + 8..15) x (dims 16 kd + 0..7 | + 8..15) -> b0, b1 of n-tiles 2 jp,
// 2 jp + 1. Q fragments by ldmatrix: (rows 0..7 | 8..15) x (dims 16 kd + 0..7 | + 8..15), the lane
// pattern of the V loads (v_lane). k_lane, v_lane: ldmatrix_lane_base of the K and V patterns.
template <int D, typename T>
__device__ __forceinline__ void qk_tile(float (&s)[T::kM][T::kN][4], const uint32_t (&qf)[T::kQRegsM][T::kQRegsD][4],
                                        uint32_t q_warp, uint32_t k_tile, uint32_t k_lane, uint32_t v_lane) {
#pragma unroll
  for (int mi = 0; mi < T::kM; ++mi) {
#pragma unroll
    for (int j = 0; j < T::kN; ++j) s[mi][j][0] = s[mi][j][1] = s[mi][j][2] = s[mi][j][3] = 0.0f;
  }
#pragma unroll
  for (int kd = 0; kd < T::kD16; ++kd) {
    uint32_t qa[T::kM][4];
#pragma unroll
    for (int mi = 0; mi < T::kM; ++mi) {
      if constexpr (T::kQInSmem) {
        ldmatrix_x4(qa[mi], fragment_address(q_warp + v_lane, kd) + 16 * mi * D * 2);
      } else {
#pragma unroll
        for (int r = 0; r < 4; ++r) qa[mi][r] = qf[mi][kd][r];
      }
    }
#pragma unroll
    for (int jp = 0; jp < T::kN / 2; ++jp) {
      uint32_t b[4];
      ldmatrix_x4(b, fragment_address(k_tile + k_lane, kd) + jp * 16 * D * 2);
#pragma unroll
      for (int mi = 0; mi < T::kM; ++mi) {
        mma_bf16_16816(s[mi][2 * jp], qa[mi], b[0], b[1]);
        mma_bf16_16816(s[mi][2 * jp + 1], qa[mi], b[2], b[3]);
      }
    }
  }
}

// A scheduling fence for the pipelined loop: the instructions after it wait for `x` (a result of
// the last MMAs before it) and cannot be hoisted above the branch, so ptxas does not interleave the
// P V MMAs with those of S = Q K^T (the softmax of S then runs while the P V MMAs are in flight).
// The branch is never taken: an MMA's f32 result is never the NaN pattern 0xffffffff.
__device__ __forceinline__ void wait_for(float x) {
  if (__float_as_uint(x) == 0xffffffffu) __trap();
}

// Causal mask of keys [key0, key0 + kKeys) against this warp's rows (row block mi: rows
// block_row0 + 16 mi + g, + 8), only on the row blocks the tile reaches past.
template <typename T>
__device__ __forceinline__ void causal_mask(float (&s)[T::kM][T::kN][4], int key0, int warp_row0, int g, int t) {
#pragma unroll
  for (int mi = 0; mi < T::kM; ++mi) {
    const int block_row0 = warp_row0 + 16 * mi;
    if (key0 + T::kKeys - 1 > block_row0) {
#pragma unroll
      for (int j = 0; j < T::kN; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = key0 + 8 * j + 2 * t + (e & 1);
          const int row = block_row0 + g + 8 * (e >> 1);
          if (key > row) s[mi][j][e] = -INFINITY;
        }
      }
    }
  }
}

// Largest raw score of row r (g or g + 8) of row block mi in this tile: the lane's own 2 · kN
// values, then the 4 lanes (t = 0..3) that share the row.
template <typename T>
__device__ __forceinline__ float tile_row_max(const float (&s)[T::kM][T::kN][4], int mi, int r) {
  float x = -INFINITY;
#pragma unroll
  for (int j = 0; j < T::kN; ++j) x = fmaxf(x, fmaxf(s[mi][j][2 * r], s[mi][j][2 * r + 1]));
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}

// O row r of row block mi times `correction` (the online-softmax rescale).
template <typename T>
__device__ __forceinline__ void scale_o_row(float (&o)[T::kM][2 * T::kD16][4], int mi, int r, float correction) {
#pragma unroll
  for (int n = 0; n < 2 * T::kD16; ++n) {
    o[mi][n][2 * r] *= correction;
    o[mi][n][2 * r + 1] *= correction;
  }
}

// kBaseline online softmax, rows g (r = 0) and g + 8 (r = 1) of each row block: m is the running
// max of raw scores, every tile rescales l and O; s becomes the probabilities.
template <typename T>
__device__ __forceinline__ void softmax_baseline(float (&s)[T::kM][T::kN][4], float (&m)[T::kM][2],
                                                 float (&l)[T::kM][2], float (&o)[T::kM][2 * T::kD16][4],
                                                 float scale_log2) {
#pragma unroll
  for (int mi = 0; mi < T::kM; ++mi) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float m_new = fmaxf(m[mi][r], tile_row_max<T>(s, mi, r));
      const float m_scaled = m_new == -INFINITY ? 0.0f : m_new * scale_log2;
      const float correction = exp2f(m[mi][r] * scale_log2 - m_scaled);  // 0 while m is -inf
      m[mi][r] = m_new;
      float sum = 0.0f;
#pragma unroll
      for (int j = 0; j < T::kN; ++j) {
        s[mi][j][2 * r] = exp2f(fmaf(s[mi][j][2 * r], scale_log2, -m_scaled));
        s[mi][j][2 * r + 1] = exp2f(fmaf(s[mi][j][2 * r + 1], scale_log2, -m_scaled));
        sum += s[mi][j][2 * r] + s[mi][j][2 * r + 1];
      }
      l[mi][r] = l[mi][r] * correction + sum;
      scale_o_row<T>(o, mi, r, correction);
    }
  }
}

// kLazyRescale / kPipelined online softmax. m is the reference max in the log2 domain (score ·
// scale_log2) that the probabilities are taken against: exp2(s · scale_log2 - m) <= 2^kRescaleLog2.
// It moves (and l, O are rescaled by exp2(m_old - m_new)) only when some row of the warp saw a
// score above m + kRescaleLog2 (always on the warp's first tile, where m is -inf); otherwise the
// tile costs no rescale at all. The final O / l is the same as with the exact max: both carry the
// same factor 2^-m.
template <typename T>
__device__ __forceinline__ void softmax_lazy(float (&s)[T::kM][T::kN][4], float (&m)[T::kM][2], float (&l)[T::kM][2],
                                             float (&o)[T::kM][2 * T::kD16][4], float scale_log2) {
  float tile_max[T::kM][2];
  bool grow = false;
#pragma unroll
  for (int mi = 0; mi < T::kM; ++mi) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      tile_max[mi][r] = tile_row_max<T>(s, mi, r) * scale_log2;  // -inf stays -inf (scale_log2 > 0)
      grow = grow || tile_max[mi][r] > m[mi][r] + kRescaleLog2;
    }
  }
  if (__any_sync(0xffffffffu, grow)) {  // warp-uniform: rare after the first tile
#pragma unroll
    for (int mi = 0; mi < T::kM; ++mi) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const float m_new = fmaxf(m[mi][r], tile_max[mi][r]);
        // 0 when m was -inf (nothing accumulated yet); 1 while the row has seen only masked keys.
        const float correction = m_new == -INFINITY ? 1.0f : exp2_ftz(m[mi][r] - m_new);
        m[mi][r] = m_new;
        l[mi][r] *= correction;
        scale_o_row<T>(o, mi, r, correction);
      }
    }
  }
#pragma unroll
  for (int mi = 0; mi < T::kM; ++mi) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float m_ref = m[mi][r] == -INFINITY ? 0.0f : m[mi][r];  // a row with only masked keys: p = 0
      float sum = 0.0f;
#pragma unroll
      for (int j = 0; j < T::kN; ++j) {
        s[mi][j][2 * r] = exp2_ftz(fmaf(s[mi][j][2 * r], scale_log2, -m_ref));
        s[mi][j][2 * r + 1] = exp2_ftz(fmaf(s[mi][j][2 * r + 1], scale_log2, -m_ref));
        sum += s[mi][j][2 * r] + s[mi][j][2 * r + 1];
      }
      l[mi][r] += sum;
    }
  }
}

// P as bf16 A fragments (half the registers of S): k16 step kk is S n-tiles 2kk (a0, a1) and
// 2kk + 1 (a2, a3).
template <typename T>
__device__ __forceinline__ void pack_p(uint32_t (&pa)[T::kKeys / 16][T::kM][4], const float (&s)[T::kM][T::kN][4]) {
#pragma unroll
  for (int kk = 0; kk < T::kKeys / 16; ++kk) {
#pragma unroll
    for (int mi = 0; mi < T::kM; ++mi) {
      pa[kk][mi][0] = pack_bf16x2(s[mi][2 * kk][0], s[mi][2 * kk][1]);
      pa[kk][mi][1] = pack_bf16x2(s[mi][2 * kk][2], s[mi][2 * kk][3]);
      pa[kk][mi][2] = pack_bf16x2(s[mi][2 * kk + 1][0], s[mi][2 * kk + 1][1]);
      pa[kk][mi][3] = pack_bf16x2(s[mi][2 * kk + 1][2], s[mi][2 * kk + 1][3]);
    }
  }
}

// O += P V for one key tile. V fragments (transposed): matrices (keys 16 kk + 0..7 | + 8..15) x
// (dims 16 np + 0..7 | + 8..15) -> b0, b1 of O n-tiles 2 np, 2 np + 1.
template <int D, typename T>
__device__ __forceinline__ void pv_tile(float (&o)[T::kM][2 * T::kD16][4],
                                        const uint32_t (&pa)[T::kKeys / 16][T::kM][4], uint32_t v_tile,
                                        uint32_t v_lane) {
#pragma unroll
  for (int kk = 0; kk < T::kKeys / 16; ++kk) {
#pragma unroll
    for (int np = 0; np < T::kD16; ++np) {
      uint32_t b[4];
      ldmatrix_x4_trans(b, fragment_address(v_tile + v_lane, np) + kk * 16 * D * 2);
#pragma unroll
      for (int mi = 0; mi < T::kM; ++mi) {
        mma_bf16_16816(o[mi][2 * np], pa[kk][mi], b[0], b[1]);
        mma_bf16_16816(o[mi][2 * np + 1], pa[kk][mi], b[2], b[3]);
      }
    }
  }
}

// The epilogue: O / l for rows g, g + 8 of each of the warp's row blocks (row = warp_row0 + 16 mi +
// g + 8 r among the sequence's new tokens; rows >= num_new are not stored), f32, two columns per
// store. out_head: the output of the sequence's first new token at this head; q_cols: the row stride.
template <int D, typename T>
__device__ __forceinline__ void store_normalized_rows(const float (&o)[T::kM][2 * T::kD16][4],
                                                      const float (&l)[T::kM][2], float* out_head, int64_t q_cols,
                                                      int warp_row0, int64_t num_new, int g, int t) {
#pragma unroll
  for (int mi = 0; mi < T::kM; ++mi) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float sum = l[mi][r];
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      const int row = warp_row0 + 16 * mi + g + 8 * r;
      if (row >= num_new) continue;
      const float inv = 1.0f / sum;
      float* out_row = out_head + row * q_cols;
#pragma unroll
      for (int n = 0; n < 2 * T::kD16; ++n) {
        *reinterpret_cast<float2*>(out_row + 8 * n + 2 * t) =
            make_float2(o[mi][n][2 * r] * inv, o[mi][n][2 * r + 1] * inv);
      }
    }
  }
}

}  // namespace nibble::cuda::detail
