#pragma once
// The prefill kernel on Hopper's warpgroup MMAs (sm_90a): causal flash attention over a sequence's
// own K/V at head_dim 128, the contract of prefill_attention (prefill_attention.h) and the same
// precision (q, k, v and P rounded to bf16, f32 accumulation and softmax).
//
// Block: kGroups = 2 warpgroups (256 threads), kRowsQ = 128 consecutive new tokens of one query
// head; warpgroup w owns rows [64w, 64w + 64). Keys stream in tiles of kKeys = 128 through two rings
// (K and V) of kStages = 3 shared-memory stages, filled by every thread with cp.async from the bf16
// K/V workspace. Per tile and warpgroup:
//   S = Q K^T   8 x wgmma m64n128k16, A = Q and B = K both from shared memory (K-major);
//   softmax     online, in registers, log2 domain (a quad of lanes shares a row, as in mma.sync);
//   O += P V    8 x wgmma m64n128k16, A = P (bf16, from the S registers: wgmma.cuh), B = V from
//               shared memory (MN-major), issued with the next tile's S = Q K^T, so that the next
//               softmax runs while the tensor cores do this product.
// No block barrier in the key loop: mbarriers say when a stage's copies have landed (every thread
// arrives once its own have, cp.async.wait_group + fence.proxy.async) and when both warpgroups are
// done reading it (each warp arrives after its wgmma wait), so the two warpgroups drift apart by up
// to a tile and one's softmax overlaps the other's products. Only the block's last tile (keys q0 ..
// q0 + 127) is masked; tiles past the block's last query are never loaded.
//
// Shared memory (1024-byte aligned, 128-byte swizzle, wgmma.cuh):
//   Q        [kGroups][2 halves of 64 dims][64 rows][128 B]                32 KiB
//   K ring   [kStages][2 halves of 64 dims][kKeys rows][128 B]             3 x 32 KiB
//   V ring   the same                                                      3 x 32 KiB
//   mbarriers [full K | full V | empty K | empty V][kStages] x 8 B
// Grid: (num_q_heads, num_seqs, query tiles), tiles in reverse order (the longest first), as the
// mma.sync kernel (prefill_attention_tc.cuh).
//
// Built only where the build targets sm_90a (NIBBLE_CUDA_SM90A); in a build that also targets other
// architectures their copies of the kernel trap, and the launcher picks it only on a 9.0 device.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/prefill_attention.h"
#include "backend/cuda/prefill_mma.cuh"  // cp_async_16, exp2_ftz, pack_bf16x2, smem_address
#include "backend/cuda/wgmma.cuh"

