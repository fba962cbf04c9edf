#pragma once
// The tensor-core extend kernel (extend_attention.h states the contract, precision and rotation).
//
// Block: kWarps warps, `heads_per_block` query heads of one GQA group (a divisor of kWarps), one
// query tile of one sequence: kWarps / heads_per_block warps per head, each owning kRowsWarp
// consecutive new tokens of its head (the prefill kernel's warp layout per head, so its causal mask,
// softmax and MMA pieces apply unchanged). Every key tile is shared by all the block's heads.
//
// Two phases. The prefix tiles 0 .. n_prefix - 1 first; kPrefix (ExtendPrefix) picks how they run:
//   kStaged (fp8 / nvfp4 / k8v4): two raw and two bf16 stages,
//     wait raw(i + 1); barrier; cp.async raw(i + 2); dequantize raw(i + 1); S, softmax, O of tile i,
//   one barrier per tile, each warp's dequantization beside the other warps' MMAs;
//   kBf16Direct (bf16): straight into three bf16 stages (the third in the raw region), as the
//     prefill kernel loads its tiles, no conversion pass;
//   kSingleStage (the f32 cache): one raw staging buffer and one bf16 tile, wait raw(i); barrier;
//     round raw(i) -> bf16 tile; barrier; cp.async raw(i + 1); S, softmax, O;
// each thread's page-table entry read a tile ahead of its copy in the staged modes.
// Then the chunk's own tiles up to the block's last query, causally: their rows come from the
// launch's bf16 copy of the chunk's K/V (kv_workspace) straight into three bf16 stages
// (ExtendSmem::stage3, free in every mode by then), one barrier per tile, no conversion.
// Between the phases each warp finishes the prefix phase in registers: O *= g_v, O = H O (rotated
// cache), q reloaded unrotated, and the softmax scale loses g_k.
//
// Grid: (num_q_heads / heads_per_block, num_seqs, query tiles × prefix parts), tiles in reverse order
// (the longest own phase first). Prefix parts (kSplit; extend_split.h, extend_merge.cuh): a block
// runs one contiguous part of its tile's prefix tiles and writes its (O, m, l) to a record; the last
// part also runs the own tiles; the merge kernel combines the parts.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/extend_attention.h"
#include "backend/cuda/extend_merge.cuh"
#include "backend/cuda/extend_tile_load.cuh"
#include "backend/cuda/prefill_attention.h"
#include "backend/cuda/prefill_mma.cuh"
#include "backend/cuda/prefill_tile.cuh"

