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
#include "backend/cuda/wgmma_attention.cuh"

namespace nibble::cuda::detail {

struct WgmmaPrefillTile {
  static constexpr int kD = WgmmaAttention::kD;
  static constexpr int kGroups = 2;
  static constexpr int kThreads = 128 * kGroups;
  static constexpr int kRowsQ = 64 * kGroups;
  static constexpr int kKeys = WgmmaAttention::kKeys;
  using Ring = WgmmaKvRing<3>;
  static constexpr uint32_t kQBytes = kGroups * WgmmaAttention::kQGroupBytes;
  // + the ring's mbarriers, + 1024 to align the base
  static constexpr int kSmemBytes = static_cast<int>(kQBytes + Ring::kBytes + Ring::kBarrierBytes) + 1024;
};

__global__ void __launch_bounds__(WgmmaPrefillTile::kThreads, 1)
    prefill_attention_wgmma_kernel(PrefillAttentionParams p, const __nv_bfloat16* __restrict__ k_bf16,
                                   const __nv_bfloat16* __restrict__ v_bf16) {
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
  __trap();  // another architecture's copy: wgmma is sm_90a's alone
#else
  using T = WgmmaPrefillTile;
  using A = WgmmaAttention;
  constexpr int D = T::kD;
  // (Another name than the mma.sync kernel's 128-aligned array: the two share prefill_attention.cu.)
  extern __shared__ __align__(1024) unsigned char wgmma_smem[];
  const uint32_t smem = (smem_address(wgmma_smem) + 1023u) & ~1023u;
  const uint32_t q_smem = smem;
  const T::Ring ring{smem + T::kQBytes, smem + T::kQBytes + T::Ring::kBytes};

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
      const uint32_t at = q_smem + (r / 64) * A::kQGroupBytes + wgmma_piece_offset(r % 64, c, A::kQGroupBytes / 2);
      asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(at), "r"(pack_bf16x2(lo.x, lo.y)),
                   "r"(pack_bf16x2(lo.z, lo.w)), "r"(pack_bf16x2(hi.x, hi.y)), "r"(pack_bf16x2(hi.z, hi.w))
                   : "memory");
    }
  }

  // Keys [0, key_end): the causal bound of the block's last query.
  const int key_end = min(num_new, q0 + T::kRowsQ);
  const int num_tiles = (key_end + T::kKeys - 1) / T::kKeys;
  // Copies of K or V tile `tile` (src: the workspace's K or V) into `stage`.
  const auto load_tile = [&](const __nv_bfloat16* src_base, uint32_t stage, int tile) {
#pragma unroll
    for (int it = 0; it < T::kKeys * 16 / T::kThreads; ++it) {
      const int u = tid + it * T::kThreads;
      const int r = u / 16, c = u % 16;
      const int key = tile * T::kKeys + r;
      const bool valid = key < key_end;
      const __nv_bfloat16* src = src_base + (row0 + (valid ? key : 0)) * kv_cols + kv_head * D + 8 * c;
      cp_async_16(stage + wgmma_piece_offset(r, c, A::kHalfBytes), src, valid);
    }
  };
  const uint32_t q_group = q_smem + group * A::kQGroupBytes;
  if (tid == 0) ring.init(T::kThreads);
  fence_proxy_async_smem();  // Q's stores, for the wgmma reads
  __syncthreads();

  float o[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) o[i] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  constexpr float kLog2e = 1.4426950408889634f;
  const float scale_log2 = p.softmax_scale * kLog2e;
  uint32_t pa[8][4];  // P of the tile whose P V is next, bf16 A fragments (k-step kk: keys 16kk ..)

  // A tile's copies into its ring, once both warpgroups have released the stage's previous tile.
  const auto load_k = [&](int tile) {
    ring.wait_k_free(tile);
    load_tile(k_bf16, ring.k_stage(tile), tile);
  };
  const auto load_v = [&](int tile) {
    ring.wait_v_free(tile);
    load_tile(v_bf16, ring.v_stage(tile), tile);
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
  if (num_tiles > 0) mbarrier_arrive(ring.full_k(0));
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
    if (i + 1 < num_tiles) mbarrier_arrive(ring.full_k(i + 1));
    mbarrier_arrive(ring.full_v(i));

    float s[64];
    ring.wait_k_full(i);
    wgmma_issue_qk(s, q_group, ring.k_stage(i));
    if (i > 0) {
      ring.wait_v_full(i - 1);
      wgmma_issue_pv(o, pa, ring.v_stage(i - 1));
      wgmma_wait<1>();  // S_i done; P_{i-1} V_{i-1} may still run
    } else {
      wgmma_wait<0>();
    }
    wgmma_fence_operands(s);
    if (lane == 0) mbarrier_arrive(ring.empty_k(i));

    // Causal mask: only the tile that reaches past this warp's first row. Key 0 of tile 0 is every
    // row's, so the running max is finite from the first tile on.
    const int key0 = i * T::kKeys;
    if (key0 + T::kKeys - 1 > warp_row0) wgmma_causal_mask(s, key0, warp_row0 + g, t);
    float correction[2];
    wgmma_softmax(s, m, l, correction, scale_log2);
    // P_{i-1} V_{i-1} done: its V's stage is free.
    wgmma_wait<0>();
    wgmma_fence_operands(o);
    if (i > 0 && lane == 0) mbarrier_arrive(ring.empty_v(i - 1));
    wgmma_rescale_pack(o, correction, s, pa);
  }
  if (num_tiles > 0) {
    ring.wait_v_full(num_tiles - 1);
    wgmma_issue_pv(o, pa, ring.v_stage(num_tiles - 1));
  }
  wgmma_wait<0>();
  wgmma_fence_operands(o);

  wgmma_store_rows(o, l, p.out + row0 * q_cols + head * D, q_cols, warp_row0 + g, num_new, t);
#endif
}

}  // namespace nibble::cuda::detail