namespace nibble::cuda::detail {

struct WgmmaPrefillTile {
  static constexpr int kD = 128;
  static constexpr int kGroups = 2;
  static constexpr int kThreads = 128 * kGroups;
  static constexpr int kRowsQ = 64 * kGroups;
  static constexpr int kKeys = 128;
  static constexpr int kStages = 3;
  static constexpr uint32_t kHalfBytes = kKeys * 128;       // 64 dims of one K or V tile
  static constexpr uint32_t kTileBytes = 2 * kHalfBytes;    // one K or V tile: a stage of its ring
  static constexpr uint32_t kQGroupBytes = 64 * kD * 2;     // one warpgroup's Q rows
  static constexpr uint32_t kQBytes = kGroups * kQGroupBytes;
  // + 128 B of mbarriers, + 1024 to align the base
  static constexpr int kSmemBytes = static_cast<int>(kQBytes + 2 * kStages * kTileBytes) + 128 + 1024;
};

__global__ void __launch_bounds__(WgmmaPrefillTile::kThreads, 1)
    prefill_attention_wgmma_kernel(PrefillAttentionParams p, const __nv_bfloat16* __restrict__ k_bf16,
                                   const __nv_bfloat16* __restrict__ v_bf16) {
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
  __trap();  // another architecture's copy: wgmma is sm_90a's alone
#else
  using T = WgmmaPrefillTile;
  constexpr int D = T::kD;
  // (Another name than the mma.sync kernel's 128-aligned array: the two share prefill_attention.cu.)
  extern __shared__ __align__(1024) unsigned char wgmma_smem[];
  const uint32_t smem = (smem_address(wgmma_smem) + 1023u) & ~1023u;
  const uint32_t q_smem = smem;
  const uint32_t kv_smem = smem + T::kQBytes;

  const int64_t head = blockIdx.x, seq = blockIdx.y;
  const int64_t q_tile = gridDim.z - 1 - blockIdx.z;
  const int32_t* info = p.seq_info + seq * kSeqInfoFields;
  const int64_t row0 = info[0];
  const int num_new = info[1];
  if (info[2] != 0 || info[3] == 0) return;  // extend / decode sequence: not this kernel's
  const int q0 = static_cast<int>(q_tile) * T::kRowsQ;
  if (q0 >= num_new) return;

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int group = warp / 4, g = lane / 4, t = lane % 4;
  const int64_t kv_head = head / (p.num_q_heads / p.num_kv_heads);
  const int64_t q_cols = p.num_q_heads * D, kv_cols = p.num_kv_heads * D;
  // This thread's rows (among the sequence's new tokens): warp_row0 + g and + 8.
  const int warp_row0 = q0 + 64 * group + 16 * (warp % 4);

  // Q rows -> bf16, swizzled, rows past the sequence zero: 128 rows x 16 pieces of 8 dims.
  {
    const float* q_base = p.q + (row0 + q0) * q_cols + head * D;
#pragma unroll
    for (int it = 0; it < T::kRowsQ * 16 / T::kThreads; ++it) {
      const int u = tid + it * T::kThreads;
      const int r = u / 16, c = u % 16;
      float4 lo = make_float4(0.0f, 0.0f, 0.0f, 0.0f), hi = lo;
      if (q0 + r < num_new) {
        lo = *reinterpret_cast<const float4*>(q_base + r * q_cols + 8 * c);
        hi = *reinterpret_cast<const float4*>(q_base + r * q_cols + 8 * c + 4);
      }
      const uint32_t at =
          q_smem + (r / 64) * T::kQGroupBytes + (c / 8) * (T::kQGroupBytes / 2) + sw128_offset(r % 64, c % 8);
      asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(at), "r"(pack_bf16x2(lo.x, lo.y)),
                   "r"(pack_bf16x2(lo.z, lo.w)), "r"(pack_bf16x2(hi.x, hi.y)), "r"(pack_bf16x2(hi.z, hi.w))
                   : "memory");
    }
  }

  // Keys [0, key_end): the causal bound of the block's last query.
  const int key_end = min(num_new, q0 + T::kRowsQ);
  const int num_tiles = (key_end + T::kKeys - 1) / T::kKeys;
  // Copies of K or V tile `tile` (src: the workspace's K or V) into its ring's stage.
  const auto load_tile = [&](const __nv_bfloat16* src_base, uint32_t ring, int tile) {
    const uint32_t stage = ring + (tile % T::kStages) * T::kTileBytes;
#pragma unroll
    for (int it = 0; it < T::kKeys * 16 / T::kThreads; ++it) {
      const int u = tid + it * T::kThreads;
      const int r = u / 16, c = u % 16;
      const int key = tile * T::kKeys + r;
      const bool valid = key < key_end;
      const __nv_bfloat16* src = src_base + (row0 + (valid ? key : 0)) * kv_cols + kv_head * D + 8 * c;
      cp_async_16(stage + (c / 8) * T::kHalfBytes + sw128_offset(r, c % 8), src, valid);
    }
  };
  const uint32_t k_ring = kv_smem, v_ring = kv_smem + T::kStages * T::kTileBytes;
  const uint32_t q_group = q_smem + group * T::kQGroupBytes;
  // mbarriers [full K | full V | empty K | empty V][kStages], 8 bytes each, past the rings. full: every
  // thread arrives once its copies of the stage's tile have landed (and are fenced for the async
  // proxy); empty: each warp's lane 0, once its warpgroup's MMAs reading the stage are done.
  const uint32_t bars = v_ring + T::kStages * T::kTileBytes;
  const auto full_k = [&](int tile) { return bars + 8 * (tile % T::kStages); };
  const auto full_v = [&](int tile) { return bars + 8 * (T::kStages + tile % T::kStages); };
  const auto empty_k = [&](int tile) { return bars + 8 * (2 * T::kStages + tile % T::kStages); };
  const auto empty_v = [&](int tile) { return bars + 8 * (3 * T::kStages + tile % T::kStages); };
  const auto use = [](int tile) { return static_cast<uint32_t>(tile / T::kStages) & 1u; };  // phase parity
  if (tid == 0) {
#pragma unroll
    for (int st = 0; st < T::kStages; ++st) {
      mbarrier_init(full_k(st), T::kThreads);
      mbarrier_init(full_v(st), T::kThreads);
      mbarrier_init(empty_k(st), T::kThreads / 32);
      mbarrier_init(empty_v(st), T::kThreads / 32);
    }
  }
  fence_proxy_async_smem();  // Q's stores, for the wgmma reads
  __syncthreads();

