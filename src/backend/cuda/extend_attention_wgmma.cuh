#pragma once
// The extend kernel on Hopper's warpgroup MMAs (sm_90a), head_dim 128, fp8 / nvfp4 / k8v4 caches: the
// contract, precision and rotation of extend_attention.h, on the warpgroup loop of the prefill kernel
// (prefill_attention_wgmma.cuh; the per-tile pieces in wgmma_attention.cuh).
//
// Block: 2 warpgroups (256 threads) x 64 query rows each: two query heads of one GQA group over the
// same 64 new tokens (heads_per_block 2, an even group), or 128 consecutive new tokens of one head
// (heads_per_block 1). Either way every dequantized key tile feeds 128 query rows. Two phases, as the
// mma.sync kernel (extend_attention_tc.cuh):
//   prefix  tiles of 128 cached tokens from the paged pool, keys at or past cached_len masked, the
//           softmax scale times K's global scale;
//   switch  O *= V's global scale; with a rotated cache O = H O in registers and Q reloaded unrotated;
//   own     the chunk's own K/V from the bf16 workspace, causally.
// Key tiles reach the products through the 2-stage bf16 ring of WgmmaKvRing (full / empty mbarriers,
// no block barrier in the key loops):
//   prefix: cp.async of the raw bytes (fp8 codes; nvfp4 codes and block scales) into a raw ring of
//     kRawStages stages, then each thread dequantizes exactly the bytes it copied into the ring (so
//     no thread waits for another's copy: the mbarriers stay the only synchronization). The
//     conversion of tile i + 1's K and tile i's V runs once S_i = Q K_i is done, beside this
//     warpgroup's O += P_{i-1} V_{i-1} on the tensor cores;
//   own: cp.async straight into the ring, as the prefill kernel loads.
// Each thread's units (16 raw bytes: 16 fp8 or 32 nvfp4 elements, with the nvfp4 block scales in a
// 4-byte slot of its own) are picked so that a warp's global reads are whole rows and its swizzled
// bf16 stores hit distinct banks per quarter warp (Fp8Units, Nvfp4Units).
//
// Shared memory (1024-byte aligned):
//   Q         [2 warpgroups][2 halves of 64 dims][64 rows][128 B]          32 KiB
//   ring      WgmmaKvRing<2>: [2][K tile], [2][V tile], mbarriers           128 KiB
//   raw ring  [kRawStages][K raw part | V raw part]                        fp8 part 16 KiB,
//             a part: [units][256 threads][16 B] codes (+ nvfp4 scales      nvfp4 part 8 + 2 KiB
//             [2 units][256 threads][4 B])
// Grid: (num_q_heads / heads_per_block, num_seqs, query tiles), tiles in reverse order. Unsplit
// prefixes of fp8, nvfp4 and k8v4 caches only: a split call, and the bf16 and f32 caches, run the
// mma.sync kernel. (A bf16 cache through this kernel — cp.async from the pages straight into a
// 3-stage ring, prefix and own tiles in one loop — was correct but slower than mma.sync: H200,
// 2026-12-04, bench_prefill_attention --extend, d128 32 / 8 heads, 8K + 2K 275 against 328 TFLOP/s,
// 32K + 2K 282 / 338, 32K + 8K 295 / 342, with 64 bytes spilled; not built.)
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "backend/cuda/extend_attention.h"
#include "backend/cuda/extend_merge.cuh"      // extend_takes
#include "backend/cuda/extend_tile_load.cuh"  // e4m3x8_to_bf16x8, e2m1x8_to_bf16x8, hadamard_fragment_row
#include "backend/cuda/prefill_attention.h"
#include "backend/cuda/prefill_mma.cuh"
#include "backend/cuda/wgmma_attention.cuh"
#include "quant/kv_format.h"

