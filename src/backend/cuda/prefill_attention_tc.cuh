#pragma once
// The tensor-core prefill kernel (prefill_attention.h states the contract): causal flash attention
// over a sequence's own K/V, FlashAttention-2 style, mma.sync m16n8k16 bf16 -> f32.
//
// Block: kWarps warps, one query head, kRowsQ = 16 * kM * kWarps consecutive new tokens of one
// sequence; warp w owns kM blocks of 16 query rows, [16 kM w, 16 kM (w + 1)). Its Q fragments stay in registers for the
// whole key loop (read once from the f32 q rows, rounded to bf16). Keys stream in tiles of kKeys
// rows: the K and V tiles [kKeys][D] bf16 are multi-buffered in shared memory by cp.async (tile
// i + 1, or i + 1 and i + 2, are in flight while tile i is multiplied; one barrier per tile).
// Each warp computes S = Q K^T [16][kKeys] in f32
// registers (K fragments by ldmatrix), folds it into the online softmax (log2 domain, the softmax
// scale folded into one FFMA before exp2), converts P to bf16 A fragments in registers (the S
// accumulator layout of two n8 tiles is the A layout of one k16 step) and accumulates
// O += P V [16][D] (V fragments by ldmatrix.trans). Only tiles that reach past the block's first
// query are masked; tiles past its last query are never loaded; a warp skips the math of a tile
// that lies wholly past its own last row. With kM = 2 every K/V fragment read from shared memory
// feeds two MMAs (shared-memory reads per FLOP halve, registers grow).
//
// Shared-memory tile layout: row r (a key), 16-byte chunk c (8 bf16 of head_dim) is stored at chunk
// c ^ (r % 8) of the row: the 8 rows an ldmatrix reads at one logical chunk fall in 8 different
// 16-byte bank groups (no bank conflicts), and a cp.async chunk stays 16-byte aligned.
//
// Grid: (num_q_heads, num_seqs, query tiles), tiles in reverse order so the longest (last) query
// tiles of every sequence start first and the short ones fill the tail.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/prefill_attention.h"
#include "backend/cuda/prefill_mma.cuh"