  float o[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) o[i] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  constexpr float kLog2e = 1.4426950408889634f;
  const float scale_log2 = p.softmax_scale * kLog2e;
  uint32_t pa[8][4];  // P of the tile whose P V is next, bf16 A fragments (k-step kk: keys 16kk ..)

  // O += P V of tile `tile` (P in pa) once its V is in: V MN-major, 16 keys per k-step (2 groups of 8
  // rows, SBO apart), the two 64-dim halves LBO apart. Committed as one group.
  const auto issue_pv = [&](int tile) {
    mbarrier_wait(full_v(tile), use(tile));
    const uint32_t v_tile = v_ring + (tile % T::kStages) * T::kTileBytes;
#pragma unroll
    for (int kk = 0; kk < 8; ++kk) {
#pragma unroll
      for (int x = 0; x < 4; ++x) asm volatile("" : "+r"(pa[kk][x])::"memory");
    }
    wgmma_fence_operands(o);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 8; ++kk) {
      wgmma_m64n128k16_rs_mn(o, pa[kk], smem_desc(v_tile + kk * 16 * 128, T::kHalfBytes, 1024));
    }
    wgmma_commit();
  };
  // A tile's copies into its ring, once both warpgroups have released the stage's previous tile.
  const auto load_k = [&](int tile) {
    if (tile >= T::kStages) mbarrier_wait(empty_k(tile), use(tile) ^ 1u);
    load_tile(k_bf16, k_ring, tile);
  };
  const auto load_v = [&](int tile) {
    if (tile >= T::kStages) mbarrier_wait(empty_v(tile), use(tile) ^ 1u);
    load_tile(v_bf16, v_ring, tile);
  };

  // Commit groups of copies: {K0}, {K1, V0}, then iteration i's {K(i + 2), V(i + 1)} (empty past the
  // end); at iteration i "all but the newest group landed" means K(i + 1) and V(i) are in.
  if (num_tiles > 0) load_k(0);
  cp_async_commit();
  if (num_tiles > 1) load_k(1);
  if (num_tiles > 0) load_v(0);
  cp_async_commit();
  cp_async_wait<1>();
  fence_proxy_async_smem();
  if (num_tiles > 0) mbarrier_arrive(full_k(0));
  // Iteration i issues S_i = Q K_i and then O += P_{i-1} V_{i-1}, and runs the softmax of S_i while
  // the tensor cores still work on P_{i-1} V_{i-1}; O is rescaled to S_i's running max once that is
  // done, and P_i waits for the next iteration. (P_i V_i issued at the end of iteration i instead, the
  // softmax beside nothing of its own warpgroup: H200, 2026-12-04, 8K causal 32 / 8 heads 410 against
  // 483 TFLOP/s; with one block barrier per tile instead of the mbarriers, 456. And the two warpgroups
  // made to take turns issuing their products (FA3's ping-pong: named barriers around the issue):
  // slower, 32K 489 -> 470, 16K 492 -> 472, 4 x 8K 449 -> 429, 2K equal.)
  for (int i = 0; i < num_tiles; ++i) {
    if (i + 2 < num_tiles) load_k(i + 2);
    if (i + 1 < num_tiles) load_v(i + 1);
    cp_async_commit();
    cp_async_wait<1>();
    fence_proxy_async_smem();
    if (i + 1 < num_tiles) mbarrier_arrive(full_k(i + 1));
    mbarrier_arrive(full_v(i));
    mbarrier_wait(full_k(i), use(i));

    // S = Q K^T (64 rows x 128 keys per warpgroup), S starting from the first k-step (scale-d false).
    const uint32_t k_tile = k_ring + (i % T::kStages) * T::kTileBytes;
    float s[64];
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const uint32_t q_off = (kk / 4) * (T::kQGroupBytes / 2) + (kk % 4) * 32;
      const uint32_t k_off = (kk / 4) * T::kHalfBytes + (kk % 4) * 32;
      wgmma_m64n128k16_ss(s, smem_desc(q_group + q_off, 16, 1024), smem_desc(k_tile + k_off, 16, 1024), kk > 0);
    }
    wgmma_commit();
    if (i > 0) {
      issue_pv(i - 1);
      wgmma_wait<1>();  // S_i done; P_{i-1} V_{i-1} may still run
    } else {
      wgmma_wait<0>();
    }
    wgmma_fence_operands(s);
    if (lane == 0) mbarrier_arrive(empty_k(i));

    // Causal mask: only the tile that reaches past this warp's first row.
    const int key0 = i * T::kKeys;
    if (key0 + T::kKeys - 1 > warp_row0) {
#pragma unroll
      for (int j = 0; j < 16; ++j) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int key = key0 + 8 * j + 2 * t + e;
          if (key > warp_row0 + g) s[4 * j + e] = -INFINITY;
          if (key > warp_row0 + g + 8) s[4 * j + 2 + e] = -INFINITY;
        }
      }
    }
    // Online softmax per row (r = 0: row g, r = 1: row g + 8); key 0 of tile 0 is every row's, so
    // the max is finite from the first tile on.
    float correction[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float mx = -INFINITY;
#pragma unroll
      for (int j = 0; j < 16; ++j) mx = fmaxf(mx, fmaxf(s[4 * j + 2 * r], s[4 * j + 2 * r + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_new = fmaxf(m[r], mx * scale_log2);
      correction[r] = exp2_ftz(m[r] - m_new);  // 0 on the first tile (m = -inf)
      m[r] = m_new;
      float sum = 0.0f;
#pragma unroll
      for (int j = 0; j < 16; ++j) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          s[4 * j + 2 * r + e] = exp2_ftz(fmaf(s[4 * j + 2 * r + e], scale_log2, -m_new));
          sum += s[4 * j + 2 * r + e];
        }
      }
      l[r] = l[r] * correction[r] + sum;
    }
    // P_{i-1} V_{i-1} done: its V's stage is free.
    wgmma_wait<0>();
    wgmma_fence_operands(o);
    if (i > 0 && lane == 0) mbarrier_arrive(empty_v(i - 1));
    // O to S_i's reference; P_i into pa.
#pragma unroll
    for (int j = 0; j < 16; ++j) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        o[4 * j + 2 * r] *= correction[r];
        o[4 * j + 2 * r + 1] *= correction[r];
      }
    }
