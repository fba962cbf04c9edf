#pragma once
// The tensor-core decode kernel's copy pipeline (decode_attention_tc.cuh): one 16-token chunk of a
// page (K data, K scales, V data, V scales) into a shared-memory stage by cp.async, with the XOR
// swizzles that keep the kernel's fragment reads free of bank conflicts, and where a warp's chunks
// lie in the page table (ChunkPageBatches). T is the kernel's TcTraits (decode_tc_traits.cuh: row
// and region sizes of a stage).
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/decode_attention.cuh"  // cp_async16
#include "backend/cuda/decode_kernel_args.h"  // kTcChunk

namespace nibble::cuda::detail {

// ---- swizzles: logical byte offset inside a data region -> physical offset ---------------------------
// K reads: thread (g, c) reads 16-byte pieces 4j + c of row g; rows g, g+1 share a phase, so rows of
// >= 128 bytes flip piece bit 2 on odd rows.
template <int kRow>
__device__ __forceinline__ int k_swz(int b) {
  if constexpr (kRow >= 128) {
    return b ^ (((b / kRow) & 1) << 6);
  } else {
    return b;
  }
}
// V reads: thread (g, c) reads dims [g·D/8, (g+1)·D/8) of rows 2c (+1, +8, +9): rows 2 apart share a
// phase, so the XOR depends on (row >> 1) & 3, spread around the piece bit that separates g, g+1.
template <int kRow>
__device__ __forceinline__ int v_swz(int b) {
  int f;
  if constexpr (kRow >= 128) {
    constexpr int kPiecesPerG = kRow / 128;
    constexpr int kBit = kPiecesPerG == 1 ? 0 : (kPiecesPerG == 2 ? 1 : 2);
    const int t = ((b / kRow) >> 1) & 3;
    f = (t & ((1 << kBit) - 1)) | ((t >> kBit) << (kBit + 1));
  } else if constexpr (kRow == 64) {
    f = 2 * ((b >> 7) & 3);
  } else {
    f = 2 * ((b >> 7) & 1);
  }
  return b ^ (f << 4);
}

__device__ __forceinline__ void cp_async16_zfill(void* smem_dst, const void* global_src, int src_bytes) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem_dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(global_src), "r"(src_bytes));
}

// Copies one region of a 16-token chunk (rows contiguous in the page) into a stage, one warp.
// kSwz: 0 none (scales), 1 K, 2 V. kFull: all 16 tokens are valid (every chunk but a sequence's
// last): plain 16-byte copies, no size arithmetic. Otherwise bytes of tokens past n_valid are
// zero-filled (cp.async src-size), data and scales alike, so no byte past a sequence's end reaches
// the arithmetic.
template <int kRow, int kSwz, bool kFull>
__device__ __forceinline__ void copy_region(uint8_t* dst, const uint8_t* src, int n_valid, int lane) {
  const uint8_t* src_lane = src + 16 * lane;  // full path: one 64-bit add per region, not per piece
  constexpr int kPieces = kTcChunk * kRow / 16;
  constexpr int kPerLane = (kPieces + 31) / 32;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int p = lane + 32 * i;
    if (kPieces % 32 == 0 || p < kPieces) {
      const int b = p * 16;
      const int phys = kSwz == 1 ? k_swz<kRow>(b) : (kSwz == 2 ? v_swz<kRow>(b) : b);
      if constexpr (kFull) {
        cp_async16(dst + phys, src_lane + 512 * i);
      } else {
        const int valid = n_valid * kRow - b;
        cp_async16_zfill(dst + phys, src + b, valid >= 16 ? 16 : (valid > 0 ? valid : 0));
      }
    }
  }
}

// One 16-token chunk (K data, K scales, V data, V scales) from the page at `page_base`, token slot
// `slot` onward, into stage `st`.
template <typename T, bool kFull>
__device__ __forceinline__ void copy_chunk(uint8_t* st, const uint8_t* page_base, int slot, int k_off, int ks_off,
                                           int v_off, int vs_off, int n_valid, int lane) {
  copy_region<T::kKRow, 1, kFull>(st, page_base + (k_off + slot * T::kKRow), n_valid, lane);
  if constexpr (T::kKScaleRow > 0)
    copy_region<T::kKScaleRow, 0, kFull>(st + T::kKBytes, page_base + (ks_off + slot * T::kKScaleRow), n_valid,
                                                lane);
  st += T::kKBytes + T::kKScaleBytes;
  copy_region<T::kVRow, 2, kFull>(st, page_base + (v_off + slot * T::kVRow), n_valid, lane);
  if constexpr (T::kVScaleRow > 0)
    copy_region<T::kVScaleRow, 0, kFull>(st + T::kVBytes, page_base + (vs_off + slot * T::kVScaleRow), n_valid,
                                                 lane);
}