namespace nibble::cuda::detail {

// A tile configuration: kWarps warps, each owning kM blocks of 16 query rows (its K/V fragments
// are reused kM times), kKeys keys per K/V tile, and the occupancy asked of the register allocator.
// kQInSmem: Q is staged once in shared memory (bf16, swizzled) and its fragments are re-read by
// ldmatrix for every key tile, instead of living in registers (frees kM * D / 4 registers).
// kStages: K/V tiles in flight (2: tile i + 1 loads while tile i is multiplied; 3: two ahead).
template <int D, int kWarps_, int kM_, int kKeys_, int kMinBlocks_, bool kQInSmem_ = false, int kStages_ = 2>
struct PrefillTile {
  static constexpr int kWarps = kWarps_;
  static constexpr int kM = kM_;                        // m16 row blocks per warp
  static constexpr int kKeys = kKeys_;                  // keys per tile
  static constexpr int kMinBlocks = kMinBlocks_;
  static constexpr bool kQInSmem = kQInSmem_;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kRowsWarp = 16 * kM;
  static constexpr int kRowsQ = kRowsWarp * kWarps;     // query rows per block
  static constexpr int kChunks = D / 8;                 // 16-byte chunks per K/V row
  static constexpr int kTileElems = kKeys * D;          // one K or V tile, bf16
  static constexpr int kStages = kStages_;
  static_assert(kStages >= 2, "at least one tile in flight");
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
// zero probability. `thread_src` is this thread's first chunk: row threadIdx.x / kChunks of key 0,
// chunk threadIdx.x % kChunks; each iteration moves kThreads / kChunks rows on. `safe_src` is
// key 0's row (always inside the sequence), named by the zero-filled copies.
template <int D, typename T>
__device__ __forceinline__ void load_kv_tile(uint32_t tile, const __nv_bfloat16* thread_src,
                                             const __nv_bfloat16* safe_src, int64_t row_stride, int key0,
                                             int key_end) {
  constexpr int kRowsPerIt = T::kThreads / T::kChunks;
  const int r0 = threadIdx.x / T::kChunks, c = threadIdx.x % T::kChunks;
#pragma unroll
  for (int it = 0; it < T::kKeys / kRowsPerIt; ++it) {
    const int r = r0 + it * kRowsPerIt;
    const bool valid = key0 + r < key_end;
    // A zero-filled chunk still names a mapped address (the sequence's first row).
    const __nv_bfloat16* src = valid ? thread_src + static_cast<int64_t>(key0 + it * kRowsPerIt) * row_stride : safe_src;
    cp_async_16(tile + swizzled_bytes<D>(r, c), src, valid);
  }
}

// ldmatrix lane offsets. A fragment load at logical chunk 2s + b of a row r with r % 8 == lane % 8
// lands at physical chunk (2s + b) ^ (lane % 8) = 8 (s / 4) + (((2 (s % 4)) ^ (x & 6)) | (b ^ (x & 1)))
// with x = lane % 8: four lane-dependent offsets (s % 4) plus compile-time constants.
template <int D>
__device__ __forceinline__ void ldmatrix_lane_offsets(uint32_t (&offsets)[4], int row, int b, int lane) {
  const int x = lane & 7;
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    offsets[q] = static_cast<uint32_t>(row * D * 2 + ((((2 * q) ^ (x & 6)) | (b ^ (x & 1))) << 4));
  }
}

// Byte offset of logical chunk pair s (chunks 2s, 2s + 1) beyond the lane offset.
__device__ __forceinline__ constexpr uint32_t chunk_pair_bytes(int s) { return static_cast<uint32_t>((2 * s) & ~7) << 4; }

template <int D, typename T>
__global__ void __launch_bounds__(T::kThreads, T::kMinBlocks)
    prefill_attention_kernel(PrefillAttentionParams p, const __nv_bfloat16* __restrict__ k_bf16,
                             const __nv_bfloat16* __restrict__ v_bf16) {
  constexpr int kKeys = T::kKeys;
  constexpr int kM = T::kM;
  constexpr int kN = kKeys / 8;  // n8 tiles of S per key tile
  constexpr int kD16 = D / 16;   // k16 steps of QK^T; also pairs of n8 tiles of O
  extern __shared__ __align__(128) unsigned char smem_raw[];
  const uint32_t smem = smem_address(smem_raw);  // [stage][K|V][kKeys][D] bf16, swizzled rows
  constexpr uint32_t kTileBytes = T::kTileElems * 2;

  const int64_t head = blockIdx.x, seq = blockIdx.y;
  const int64_t q_tile = gridDim.z - 1 - blockIdx.z;
  const int32_t* info = p.seq_info + seq * kSeqInfoFields;
  const int64_t row0 = info[0], num_new = info[1];
  if (info[2] != 0 || info[3] == 0) return;  // extend / decode sequence: chunk_attention's work
  const int64_t q0 = q_tile * T::kRowsQ;
  if (q0 >= num_new) return;

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const int64_t kv_head = head / (p.num_q_heads / p.num_kv_heads);
  const int64_t q_cols = p.num_q_heads * D, kv_cols = p.num_kv_heads * D;
  // This warp's first query (index among the new tokens); row block mi covers 16 rows from
  // warp_row0 + 16 mi.
  const int warp_row0 = static_cast<int>(q0) + T::kRowsWarp * warp;

  // Q fragments [kM][kD16][4], bf16x2 (layout: prefill_mma.cuh), in registers, or Q [kRowsQ][D]
  // bf16 staged in shared memory after the K/V stages; rows past the sequence are zero.
  constexpr int kQRegsM = T::kQInSmem ? 1 : kM, kQRegsD = T::kQInSmem ? 1 : kD16;
  uint32_t qf[kQRegsM][kQRegsD][4];
  const uint32_t q_smem = smem + T::kKvBytes;
  if constexpr (!T::kQInSmem) {
    const float* q_base = p.q + (row0 + warp_row0) * q_cols + head * D;
#pragma unroll
    for (int mi = 0; mi < kM; ++mi) {
#pragma unroll
      for (int kd = 0; kd < kD16; ++kd) {
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          const int row = 16 * mi + g + 8 * (r & 1), col = 16 * kd + 2 * t + 8 * (r >> 1);
          float2 x = make_float2(0.0f, 0.0f);
          if (warp_row0 + row < num_new) x = *reinterpret_cast<const float2*>(q_base + row * q_cols + col);
          qf[mi][kd][r] = pack_bf16x2(x.x, x.y);
        }
      }
    }
  } else {
    const float* q_base = p.q + (row0 + q0) * q_cols + head * D;
#pragma unroll
    for (int it = 0; it < T::kRowsQ * T::kChunks / T::kThreads; ++it) {
      const int u = threadIdx.x + it * T::kThreads;
      const int r = u / T::kChunks, c = u % T::kChunks;
      float4 lo = make_float4(0.0f, 0.0f, 0.0f, 0.0f), hi = lo;
      if (q0 + r < num_new) {
        lo = *reinterpret_cast<const float4*>(q_base + r * q_cols + 8 * c);
        hi = *reinterpret_cast<const float4*>(q_base + r * q_cols + 8 * c + 4);
      }
      const uint32_t x0 = pack_bf16x2(lo.x, lo.y), x1 = pack_bf16x2(lo.z, lo.w);
      const uint32_t x2 = pack_bf16x2(hi.x, hi.y), x3 = pack_bf16x2(hi.z, hi.w);
      asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(q_smem + swizzled_bytes<D>(r, c)), "r"(x0),
                   "r"(x1), "r"(x2), "r"(x3)
                   : "memory");
    }
    // Visible to every warp after the key loop's first barrier.
  }

  float o[kM][2 * kD16][4];