namespace nibble::cuda::detail {

// Bytes of one part (K or V) of a raw stage in format F.
__host__ __device__ constexpr int wgmma_raw_part_bytes(quant::ElemFormat f) {
  return f == quant::ElemFormat::kFP8 ? 128 * 128 : f == quant::ElemFormat::kNVFP4 ? 128 * 64 + 512 * 4 : 0;
}

template <quant::ElemFormat kK, quant::ElemFormat kV>
struct WgmmaExtendTile {
  static constexpr int kThreads = 256;
  static_assert(wgmma_raw_part_bytes(kK) > 0 && wgmma_raw_part_bytes(kV) > 0, "K and V each fp8 or nvfp4");
  using Ring = WgmmaKvRing<2>;
  static constexpr uint32_t kQBytes = 2 * WgmmaAttention::kQGroupBytes;
  static constexpr int kRawStageBytes = wgmma_raw_part_bytes(kK) + wgmma_raw_part_bytes(kV);
  static constexpr int kMaxSmem = 227 * 1024;
  static constexpr int bytes_with(int raw_stages) {
    return static_cast<int>(kQBytes + Ring::kBytes + Ring::kBarrierBytes) + raw_stages * kRawStageBytes + 1024;
  }
  // As many raw stages as fit, up to 3 (fp8 2, nvfp4 3, k8v4 2).
  static constexpr int kRawStages = bytes_with(3) <= kMaxSmem ? 3 : 2;
  static constexpr int kSmemBytes = bytes_with(kRawStages);
  static_assert(kSmemBytes <= kMaxSmem, "shared memory");
};

// A thread's units of an fp8 part: unit it (0..3) is row 4 (warp + 8 it) + ((lane / 8) % 2) * 2 +
// (lane / 4) % 2, bytes 16 c .. of it with c = 4 (lane / 16) + lane % 4 (elements 16 c .., bf16 pieces
// 2c, 2c + 1). A warp reads 4 whole rows; a quarter warp writes two rows of opposite swizzle parity,
// so its eight 16-byte stores land on distinct banks.
struct Fp8Units {
  static constexpr int kUnits = 4;
  static __device__ int row(int it, int warp, int lane) { return 4 * (warp + 8 * it) + 2 * ((lane / 8) % 2) + (lane / 4) % 2; }
  static __device__ int chunk(int lane) { return 4 * (lane / 16) + lane % 4; }
};
// An nvfp4 part: unit it (0..1) is row 8 (warp + 8 it) + 4 ((lane / 8) % 2) + (lane / 2) % 4, code
// bytes 16 c .. with c = 2 (lane / 16) + lane % 2 (elements 32 c .., pieces 4c .. 4c + 3), and the
// 4 scale bytes 4 (c / 2) .. of its row (scales 2c, 2c + 1 at bytes 2 (c % 2), + 1 of them).
struct Nvfp4Units {
  static constexpr int kUnits = 2;
  static __device__ int row(int it, int warp, int lane) { return 8 * (warp + 8 * it) + 4 * ((lane / 8) % 2) + (lane / 2) % 4; }
  static __device__ int chunk(int lane) { return 2 * (lane / 16) + lane % 2; }
};
template <quant::ElemFormat F>
using UnitsOf = std::conditional_t<F == quant::ElemFormat::kFP8, Fp8Units, Nvfp4Units>;

// cp.async of this thread's raw units of one part (format F) of the prefix tile at key0 into `raw`.
template <quant::ElemFormat F>
__device__ __forceinline__ void copy_raw_units(uint32_t raw, const cache::KvPartLayout& part, const uint8_t* pool,
                                               int64_t page_bytes, const int32_t* page_table, int page_size,
                                               int kv_head, int key0, int end, int tid) {
  using U = UnitsOf<F>;
  const int warp = tid / 32, lane = tid % 32, c = U::chunk(lane);
  constexpr int kRowBytes = F == quant::ElemFormat::kFP8 ? 128 : 64;
#pragma unroll
  for (int it = 0; it < U::kUnits; ++it) {
    const int pos = key0 + U::row(it, warp, lane);
    const bool valid = pos < end;
    const int at = valid ? pos : end - 1;  // a mapped address even when nothing is read
    const uint8_t* page = pool + static_cast<int64_t>(page_table[at / page_size]) * page_bytes;
    const int64_t vector = static_cast<int64_t>(kv_head) * page_size + at % page_size;
    const uint32_t slot = it * 256 + tid;
    cp_async_16(raw + 16 * slot, page + part.data_offset + vector * kRowBytes + 16 * c, valid);
    if constexpr (F == quant::ElemFormat::kNVFP4) {
      cp_async_small<4>(raw + 128 * 64 + 4 * slot, page + part.scale_offset + vector * 8 + 4 * (c / 2), valid);
    }
  }
}

// This thread's raw units of one part (format F, copied by copy_raw_units) -> bf16 pieces of `tile`.
template <quant::ElemFormat F>
__device__ __forceinline__ void convert_raw_units(uint32_t tile, const unsigned char* raw, int tid) {
  using U = UnitsOf<F>;
  const int warp = tid / 32, lane = tid % 32, c = U::chunk(lane);
#pragma unroll
  for (int it = 0; it < U::kUnits; ++it) {
    const int r = U::row(it, warp, lane);
    const int slot = it * 256 + tid;
    const uint4 w = *reinterpret_cast<const uint4*>(raw + 16 * slot);
    uint32_t out[4][4];
    int pieces;
    if constexpr (F == quant::ElemFormat::kFP8) {
      e4m3x8_to_bf16x8(make_uint2(w.x, w.y), out[0]);
      e4m3x8_to_bf16x8(make_uint2(w.z, w.w), out[1]);
      pieces = 2;
    } else {
      const uint32_t scales = *reinterpret_cast<const uint32_t*>(raw + 128 * 64 + 4 * slot) >> (16 * (c % 2));
      e2m1x8_to_bf16x8(w.x, scales & 0xFFu, out[0]);
      e2m1x8_to_bf16x8(w.y, scales & 0xFFu, out[1]);
      e2m1x8_to_bf16x8(w.z, (scales >> 8) & 0xFFu, out[2]);
      e2m1x8_to_bf16x8(w.w, (scales >> 8) & 0xFFu, out[3]);
      pieces = 4;
    }
#pragma unroll
    for (int k = 0; k < (F == quant::ElemFormat::kFP8 ? 2 : 4); ++k) {
      const int piece = pieces * c + k;
      asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(
                       tile + wgmma_piece_offset(r, piece, WgmmaAttention::kHalfBytes)),
                   "r"(out[k][0]), "r"(out[k][1]), "r"(out[k][2]), "r"(out[k][3])
                   : "memory");
    }
  }
}