namespace nibble::cuda::detail {

// kSplit: the build for split prefixes (extend_merge.cuh; `split_count` parts, > 1). Without it the
// split code folds away (splits = 1), so the unsplit build is the kernel as it was before the split:
// with the split code in one build, ptxas spilled 48 -> 72 bytes at head_dim 128 and a bf16 prefix
// ran 2-3.5% slower (H200, 2026-12-03, bench_prefill_attention --extend; PERFORMANCE.md, thirty-fifth
// round).
template <int D, typename T, ExtendPrefix kPrefix, bool kSplit>
__global__ void __launch_bounds__(T::kThreads, T::kMinBlocks)
    extend_attention_kernel(ExtendAttentionParams p, const __nv_bfloat16* __restrict__ own_kv, int heads_per_block,
                            int split_count) {
  using S = ExtendSmem<D, T, kPrefix>;
  const int splits = kSplit ? split_count : 1;
  constexpr int kKeys = T::kKeys;
  constexpr int kM = T::kM;
  constexpr int kD16 = T::kD16;
  static_assert(T::kLazy, "the phase-dependent softmax scale needs the log2-domain running max");
  extern __shared__ __align__(128) unsigned char smem_raw[];
  const uint32_t smem = smem_address(smem_raw);
  if (smem % 128 != 0) __trap();  // fragment_address needs 128-byte aligned tiles

  const int64_t seq = blockIdx.y;
  const int32_t* info = p.seq_info + seq * kSeqInfoFields;
  const int64_t row0 = info[0];
  const int num_new = info[1], cached_len = info[2];
  if (!extend_takes(info, p.include_prefill)) return;  // decode / prefill: not ours
  const int warps_per_head = T::kWarps / heads_per_block;
  const int rows_q = T::kRowsWarp * warps_per_head;  // new tokens per block
  // z = query tile (reverse order: the longest own phase first) × prefix part (extend_merge.cuh).
  const int q0 = static_cast<int>(gridDim.z / splits - 1 - blockIdx.z / splits) * rows_q;
  if (q0 >= num_new) return;
  // The last part also takes the own tiles (read from blockIdx where needed: not kept live).
  const auto last_part = [&] { return static_cast<int>(blockIdx.z % splits) == splits - 1; };
  const int n_prefix_all = (cached_len + kKeys - 1) / kKeys;
  // (The unsplit build spells its one part out: extend_part's min(0, n) does not fold to 0.)
  const ExtendPart part = kSplit ? extend_part(n_prefix_all, static_cast<int>(blockIdx.z % splits), splits)
                                 : ExtendPart{0, n_prefix_all};
  if (!last_part() && part.begin == part.end) return;  // a short prefix: the merge leaves this part out

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const int group = static_cast<int>(p.num_q_heads / p.num_kv_heads);
  const int64_t head = static_cast<int64_t>(blockIdx.x) * heads_per_block + warp / warps_per_head;
  const int kv_head = static_cast<int>(blockIdx.x) * heads_per_block / group;
  const int warp_row0 = q0 + (warp % warps_per_head) * T::kRowsWarp;  // among the sequence's new tokens
  const int warp_last_row = warp_row0 + T::kRowsWarp - 1;
  const bool warp_active = warp_row0 < num_new;
  const int64_t q_cols = p.num_q_heads * D, kv_cols = p.num_kv_heads * D;
  const bool has_prefix = part.begin < part.end;
  const bool rotated = has_prefix && p.rotation == quant::Rotation::kHadamard;

  // Q fragments [kM][kD16][4] bf16x2 in registers, or this warp's rows [kRowsWarp][D] bf16 swizzled
  // in shared memory; rows past the sequence are zero. `rotate`: H q (the prefix phase of a rotated
  // cache).
  uint32_t qf[T::kQRegsM][T::kQRegsD][4];
  const uint32_t q_warp = smem + S::kQ + warp * T::kRowsWarp * D * 2;
  const auto load_q = [&](bool rotate) {
    if constexpr (T::kQInSmem) __syncwarp();  // a reload: every lane's ldmatrix of the old rows is done
    const float* q_base = p.q + (row0 + warp_row0) * q_cols + head * D;
#pragma unroll
    for (int mi = 0; mi < kM; ++mi) {
#pragma unroll
      for (int rh = 0; rh < 2; ++rh) {
        const int row = 16 * mi + g + 8 * rh;
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
          const uint32_t packed = pack_bf16x2(x[n][0], x[n][1]);
          if constexpr (T::kQInSmem) {
            asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(q_warp + swizzled_bytes<D>(row, n) + 4 * t), "r"(packed)
                         : "memory");
          } else {
            qf[mi][n / 2][rh + 2 * (n % 2)] = packed;
          }
        }
      }
    }
    if constexpr (T::kQInSmem) __syncwarp();
  };
  load_q(rotated);

  float o[kM][2 * kD16][4];
#pragma unroll
  for (int mi = 0; mi < kM; ++mi) {
#pragma unroll
    for (int n = 0; n < 2 * kD16; ++n) o[mi][n][0] = o[mi][n][1] = o[mi][n][2] = o[mi][n][3] = 0.0f;
  }
  float m[kM][2], l[kM][2];  // log2-domain reference max, partial sums (prefill_tile.cuh, softmax_lazy)