#pragma unroll
  for (int mi = 0; mi < kM; ++mi) {
#pragma unroll
    for (int n = 0; n < 2 * kD16; ++n) o[mi][n][0] = o[mi][n][1] = o[mi][n][2] = o[mi][n][3] = 0.0f;
  }
  float m[kM][2], l[kM][2];  // running max (raw scores) and this thread's partial sum of rows g, g + 8
#pragma unroll
  for (int mi = 0; mi < kM; ++mi) m[mi][0] = m[mi][1] = -INFINITY, l[mi][0] = l[mi][1] = 0.0f;
  constexpr float kLog2e = 1.4426950408889634f;
  const float scale_log2 = p.softmax_scale * kLog2e;

  // Keys [0, key_end): the causal bound of the block's last query.
  const int key_end = static_cast<int>(num_new < q0 + T::kRowsQ ? num_new : q0 + T::kRowsQ);
  const int num_tiles = (key_end + kKeys - 1) / kKeys;
  const int64_t thread_chunk = (threadIdx.x / T::kChunks) * kv_cols + (threadIdx.x % T::kChunks) * 8;
  const __nv_bfloat16* k_key0 = k_bf16 + row0 * kv_cols + kv_head * D;
  const __nv_bfloat16* v_key0 = v_bf16 + row0 * kv_cols + kv_head * D;
  const __nv_bfloat16* k_src = k_key0 + thread_chunk;
  const __nv_bfloat16* v_src = v_key0 + thread_chunk;

  // Prologue: tiles 0 .. kStages - 2, one commit group each (empty past the last tile), so that the
  // group count is uniform and wait<kStages - 2> means "tile i has landed".