// ---- lean chunk copy (TcTraits::kLeanCopy: nvfp4, head_dim 64 and 128) ----------------------------
// At head_dim 128 a stage is K data [16][64] | K scales [16][8] | V data [16][64] | V scales [16][8]
// (2304 bytes). Lane l copies K pieces l and l + 32 (rows 0-7, 8-15), V pieces l and l + 32 (v_swz:
// the XOR is the same for both, (l / 8) & 3 picks it), and 8 scale bytes (lanes 0-15 K's row l,
// 16-31 V's row l - 16). Every offset but the slot's is fixed per lane, so a chunk costs three 32-bit
// adds, three 64-bit adds and 5 cp.async per lane, none predicated. At head_dim 64 (rows of 32 and
// 4 bytes, 1152 per stage) the same with one K piece, one V piece and 4 scale bytes: 3 cp.async.
// (The scales were 16 16-byte pieces on lanes 0-15 behind a branch; every lane copying 8 bytes
// removes the branch and its bookkeeping. Measured with the same bytes copied twice instead (lanes
// 16-31 repeating 0-15, a benign race): H200, graph replays, 32 x 32K GQA 4 406 -> 403 us.)
struct LeanCopyLane {
  uint32_t src_k, src_v, src_s;       // byte offsets from the page start at slot 0 (unsigned: no sign
                                      // extension when added to the 64-bit page address)
  uint32_t dst_k, dst_v, dst_s;       // byte offsets from the stage start
};

template <typename T>
__device__ __forceinline__ LeanCopyLane lean_copy_lane(int lane, int k_off, int ks_off, int v_off, int vs_off) {
  static_assert(T::kKRow == T::kVRow && T::kKScaleRow == T::kVScaleRow && T::kKScaleRow * 8 == T::kKRow &&
                    (T::kKRow == 64 || T::kKRow == 32),
                "nvfp4 rows of head_dim 64 or 128");
  constexpr int kS = T::kKScaleRow;  // scale bytes per row and lane
  LeanCopyLane c;
  c.src_k = k_off + 16 * lane;
  c.src_v = v_off + 16 * lane;
  c.src_s = lane < 16 ? ks_off + kS * lane : vs_off + kS * (lane - 16);
  c.dst_k = 16 * lane;  // k_swz is the identity for rows under 128 bytes
  c.dst_v = T::kKBytes + T::kKScaleBytes + v_swz<T::kVRow>(16 * lane);
  c.dst_s = lane < 16 ? T::kKBytes + kS * lane : T::kKBytes + T::kKScaleBytes + T::kVBytes + kS * (lane - 16);
  return c;
}

__device__ __forceinline__ void cp_async16_s(uint32_t smem_dst, const void* global_src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_dst), "l"(global_src));
}
// 8 or 4 bytes (cp.async.cg takes 16 only; .ca caches the line in L1 as well).
template <int kBytes>
__device__ __forceinline__ void cp_async_small_s(uint32_t smem_dst, const void* global_src) {
  static_assert(kBytes == 8 || kBytes == 4, "cp.async.ca copies 4, 8 or 16 bytes");
  if constexpr (kBytes == 8) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(smem_dst), "l"(global_src));
  } else {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(smem_dst), "l"(global_src));
  }
}