#pragma unroll
  for (int mi = 0; mi < kM; ++mi) m[mi][0] = m[mi][1] = -INFINITY, l[mi][0] = l[mi][1] = 0.0f;
  constexpr float kLog2e = 1.4426950408889634f;
  const float scale_log2 = p.softmax_scale * kLog2e;
  const bool k_scaled = p.k_layout.format == quant::ElemFormat::kFP8 || p.k_layout.format == quant::ElemFormat::kNVFP4;
  const bool v_scaled = p.v_layout.format == quant::ElemFormat::kFP8 || p.v_layout.format == quant::ElemFormat::kNVFP4;
  float phase_scale = k_scaled ? scale_log2 * p.k_global_scale : scale_log2;

  const int key_end = num_new < q0 + rows_q ? num_new : q0 + rows_q;  // the block's causal bound
  const int n_prefix = part.end - part.begin;  // this part's prefix tiles: part.begin + i, i < n_prefix
  const int key_first = part.begin * kKeys;    // their first key
  const int n_own = (key_end + kKeys - 1) / kKeys;  // >= 1: key_end > q0 >= 0
  const int32_t* page_table = p.page_tables + seq * p.max_pages_per_seq;
  const int page_size = static_cast<int>(p.k_layout.page_size);

  const uint32_t k_lane = ldmatrix_lane_base<D>((lane / 16) * 8 + lane % 8, (lane / 8) % 2, lane);
  const uint32_t v_lane = ldmatrix_lane_base<D>(((lane / 8) % 2) * 8 + lane % 8, lane / 16, lane);

  // One key tile (K at `tile`, V kTileBytes on) against this warp's rows: S = Q K^T, masked (a
  // prefix tile by the prefix's length, an own tile causally), lazy online softmax, O += P V.
  const auto attend = [&](uint32_t tile, bool prefix, int key0) {
    float s[kM][T::kN][4];
    qk_tile<D, T>(s, qf, q_warp, tile, k_lane, v_lane);
    if (prefix) {
      if (key0 + kKeys > cached_len) length_mask<T>(s, cached_len - key0, t);
    } else {
      causal_mask<T>(s, key0, warp_row0, g, t);
    }
    softmax_lazy<T>(s, m, l, o, phase_scale);
    uint32_t pa[kKeys / 16][kM][4];
    pack_p<T>(pa, s);
    pv_tile<D, T>(o, pa, tile + S::kTileBytes, v_lane);
  };
  // Tiles 0 .. n - 1 through three stages, one barrier per tile: issue(i) copies tile i into its
  // stage; at tile i, its wait, the barrier (tile i visible, every warp done with tile i - 1, whose
  // stage tile i + 2 takes), tile i + 2's copy, then body(i).
  const auto three_stages = [&](int n, auto&& issue, auto&& body) {
    if (n > 0) issue(0);
    if (n > 1) issue(1);
    for (int i = 0; i < n; ++i) {
      if (i + 1 < n) {
        cp_async_wait<1>();  // tile i; tile i + 1 may be in flight
      } else {
        cp_async_wait<0>();
      }
      __syncthreads();
      if (i + 2 < n) issue(i + 2);
      body(i);
    }
  };

  if constexpr (extend_prefix_staged(kPrefix)) {
    // The page of this thread's row in the next prefix tile to copy, read a tile ahead (each copy
    // reads the one after it): the page-table load is off the copy's path.
    int next_page = n_prefix > 0 ? prefix_row_page<T>(page_table, page_size, key_first, cached_len) : 0;
    const auto take_page = [&](int i) {  // the page of tile i, and the read of tile i + 1's
      const int page = next_page;
      if (i + 1 < n_prefix) {
        next_page = prefix_row_page<T>(page_table, page_size, key_first + (i + 1) * kKeys, cached_len);
      }
      return page;
    };
    if constexpr (kPrefix == ExtendPrefix::kBf16Direct) {
      // The rows are copied straight into three bf16 stages (the third in the raw region, unused
      // here), as the prefill kernel copies its tiles: no conversion pass. H200, 2026-12-03,
      // bench_prefill_attention --extend, TFLOP/s, through the raw staging -> this path (with the
      // page read-ahead): 32K + 8K d128 281.6 -> 318.0, d64 205.7 -> 266.8 (PERFORMANCE.md,
      // thirty-third round; as a branch of the staged kernel it had cost the other formats 0-2.5%).
      const auto issue_direct = [&](int i) {
        const uint32_t tile = smem + S::stage3(i);
        copy_prefix_tile<D, T, true>(tile, tile + S::kTileBytes, 0, 0, p.k_layout, p.v_layout, p.pool, p.page_bytes,
                                     take_page(i), page_size, kv_head, key_first + i * kKeys, cached_len);
        cp_async_commit();
      };
      three_stages(n_prefix, issue_direct, [&](int i) {
        if (warp_active) attend(smem + S::stage3(i), true, key_first + i * kKeys);
      });
    } else {
      const auto issue_prefix = [&](int i) {  // raw(i) into raw stage i % 2
        const uint32_t raw = smem + S::prefix_raw(i % 2), scales = smem + S::scales(i % 2);
        copy_prefix_tile<D, T>(raw, raw + S::kPrefixRawPartBytes, scales, scales + S::kScalePartBytes, p.k_layout,
                               p.v_layout, p.pool, p.page_bytes, take_page(i), page_size, kv_head,
                               key_first + i * kKeys, cached_len);
        cp_async_commit();
      };
      constexpr unsigned kFormats = format_bit(quant::ElemFormat::kFP8) | format_bit(quant::ElemFormat::kNVFP4);
      const auto convert_prefix = [&](int i) {  // raw(i) -> bf16 stage i % 2
        const int st = i % 2;
        convert_part<D, T, kFormats>(smem + S::tile(st), smem_raw + S::prefix_raw(st), smem_raw + S::scales(st),
                           p.k_layout.format);
        convert_part<D, T, kFormats>(smem + S::tile(st) + S::kTileBytes, smem_raw + S::prefix_raw(st) + S::kPrefixRawPartBytes,
                           smem_raw + S::scales(st) + S::kScalePartBytes, p.v_layout.format);
      };
      if (n_prefix > 0) {
        issue_prefix(0);
        if (n_prefix > 1) {
          issue_prefix(1);
          cp_async_wait<1>();
        } else {
          cp_async_wait<0>();
        }
        __syncthreads();  // raw(0) visible
        convert_prefix(0);
      }
      for (int i = 0; i < n_prefix; ++i) {
        cp_async_wait<0>();  // raw(i + 1), the one copy in flight
        // bf16 stage i % 2 (tile i) and raw(i + 1) visible; every warp is done with tile i - 1, so
        // its bf16 stage and raw(i)'s stage are free.
        __syncthreads();
        if (i + 2 < n_prefix) issue_prefix(i + 2);
        // kStagger (one block per SM: head_dim 128, and 256's 8-warp tile): each thread converts its
        // units of tile i + 1 before attending tile i in the block's first half of warps, after it
        // in the second:
        // warps w and w + kWarps / 2 share a scheduler, so one's conversion runs beside the other's
        // MMAs (all converting at once left the tensor pipe idle). The next barrier sees both
        // halves' writes. H200, 2026-12-03, bench_prefill_attention --extend --quick, TFLOP/s,
        // converting first -> staggered, d128 32K + 8K: fp8 272.2 -> 283.4, nvfp4 263.2 -> 267.5,
        // k8v4 266.6 -> 274.4 (8K + 2K alike). At head_dim 64 (two blocks per SM, whose warps
        // already drift apart) it lost 4-6% (nvfp4 192.4 -> 180.4) and spilled 12 bytes: not there.
        constexpr bool kStagger = T::kMinBlocks == 1;
        const bool convert_first = !kStagger || warp < T::kWarps / 2;
        if (convert_first && i + 1 < n_prefix) convert_prefix(i + 1);
        if (warp_active) attend(smem + S::tile(i % 2), true, key_first + i * kKeys);
        if (kStagger && !convert_first && i + 1 < n_prefix) convert_prefix(i + 1);
      }
    }
  } else {
    // The single-stage loop (the header): the f32 cache only.
    constexpr unsigned kFormats = format_bit(quant::ElemFormat::kF32);
    const uint32_t tile_k = smem, tile_v = smem + S::kTileBytes;
    const uint32_t raw_k = smem + S::kRaw, raw_v = raw_k + S::kRawPartBytes;
    const uint32_t scales_k = smem + S::kScales, scales_v = scales_k + S::kScalePartBytes;
    const auto issue = [&](int i) {
      copy_prefix_tile<D, T>(raw_k, raw_v, scales_k, scales_v, p.k_layout, p.v_layout, p.pool, p.page_bytes,
                             prefix_row_page<T>(page_table, page_size, key_first + i * kKeys, cached_len), page_size,
                             kv_head, key_first + i * kKeys, cached_len);
      cp_async_commit();
    };
    if (n_prefix > 0) issue(0);
    for (int i = 0; i < n_prefix; ++i) {
      cp_async_wait<0>();
      __syncthreads();  // raw(i) visible to all; every warp is done with the previous bf16 tile
      convert_part<D, T, kFormats>(tile_k, smem_raw + S::kRaw, smem_raw + S::kScales, p.k_layout.format);
      convert_part<D, T, kFormats>(tile_v, smem_raw + S::kRaw + S::kRawPartBytes,
                                   smem_raw + S::kScales + S::kScalePartBytes, p.v_layout.format);
      __syncthreads();  // the bf16 tile is visible; the staging buffer is free
      if (i + 1 < n_prefix) issue(i + 1);
      if (warp_active) attend(tile_k, true, key_first + i * kKeys);
    }
  }
  __syncthreads();  // every warp is done with the prefix's stages: the own tiles take them next

  // ---- the own tiles: the chunk's keys [0, key_end) of this KV head from the bf16 copy ----------------
  // Three bf16 stages (ExtendSmem::stage3). H200, 2026-12-03, bench_prefill_attention --extend:
  // docs/PERFORMANCE.md, thirty-fourth round (the f32 rows through the one staging buffer before).
  const int chunk = static_cast<int>(threadIdx.x) % T::kChunks;  // load_kv_tile's 16-byte chunk of a row
  const int64_t own_n = p.total_tokens * kv_cols;                 // V's offset in the copy
  const __nv_bfloat16* own_k = own_kv + row0 * kv_cols + kv_head * D + 8 * chunk;
  const __nv_bfloat16* own_v = own_k + own_n;
  const auto issue_own = [&](int j) {
    const uint32_t tile = smem + S::stage3(j);
    load_kv_tile<D, T>(tile, own_k, kv_cols, j * kKeys, key_end);
    load_kv_tile<D, T>(tile + S::kTileBytes, own_v, kv_cols, j * kKeys, key_end);
    cp_async_commit();
  };

  // This block's record when split (extend_merge.cuh), found where it is written (not kept live).
  // Everything from blockIdx and the arguments, so that nothing stays live for it through the loops.
  const auto record = [&] {
    const int tile = static_cast<int>(gridDim.z / splits - 1 - blockIdx.z / splits);  // forward order
    const int base = extend_tile_base(p, static_cast<int>(blockIdx.y), T::kRowsWarp * (T::kWarps / heads_per_block),
                                      static_cast<int>(threadIdx.x % 32));
    const int64_t index =
        ((static_cast<int64_t>(base) + tile) * gridDim.x + blockIdx.x) * splits + blockIdx.z % splits;
    return static_cast<float*>(p.split_workspace) + index * (static_cast<int64_t>(T::kRowsQ) * (D + 2));
  };

  // End of the prefix phase, in registers. Before the first own copies: issued first, their
  // addresses stayed live across the rotation and ptxas spilled 300 bytes at head_dim 128 (68 so).
  phase_scale = scale_log2;  // the own keys carry no global scale
  if (has_prefix) {          // block-uniform
#pragma unroll
    for (int mi = 0; mi < kM; ++mi) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float x[D / 8][2];
#pragma unroll
        for (int n = 0; n < D / 8; ++n) {
          x[n][0] = o[mi][n][2 * r] * (v_scaled ? p.v_global_scale : 1.0f);
          x[n][1] = o[mi][n][2 * r + 1] * (v_scaled ? p.v_global_scale : 1.0f);
        }
        if (rotated) hadamard_fragment_row<D>(x, t);
#pragma unroll
        for (int n = 0; n < D / 8; ++n) o[mi][n][2 * r] = x[n][0], o[mi][n][2 * r + 1] = x[n][1];
      }
    }
    // A part before the last ends here, its (O, m, l) in its record.
    if (kSplit && !last_part()) {
      if (warp_active) store_partial_rows<D, T>(o, m, l, record(), warp, warp_row0, num_new, g, t);
      return;
    }
    if (rotated) load_q(false);
  }

  three_stages(n_own, issue_own, [&](int j) {
    const int key0 = j * kKeys;
    if (warp_active && key0 <= warp_last_row) attend(smem + S::stage3(j), false, key0);
  });

  // Normalize and store rows g, g + 8 of each row block (or, split, this last part's record).
  if (!warp_active) return;
  if (kSplit) {
    store_partial_rows<D, T>(o, m, l, record(), warp, warp_row0, num_new, g, t);
  } else {
    store_normalized_rows<D, T>(o, l, p.out + row0 * q_cols + head * D, q_cols, warp_row0, num_new, g, t);
  }
}

}  // namespace nibble::cuda::detail