#pragma unroll
  for (int st = 0; st < T::kStages - 1; ++st) {
    if (st < num_tiles) {
      load_kv_tile<D, T>(smem + st * 2 * kTileBytes, k_src, k_key0, kv_cols, st * kKeys, key_end);
      load_kv_tile<D, T>(smem + st * 2 * kTileBytes + kTileBytes, v_src, v_key0, kv_cols, st * kKeys, key_end);
    }
    cp_async_commit();
  }

  // K fragments: rows (keys) 16 jp + 8 (lane / 16) + lane % 8, chunk 2 kd + (lane / 8) % 2.
  // V fragments (transposed): rows 16 kk + 8 ((lane / 8) % 2) + lane % 8, chunk 2 np + lane / 16.
  uint32_t k_lane[4], v_lane[4];
  ldmatrix_lane_offsets<D>(k_lane, (lane / 16) * 8 + lane % 8, (lane / 8) % 2, lane);
  ldmatrix_lane_offsets<D>(v_lane, ((lane / 8) % 2) * 8 + lane % 8, lane / 16, lane);

  for (int i = 0; i < num_tiles; ++i) {
    const int key0 = i * kKeys;
    cp_async_wait<T::kStages - 2>();
    // One barrier per tile: after it tile i is visible to every thread, and every warp is done with
    // tile i - 1, whose stage the next load below reuses.
    __syncthreads();
    {
      const int ahead = i + T::kStages - 1;
      if (ahead < num_tiles) {
        const uint32_t stage = smem + (ahead % T::kStages) * 2 * kTileBytes;
        load_kv_tile<D, T>(stage, k_src, k_key0, kv_cols, ahead * kKeys, key_end);
        load_kv_tile<D, T>(stage + kTileBytes, v_src, v_key0, kv_cols, ahead * kKeys, key_end);
      }
      cp_async_commit();
    }

    if (key0 <= warp_row0 + T::kRowsWarp - 1) {  // else every key of the tile is past this warp's rows
      const uint32_t k_tile = smem + (i % T::kStages) * 2 * kTileBytes;
      const uint32_t v_tile = k_tile + kTileBytes;

      // S = Q K^T: [kM][16][kKeys] as kN n8 tiles per row block.
      float s[kM][kN][4];
#pragma unroll
      for (int mi = 0; mi < kM; ++mi) {
#pragma unroll
        for (int j = 0; j < kN; ++j) s[mi][j][0] = s[mi][j][1] = s[mi][j][2] = s[mi][j][3] = 0.0f;
      }
#pragma unroll
      for (int kd = 0; kd < kD16; ++kd) {
        uint32_t qa[kM][4];
#pragma unroll
        for (int mi = 0; mi < kM; ++mi) {
          if constexpr (T::kQInSmem) {
            // A fragment by ldmatrix: matrices (rows 0..7 | 8..15) x (dims 16kd+0..7 | +8..15), the
            // same lane pattern as the V loads (v_lane).
            ldmatrix_x4(qa[mi], q_smem + (T::kRowsWarp * warp + 16 * mi) * D * 2 + v_lane[kd % 4] +
                                    chunk_pair_bytes(kd));
          } else {
#pragma unroll
            for (int r = 0; r < 4; ++r) qa[mi][r] = qf[mi][kd][r];
          }
        }
#pragma unroll
        for (int jp = 0; jp < kN / 2; ++jp) {
          // matrices: (keys 16jp+0..7 | +8..15) x (dims 16kd+0..7 | +8..15) -> b0,b1 of n-tiles 2jp, 2jp+1
          uint32_t b[4];
          ldmatrix_x4(b, k_tile + k_lane[kd % 4] + chunk_pair_bytes(kd) + jp * 16 * D * 2);
#pragma unroll
          for (int mi = 0; mi < kM; ++mi) {
            mma_bf16_16816(s[mi][2 * jp], qa[mi], b[0], b[1]);
            mma_bf16_16816(s[mi][2 * jp + 1], qa[mi], b[2], b[3]);
          }
        }
      }

#pragma unroll
      for (int mi = 0; mi < kM; ++mi) {
        const int block_row0 = warp_row0 + 16 * mi;
        // Causal mask where the tile reaches past this row block's first row.
        if (key0 + kKeys - 1 > block_row0) {
#pragma unroll
          for (int j = 0; j < kN; ++j) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const int key = key0 + 8 * j + 2 * t + (e & 1);
              const int row = block_row0 + g + 8 * (e >> 1);
              if (key > row) s[mi][j][e] = -INFINITY;
            }
          }
        }
        // Online softmax, rows g (r = 0) and g + 8 (r = 1).
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          float tile_max = -INFINITY;
#pragma unroll
          for (int j = 0; j < kN; ++j) tile_max = fmaxf(tile_max, fmaxf(s[mi][j][2 * r], s[mi][j][2 * r + 1]));
          tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
          tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 2));
          const float m_new = fmaxf(m[mi][r], tile_max);
          const float m_scaled = m_new == -INFINITY ? 0.0f : m_new * scale_log2;
          const float correction = exp2f(m[mi][r] * scale_log2 - m_scaled);  // 0 while m is -inf
          m[mi][r] = m_new;
          float sum = 0.0f;
