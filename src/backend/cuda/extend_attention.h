#pragma once
// Extend (chunked prefill over a cached, quantized prefix) on tensor cores: the chunk's new tokens
// attend to the prefix read from the paged pool, then causally to their own K/V. mma.sync m16n8k16
// bf16 -> f32 with the prefill kernel's tile pieces (prefill_tile.cuh) and online softmax; at
// head_dim 128 with an fp8 / nvfp4 / k8v4 cache on Hopper, wgmma (extend_attention_wgmma.cuh, the same
// contract and precision).
//
// Work: the sequences of seq_info with own set and cached_len > 0 (extend); with include_prefill
// also those with cached_len 0 (prefill: the prefix phase is empty). Every other sequence's rows of
// `out` are left untouched (decode rows: own 0). Query t of a sequence attends to prefix tokens
// [0, cached_len) and to its own keys [0, t].
//
// Block: one query tile of one sequence × a group of query heads sharing one KV head (up to the
// tile's warp count; the GQA group is split when larger). Each warp owns 16·kM consecutive new
// tokens of one head. The prefix streams from the pages tile by tile (kKeys tokens): raw bytes by
// cp.async into a staging buffer (the next tile's copy overlaps this tile's MMAs), dequantized in
// shared memory to a bf16 tile, which every query head of the group multiplies. The prefix is never
// materialized beyond one tile. Then the chunk's own K/V, causally: rounded to bf16 once per call
// into kv_workspace (the prefill kernel's workspace and layout; skipped where it already holds
// them) and copied from there straight into bf16 tiles.
//
// Precision. Dequantization to bf16 is exact for bf16, fp8 and nvfp4 (E4M3 values, and E2M1 × E4M3
// block-scale products, have <= 6 significant bits) because the per-layer global scale g is kept
// out of the tile: K's g multiplies the softmax scale of the prefix phase and V's g the prefix part
// of O (f32). An f32 cache and the own f32 K/V are rounded to bf16 (RNE), q is rounded to bf16, and
// P to bf16 for P·V, as in prefill_attention.
//
// Rotation (Hadamard cache): instead of rotating every dequantized tile back (H is symmetric and
// orthonormal), q is rotated once (q·(H k') = (H q)·k' ) in f32 before its bf16 rounding, the
// prefix phase accumulates O in the rotated basis, and O is rotated back in registers once
// (Σ p H v' = H Σ p v') before the own phase, which uses the unrotated q. Tiles stay exact bf16.
//
// Layouts (device memory):
//   q, out      [total_tokens][num_q_heads * head_dim]   f32, 16-byte aligned
//   k, v        [total_tokens][num_kv_heads * head_dim]  f32, 16-byte aligned (the chunk's own rows)
//   kv_workspace [2][total_tokens][num_kv_heads * head_dim] bf16, 16-byte aligned (k, v rounded)
//   seq_info    [num_seqs][4] int32 (prefill_attention.h)
//   pool        [num_pages][page_bytes]                   cache/page_layout.h
//   page_tables [num_seqs][max_pages_per_seq]            int32
//   split_workspace [records] x ([rows][head_dim] O, then [rows][2] (m, l)) f32, a block's query rows
#include <cuda_runtime.h>

#include <cstdint>

#include "cache/page_layout.h"
#include "quant/kv_format.h"

namespace nibble::cuda {

struct ExtendAttentionParams {
  const float* q = nullptr;
  const float* k = nullptr;
  const float* v = nullptr;
  float* out = nullptr;
  const int32_t* seq_info = nullptr;
  int64_t num_seqs = 0;
  int64_t total_tokens = 0;
  // >= num_new of every sequence taken (sizes the grid; not checked on the device). 0 means
  // total_tokens: always safe, but launches idle blocks.
  int64_t max_new_tokens = 0;
  const uint8_t* pool = nullptr;
  const int32_t* page_tables = nullptr;
  int64_t max_pages_per_seq = 0;
  int64_t page_bytes = 0;
  cache::KvPartLayout k_layout{};  // this layer's parts (PageLayout::k(layer), v(layer))
  cache::KvPartLayout v_layout{};
  float k_global_scale = 1.0f;
  float v_global_scale = 1.0f;
  quant::Rotation rotation = quant::Rotation::kNone;
  int64_t num_q_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  float softmax_scale = 0.0f;
  // The chunk's own K/V rounded to bf16, [2][total_tokens][num_kv_heads * head_dim] (K then V;
  // prefill_workspace_bytes(), 16-byte aligned), the own tiles' source: written by this call from k
  // and v, unless kv_workspace_filled says it already holds this step's (prefill_attention converted
  // the same k, v earlier in the step; then k and v are not read).
  void* kv_workspace = nullptr;
  bool kv_workspace_filled = false;
  bool include_prefill = false;  // also take sequences with cached_len 0 (tests; the backend uses prefill_attention)
  // The prefix split (flash-decoding for extend; extend_split.h). Where the query tiles are too few
  // to fill the GPU — a short chunk over a long prefix, an agent's turn — each tile's prefix is cut
  // into `splits` contiguous parts run by blocks of their own (the last also takes the own tiles);
  // each writes its unnormalized (O, m, l) to split_workspace and a second kernel merges them in
  // split order, so the result does not depend on timing. The host hints bound the work: they may
  // overstate it (fewer splits), never understate it.
  int64_t extend_seqs = 0;        // >= the sequences taken; 0: num_seqs
  int64_t extend_tokens = 0;      // >= their new tokens in all; 0: total_tokens
  int64_t max_prefix_tokens = 0;  // >= every cached_len taken; 0: never split
  int prefix_splits = 0;          // 0: the launcher's choice; 1: no split; n > 1: n parts (tests)
  int num_sms = 0;                // 0: the current device's
  void* split_workspace = nullptr;  // the records above, 16-byte aligned
  int64_t split_workspace_bytes = 0;
  // Which kernel runs an unsplit call: kExtendKernelDefault picks the warpgroup kernel
  // (extend_attention_wgmma.cuh: head_dim 128, an fp8 / nvfp4 / k8v4 cache, on a 9.0 device of an
  // sm_90a build) where it runs, else the mma.sync one; the others force one (tests, benchmarks).
  int kernel = 0;
};

inline constexpr int kExtendKernelDefault = 0;
inline constexpr int kExtendKernelMma = 1;    // mma.sync m16n8k16 (extend_attention_tc.cuh), every case
inline constexpr int kExtendKernelWgmma = 2;  // wgmma (extend_attention_wgmma.cuh): prefix_splits must be 1

bool extend_attention_supports_head_dim(int64_t head_dim);  // 64, 128, 256

// Bytes of split_workspace that let the launcher split as far as it ever chooses to at this
// head_dim on a device of num_sms SMs (one record per resident block); 0 for other head dims.
int64_t extend_split_workspace_bytes(int64_t head_dim, int num_sms);

// The prefix parts a call with these params runs (1: no split), as extend_attention would choose
// them; validates as it does.
int extend_attention_splits(const ExtendAttentionParams& params);

// Validates (nibble::Error naming expected vs actual) and launches the bf16 conversion of k/v
// (unless kv_workspace_filled) and the kernel. No allocation, no host sync.
void extend_attention(const ExtendAttentionParams& params, cudaStream_t stream);

}  // namespace nibble::cuda