// pool + page · page_bytes as one 32 x 32 + 64-bit multiply-add (IMAD.WIDE), computed once per
// chunk: written in C++ the compiler folded each region's offset into its own multiply-add, three
// multiplies and three zeroed high words per chunk. H200, 2026-12-01, graph replays, nvfp4 us, the
// page-batch copies: GQA 4 32 x 32K 314.0 / 311.9 -> 306.9 / 307.8, 8 x 32K 88.7 / 88.7 -> 87.7 /
// 88.1, 8 x 128K 313.6 / 313.5 -> 309.7 / 309.1; GQA 8 256 x 32K 2315 / 2319 -> 2275 / 2272. (With
// the running max's threshold m + slack kept in a register on top: 308.2 / 309.2, not kept.)
__device__ __forceinline__ const uint8_t* page_address(const uint8_t* pool, uint32_t page, uint32_t page_bytes) {
  uint64_t p;
  asm("mad.wide.u32 %0, %1, %2, %3;" : "=l"(p) : "r"(page), "r"(page_bytes), "l"(reinterpret_cast<uint64_t>(pool)));
  return reinterpret_cast<const uint8_t*>(p);
}

// One full 16-token chunk, token slot `slot` of the page at `page_base`, into the stage at shared
// address `stage` (lean_copy_lane's layout).
template <typename T>
__device__ __forceinline__ void lean_copy_chunk(uint32_t stage, const uint8_t* page_base, uint32_t slot,
                                                const LeanCopyLane& c) {
  if constexpr (T::kLeanCopy) {  // the kernel's other builds name this call but never make it
    const uint8_t* pk = page_base + (c.src_k + slot * T::kKRow);
    const uint8_t* pv = page_base + (c.src_v + slot * T::kVRow);
    constexpr int kPieces = T::kKRow / 32;  // 16-byte pieces per lane and region: 2 (d128) or 1 (d64)
#pragma unroll
    for (int i = 0; i < kPieces; ++i) cp_async16_s(stage + c.dst_k + 512 * i, pk + 512 * i);
#pragma unroll
    for (int i = 0; i < kPieces; ++i) cp_async16_s(stage + c.dst_v + 512 * i, pv + 512 * i);
    cp_async_small_s<T::kKScaleRow>(stage + c.dst_s, page_base + (c.src_s + slot * T::kKScaleRow));
  }
}

// ---- the pages of a warp's chunks, 32 at a time (the nvfp4 d128 kernel's kPageBatches) ---------------
// Lane l holds the page and slot of the warp's local chunk 32·b + l of batch b (`now`) and of batch
// b + 1 (`next`, read when batch b starts, 32 chunks ahead of its use); a copy takes its chunk's pair
// by two shuffles. Local chunk j is chunk j % kSteps of the warp's step j / kSteps: token
// begin + kStepTokens · (warp + kWarps · (j / kSteps)) + kTcChunk · (j % kSteps).
template <int kSteps, int kWarps>
struct ChunkPageBatches {
  static constexpr int kStepTokens = kSteps * kTcChunk;
  const int32_t* page_table;  // this sequence's entries
  int page_size, begin, end, warp, lane;
  int pages_now = 0, slots_now = 0, pages_next = 0, slots_next = 0;

  __device__ __forceinline__ int chunk_tok(int j) const {
    return begin + kStepTokens * (warp + kWarps * (j / kSteps)) + kTcChunk * (j % kSteps);
  }
  // This lane's entry of batch b (page 0, slot 0 past the end: such a chunk is zero-filled, nothing
  // is read).
  __device__ __forceinline__ void read(int b, int& page, int& slot) const {
    const int tok = chunk_tok(32 * b + lane);
    page = 0, slot = 0;
    if (tok < end) {
      const int pidx = tok / page_size;
      slot = tok - pidx * page_size;
      page = page_table[pidx];
    }
  }
  __device__ __forceinline__ void start() {
    read(0, pages_now, slots_now);
    read(1, pages_next, slots_next);
  }
  // Page and slot of local chunk j; chunks are taken in order. may_switch: j may start a batch (j > 0
  // and a multiple of 32 is possible), warp-uniform.
  __device__ __forceinline__ void take(int j, bool may_switch, int& page, int& slot) {
    const int lane_j = j & 31;
    if (may_switch && lane_j == 0) {  // a new batch starts: read the one after it
      pages_now = pages_next, slots_now = slots_next;
      read(j / 32 + 1, pages_next, slots_next);
    }
    page = __shfl_sync(0xFFFFFFFFu, pages_now, lane_j);
    slot = __shfl_sync(0xFFFFFFFFu, slots_now, lane_j);
  }
};

}  // namespace nibble::cuda::detail