template <quant::ElemFormat kK, quant::ElemFormat kV>
__global__ void __launch_bounds__(256, 1)
    extend_attention_wgmma_kernel(ExtendAttentionParams p, const __nv_bfloat16* __restrict__ own_kv,
                                  int heads_per_block) {
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
  __trap();  // another architecture's copy: wgmma is sm_90a's alone
#else
  using T = WgmmaExtendTile<kK, kV>;
  using A = WgmmaAttention;
  using Ring = typename T::Ring;
  constexpr int D = A::kD;
  constexpr int kKeys = A::kKeys;
  extern __shared__ __align__(1024) unsigned char wgmma_extend_smem[];
  const uint32_t smem = (smem_address(wgmma_extend_smem) + 1023u) & ~1023u;
  unsigned char* const smem_ptr = wgmma_extend_smem + (smem - smem_address(wgmma_extend_smem));
  const Ring ring{smem + T::kQBytes, smem + T::kQBytes + Ring::kBytes + T::kRawStages * T::kRawStageBytes};
  const uint32_t raw_ring = smem + T::kQBytes + Ring::kBytes;

  const int64_t seq = blockIdx.y;
  const int32_t* info = p.seq_info + seq * kSeqInfoFields;
  const int64_t row0 = info[0];
  const int num_new = info[1], cached_len = info[2];
  if (!extend_takes(info, p.include_prefill)) return;  // decode / prefill: not ours
  const int rows_q = 128 / heads_per_block;            // new tokens per block
  const int q0 = static_cast<int>(gridDim.z - 1 - blockIdx.z) * rows_q;
  if (q0 >= num_new) return;

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int wg = warp / 4, g = lane / 4, t = lane % 4;
  const int group = static_cast<int>(p.num_q_heads / p.num_kv_heads);
  const int64_t head = static_cast<int64_t>(blockIdx.x) * heads_per_block + (heads_per_block == 2 ? wg : 0);
  const int kv_head = static_cast<int>(blockIdx.x) * heads_per_block / group;
  const int wg_row0 = q0 + (heads_per_block == 2 ? 0 : 64 * wg);  // this warpgroup's rows
  const int warp_row0 = wg_row0 + 16 * (warp % 4);
  const int64_t q_cols = p.num_q_heads * D, kv_cols = p.num_kv_heads * D;
  const uint32_t q_rows = smem + wg * A::kQGroupBytes;
  const int n_prefix = (cached_len + kKeys - 1) / kKeys;
  const bool rotated = n_prefix > 0 && p.rotation == quant::Rotation::kHadamard;

  // This warp's 16 Q rows -> bf16 into the warpgroup's swizzled rows (rows past the sequence zero),
  // H q first where `rotate`: each lane holds rows g and g + 8 as the accumulator does (columns
  // 8n + 2t, + 1), hadamard_fragment_row's layout.
  const auto load_q = [&](bool rotate) {
    const float* q_base = p.q + (row0 + warp_row0) * q_cols + head * D;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = g + 8 * r;
      const bool valid = warp_row0 + row < num_new;
      float x[D / 8][2];
#pragma unroll
      for (int n = 0; n < D / 8; ++n) {
        float2 v = make_float2(0.0f, 0.0f);
        if (valid) v = *reinterpret_cast<const float2*>(q_base + row * q_cols + 8 * n + 2 * t);
        x[n][0] = v.x, x[n][1] = v.y;
      }
      if (rotate) hadamard_fragment_row<D>(x, t);
#pragma unroll
      for (int n = 0; n < D / 8; ++n) {
        const uint32_t at = q_rows + wgmma_piece_offset(16 * (warp % 4) + row, n, A::kQGroupBytes / 2) + 4 * t;
        asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(at), "r"(pack_bf16x2(x[n][0], x[n][1])) : "memory");
      }
    }
    fence_proxy_async_smem();  // for the wgmma reads
  };
  load_q(rotated);
  if (tid == 0) ring.init(T::kThreads);
  __syncthreads();  // Q rows and mbarriers

  float o[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) o[i] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  constexpr float kLog2e = 1.4426950408889634f;
  const float scale_log2 = p.softmax_scale * kLog2e;
  uint32_t pa[8][4];  // P of the tile whose P V is next

  // One key tile (ring index x; P V of x - 1 first unless `first`) against this warpgroup's rows:
  // S = Q K^T, then O += P V of the previous tile; `beside()` runs while the tensor cores work on
  // both; then the mask (mask(s)), the online softmax at `scale`, O rescaled, P into pa.
  const auto attend = [&](int x, bool first, float scale, auto&& beside, auto&& mask) {
    float s[64];
    ring.wait_k_full(x);
    wgmma_issue_qk(s, q_rows, ring.k_stage(x));
    if (!first) {
      ring.wait_v_full(x - 1);
      wgmma_issue_pv(o, pa, ring.v_stage(x - 1));
    }
    if (!first) {
      wgmma_wait<1>();  // S done; P V may still run
    } else {
      wgmma_wait<0>();
    }
    beside();
    wgmma_fence_operands(s);
    if (lane == 0) mbarrier_arrive(ring.empty_k(x));
    mask(s);
    float correction[2];
    wgmma_softmax(s, m, l, correction, scale);
    wgmma_wait<0>();
    wgmma_fence_operands(o);
    if (!first && lane == 0) mbarrier_arrive(ring.empty_v(x - 1));
    wgmma_rescale_pack(o, correction, s, pa);
  };
  // The last tile's P V (ring index x): the phase's end.
  const auto finish = [&](int x) {
    ring.wait_v_full(x);
    wgmma_issue_pv(o, pa, ring.v_stage(x));
    wgmma_wait<0>();
    wgmma_fence_operands(o);
    if (lane == 0) mbarrier_arrive(ring.empty_v(x));
  };
  // Tiles 0 .. n - 1 at ring indices base + j, copied straight into the ring (load_k(j, stage),
  // load_v(j, stage)): iteration j copies K(j + S - 1) and V(j + S - 2) once their stages are free,
  // and makes K(j + S - 2) and V(j + S - 3), copied one iteration earlier, full (S = kStages); the
  // extra iteration at j = n makes the last V full (S = 2).
  const auto run_direct = [&](int base, int n, auto&& load_k, auto&& load_v, auto&& attend_tile) {
    constexpr int S = Ring::kStages;
    for (int j = -(S - 1); j <= n; ++j) {
      const int kt = j + S - 1, vt = j + S - 2;
      if (kt < n) {
        ring.wait_k_free(base + kt);
        load_k(kt, ring.k_stage(base + kt));
      }
      if (vt >= 0 && vt < n) {
        ring.wait_v_free(base + vt);
        load_v(vt, ring.v_stage(base + vt));
      }
      cp_async_commit();
      cp_async_wait<1>();
      fence_proxy_async_smem();
      if (kt - 1 >= 0 && kt - 1 < n) mbarrier_arrive(ring.full_k(base + kt - 1));
      if (vt - 1 >= 0 && vt - 1 < n) mbarrier_arrive(ring.full_v(base + vt - 1));
      if (j >= 0 && j < n) attend_tile(j);
    }
    cp_async_wait<0>();
    if (n > 0) finish(base + n - 1);
  };

  const int32_t* page_table = p.page_tables + seq * p.max_pages_per_seq;
  const int page_size = static_cast<int>(p.k_layout.page_size);
  // Own tile j (keys [0, key_end) of the chunk, from the bf16 copy), K or V: the same pieces.
  const int key_end = min(num_new, q0 + rows_q);
  const int n_own = (key_end + kKeys - 1) / kKeys;
  const __nv_bfloat16* own_k = own_kv + row0 * kv_cols + kv_head * D;
  const __nv_bfloat16* own_v = own_k + p.total_tokens * kv_cols;
  const auto load_own = [&](const __nv_bfloat16* src_base, int j, uint32_t stage) {
#pragma unroll
    for (int it = 0; it < 8; ++it) {
      const int u = tid + it * 256;
      const int r = u / 16, c = u % 16;
      const int key = j * kKeys + r;
      const bool valid = key < key_end;
      cp_async_16(stage + wgmma_piece_offset(r, c, A::kHalfBytes), src_base + (valid ? key : 0) * kv_cols + 8 * c,
                  valid);
    }
  };
  const float prefix_scale = scale_log2 * p.k_global_scale;  // the tiles hold K / g_k (fp8, nvfp4)
  // Prefix tile i: keys at or past cached_len masked.
  const auto attend_prefix = [&](int i, auto&& beside) {
    attend(i, i == 0, prefix_scale, beside, [&](float(&s)[64]) {
      if ((i + 1) * kKeys > cached_len) wgmma_length_mask(s, cached_len - i * kKeys, t);
    });
  };
  // Own tile j at ring index x: causal.
  const auto attend_own = [&](int x, int j) {
    const int key0 = j * kKeys;
    attend(x, j == 0, scale_log2, [] {}, [&](float(&s)[64]) {
      if (key0 + kKeys - 1 > warp_row0) wgmma_causal_mask(s, key0, warp_row0 + g, t);
    });
  };
  // The switch between the phases, once the prefix's products are done: O *= g_v, O = H O where the
  // cache is rotated, and the warpgroup's Q rows reloaded unrotated.
  const auto switch_phase = [&] {
    const float gv = p.v_global_scale;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float x[D / 8][2];
#pragma unroll
      for (int n = 0; n < D / 8; ++n) x[n][0] = o[4 * n + 2 * r] * gv, x[n][1] = o[4 * n + 2 * r + 1] * gv;
      if (rotated) hadamard_fragment_row<D>(x, t);
#pragma unroll
      for (int n = 0; n < D / 8; ++n) o[4 * n + 2 * r] = x[n][0], o[4 * n + 2 * r + 1] = x[n][1];
    }
    if (rotated) {
      // Every warp of the warpgroup has waited on its products reading the Q rows: rewrite them.
      asm volatile("bar.sync %0, 128;\n" ::"r"(1 + wg) : "memory");
      load_q(false);
      asm volatile("bar.sync %0, 128;\n" ::"r"(1 + wg) : "memory");
    }
  };

  // ---- the prefix, converted (the header) ----------------------------------------------------------
  if (n_prefix > 0) {
    constexpr int R = T::kRawStages;
    const auto raw_k = [&](int i) { return raw_ring + (i % R) * T::kRawStageBytes; };
    const auto raw_v = [&](int i) { return raw_k(i) + wgmma_raw_part_bytes(kK); };
    const auto raw_ptr = [&](uint32_t at) { return smem_ptr + (at - smem); };
    // Raw group j: K(j + R) and V(j + R - 1) where they exist (committed even when empty).
    const auto issue_raw = [&](int j) {
      if (j + R < n_prefix) {
        copy_raw_units<kK>(raw_k(j + R), p.k_layout, p.pool, p.page_bytes, page_table, page_size, kv_head,
                           (j + R) * kKeys, cached_len, tid);
      }
      if (j + R - 1 >= 0 && j + R - 1 < n_prefix) {
        copy_raw_units<kV>(raw_v(j + R - 1), p.v_layout, p.pool, p.page_bytes, page_table, page_size, kv_head,
                           (j + R - 1) * kKeys, cached_len, tid);
      }
      cp_async_commit();
    };
    const auto convert_k = [&](int i) {
      ring.wait_k_free(i);
      convert_raw_units<kK>(ring.k_stage(i), raw_ptr(raw_k(i)), tid);
    };
    const auto convert_v = [&](int i) {
      ring.wait_v_free(i);
      convert_raw_units<kV>(ring.v_stage(i), raw_ptr(raw_v(i)), tid);
    };
    for (int j = -R; j < 0; ++j) issue_raw(j);
    cp_async_wait<R - 1>();  // group -R: K(0)
    convert_k(0);
    fence_proxy_async_smem();
    mbarrier_arrive(ring.full_k(0));
    for (int i = 0; i < n_prefix; ++i) {
      // Once S_i is done, beside P_{i-1} V_{i-1}: K(i + 1) and V(i) (raw group i + 1 - R) into the
      // ring, then raw group i's copies. (Beside S_i too, before its wait, ptxas serialized the
      // products: C7514.)
      attend_prefix(i, [&] {
        cp_async_wait<R - 2>();
        if (i + 1 < n_prefix) convert_k(i + 1);
        convert_v(i);
        fence_proxy_async_smem();
        if (i + 1 < n_prefix) mbarrier_arrive(ring.full_k(i + 1));
        mbarrier_arrive(ring.full_v(i));
        issue_raw(i);
      });
    }
    cp_async_wait<0>();
    finish(n_prefix - 1);
    switch_phase();
  }
  // ---- the own tiles ----------------------------------------------------------------------------------
  run_direct(
      n_prefix, n_own, [&](int j, uint32_t stage) { load_own(own_k, j, stage); },
      [&](int j, uint32_t stage) { load_own(own_v, j, stage); }, [&](int j) { attend_own(n_prefix + j, j); });

  wgmma_store_rows(o, l, p.out + row0 * q_cols + head * D, q_cols, warp_row0 + g, num_new, t);
#endif
}

}  // namespace nibble::cuda::detail