#pragma unroll
    for (int kk = 0; kk < 8; ++kk) {
      pa[kk][0] = pack_bf16x2(s[8 * kk + 0], s[8 * kk + 1]);
      pa[kk][1] = pack_bf16x2(s[8 * kk + 2], s[8 * kk + 3]);
      pa[kk][2] = pack_bf16x2(s[8 * kk + 4], s[8 * kk + 5]);
      pa[kk][3] = pack_bf16x2(s[8 * kk + 6], s[8 * kk + 7]);
    }
  }
  if (num_tiles > 0) issue_pv(num_tiles - 1);
  wgmma_wait<0>();
  wgmma_fence_operands(o);

  // O / l for rows g, g + 8 (rows past the sequence are not stored).
  float* out_head = p.out + row0 * q_cols + head * D;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float sum = l[r];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    const int row = warp_row0 + g + 8 * r;
    if (row >= num_new) continue;
    const float inv = 1.0f / sum;
    float* out_row = out_head + static_cast<int64_t>(row) * q_cols;
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      *reinterpret_cast<float2*>(out_row + 8 * j + 2 * t) =
          make_float2(o[4 * j + 2 * r] * inv, o[4 * j + 2 * r + 1] * inv);
    }
  }
#endif
}

}  // namespace nibble::cuda::detail