#pragma unroll
          for (int j = 0; j < kN; ++j) {
            s[mi][j][2 * r] = exp2f(fmaf(s[mi][j][2 * r], scale_log2, -m_scaled));
            s[mi][j][2 * r + 1] = exp2f(fmaf(s[mi][j][2 * r + 1], scale_log2, -m_scaled));
            sum += s[mi][j][2 * r] + s[mi][j][2 * r + 1];
          }
          l[mi][r] = l[mi][r] * correction + sum;
#pragma unroll
          for (int n = 0; n < 2 * kD16; ++n) {
            o[mi][n][2 * r] *= correction;
            o[mi][n][2 * r + 1] *= correction;
          }
        }
      }

      // P as bf16 A fragments (half the registers of S): k16 step kk is S n-tiles 2kk (a0, a1) and
      // 2kk + 1 (a2, a3).
      uint32_t pa[kKeys / 16][kM][4];
#pragma unroll
      for (int kk = 0; kk < kKeys / 16; ++kk) {
#pragma unroll
        for (int mi = 0; mi < kM; ++mi) {
          pa[kk][mi][0] = pack_bf16x2(s[mi][2 * kk][0], s[mi][2 * kk][1]);
          pa[kk][mi][1] = pack_bf16x2(s[mi][2 * kk][2], s[mi][2 * kk][3]);
          pa[kk][mi][2] = pack_bf16x2(s[mi][2 * kk + 1][0], s[mi][2 * kk + 1][1]);
          pa[kk][mi][3] = pack_bf16x2(s[mi][2 * kk + 1][2], s[mi][2 * kk + 1][3]);
        }
      }
      // O += P V.
#pragma unroll
      for (int kk = 0; kk < kKeys / 16; ++kk) {
#pragma unroll
        for (int np = 0; np < kD16; ++np) {
          // matrices: (keys 16kk+0..7 | +8..15) x (dims 16np+0..7 | +8..15), transposed -> b0,b1 of
          // n-tiles 2np, 2np+1
          uint32_t b[4];
          ldmatrix_x4_trans(b, v_tile + v_lane[np % 4] + chunk_pair_bytes(np) + kk * 16 * D * 2);
#pragma unroll
          for (int mi = 0; mi < kM; ++mi) {
            mma_bf16_16816(o[mi][2 * np], pa[kk][mi], b[0], b[1]);
            mma_bf16_16816(o[mi][2 * np + 1], pa[kk][mi], b[2], b[3]);
          }
        }
      }
    }
  }

  // Normalize and store rows g, g + 8 of each row block (f32, two columns per store).
#pragma unroll
  for (int mi = 0; mi < kM; ++mi) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float sum = l[mi][r];
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      const int row = warp_row0 + 16 * mi + g + 8 * r;
      if (row >= num_new) continue;
      const float inv = 1.0f / sum;
      float* out_row = p.out + (row0 + row) * q_cols + head * D;
#pragma unroll
      for (int n = 0; n < 2 * kD16; ++n) {
        *reinterpret_cast<float2*>(out_row + 8 * n + 2 * t) =
            make_float2(o[mi][n][2 * r] * inv, o[mi][n][2 * r + 1] * inv);
      }
    }
  }
}

// K and V f32 [rows][cols] -> bf16 (round to nearest even) into out [2][rows][cols]; n = rows * cols,
// a multiple of 4.
__global__ void convert_kv_to_bf16_kernel(const float* __restrict__ k, const float* __restrict__ v,
                                          __nv_bfloat16* __restrict__ out, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x * 4;
  for (int64_t i = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * 4; i < 2 * n; i += stride) {
    const float* src = i < n ? k + i : v + (i - n);
    const float4 x = *reinterpret_cast<const float4*>(src);
    uint2 packed;
    packed.x = pack_bf16x2(x.x, x.y);
    packed.y = pack_bf16x2(x.z, x.w);
    *reinterpret_cast<uint2*>(out + i) = packed;
  }
}

}  // namespace nibble::cuda::detail
