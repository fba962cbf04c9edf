#pragma once
// Causal attention for prefill and extend (chunked prefill over a quantized prefix), and a generic
// decode for geometries the decode kernel does not take (head_dim outside 64/128/256, page sizes
// not a multiple of 16). Two kernels:
//
//   chunk_attention   — CUDA cores, f32 throughout; all three paths of backend/step_plan.h (the
//                       exact mode with f32 weights, other head_dims, and the oracle of the others).
//   prefill_attention — tensor cores (mma.sync bf16 -> f32), the prefill path only (no cached
//                       prefix), head_dim 64/128/256. Its sibling extend_attention
//                       (extend_attention.h) takes the extend path on tensor cores; with bf16
//                       weights the backend runs both, each reading seq_info and leaving the other's
//                       rows alone (with f32 weights chunk_attention runs, skip_prefill when only the
//                       prefill sequences went to prefill_attention).
//
// chunk_attention:
//
//   query t (0-based among its sequence's new tokens) attends to
//     - the cached prefix, tokens [0, cached_len), read from the quantized pages and dequantized
//       tile by tile in shared memory (never the whole prefix),
//     - then, when `own` is set, the chunk's own full-precision K/V rows [0, t] (causal).
//   prefill: cached_len 0, own 1; extend: cached_len = first_position, own 1;
//   decode:  cached_len = context_after (its own token was written to the pages first), own 0.
//
// Rotation: with a Hadamard-rotated cache, each dequantized prefix tile is rotated back in shared
// memory (H is its own inverse), so q, the own K/V and the output stay unrotated.
//
// Work decomposition: one thread block per (work item, query head); a work item is kChunkQueryTile
// consecutive new tokens of one sequence. 4 threads per query, each owning head_dim/4 interleaved
// dims; online softmax in the log2 domain. CUDA cores (no tensor cores yet).
//
// Layouts (device memory):
//   q, out      [total_tokens][num_q_heads * head_dim]   f32 (activation rows of the step)
//   k, v        [total_tokens][num_kv_heads * head_dim]  f32
//   work        [num_work][2] int32: {sequence, first query among its new tokens}
//   seq_info    [num_seqs][4] int32: {first activation row, num_new_tokens, cached_len, own}
//   pool        [num_pages][page_bytes]                   cache/page_layout.h
//   page_tables [num_seqs][max_pages_per_seq]            int32
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "cache/page_layout.h"
#include "backend/cuda/extend_attention.h"  // the tensor-core extend kernel, used beside these two
#include "quant/kv_format.h"

namespace nibble::cuda {

inline constexpr int32_t kChunkQueryTile = 32;  // new tokens per work item
inline constexpr int kSeqInfoFields = 4;         // int32 fields per sequence in seq_info

struct ChunkAttentionParams {
  const float* q = nullptr;
  const float* k = nullptr;  // may be null when no sequence has own set
  const float* v = nullptr;
  float* out = nullptr;
  const int32_t* work = nullptr;
  int64_t num_work = 0;
  const int32_t* seq_info = nullptr;
  int64_t num_seqs = 0;
  const uint8_t* pool = nullptr;  // may be null when no sequence has cached_len > 0
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
  // Leave sequences with cached_len 0 and own set (prefill) to prefill_attention: their blocks exit.
  bool skip_prefill = false;
};

// Head dims the kernel is built for: 8, 16, 32, 64, 96, 128, 256.
bool chunk_attention_supports_head_dim(int64_t head_dim);

// Validates (nibble::Error naming expected vs actual) and launches. No allocation, no host sync.
void chunk_attention(const ChunkAttentionParams& params, cudaStream_t stream);

// ---- prefill_attention: causal flash attention on tensor cores ------------------------------------
//
// Precision: q, k, v are rounded to bf16 (round to nearest even) and multiplied on the tensor cores
// with f32 accumulation; the softmax (max, exp2, sums) and the output are f32, and the
// probabilities P are rounded to bf16 for the P·V product (the CUDA model's bf16 matmuls round
// their activations the same way). Against the f32 CPU oracle the error is bounded by the bf16
// unit roundoff 2^-8 relative on V and on each probability (tests/backend/cuda_prefill states the
// tolerances).
//
// Work: the sequences of seq_info with cached_len 0 and own set; every other sequence's rows of
// `out` are left untouched. Query t of such a sequence attends to its own keys [0, t].
//
// Layouts (device memory):
//   q, out        [total_tokens][num_q_heads * head_dim]    f32
//   k, v          [total_tokens][num_kv_heads * head_dim]   f32
//   seq_info      [num_seqs][4] int32 (as chunk_attention)
//   kv_workspace  [2][total_tokens][num_kv_heads * head_dim] bf16 (K then V, rounded copies;
//                 prefill_workspace_bytes(), 16-byte aligned), overwritten by every call
struct PrefillAttentionParams {
  const float* q = nullptr;
  const float* k = nullptr;
  const float* v = nullptr;
  float* out = nullptr;
  const int32_t* seq_info = nullptr;
  int64_t num_seqs = 0;
  int64_t total_tokens = 0;
  // >= num_new of every prefill sequence (sizes the grid; precondition, not checked on the device).
  // 0 means total_tokens, always safe but launches idle blocks when sequences are short.
  int64_t max_new_tokens = 0;
  void* kv_workspace = nullptr;
  // The workspace already holds this step's K/V as bf16 (a caller with bf16 K/V, or a benchmark
  // timing the attention alone): the conversion is skipped and k, v are not read.
  bool kv_workspace_filled = false;
  int64_t num_q_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  float softmax_scale = 0.0f;
  // Tile configuration (a benchmark knob): 0 = the default for head_dim, else
  // 1..prefill_tile_count(head_dim) (prefill_tile_name says what each is).
  int tile = 0;
};

bool prefill_attention_supports_head_dim(int64_t head_dim);  // 64, 128, 256
int prefill_tile_count(int64_t head_dim);                      // tile configurations built
std::string prefill_tile_name(int64_t head_dim, int tile);     // tile 0 names the default's

// Bytes of kv_workspace for a step of total_tokens rows.
int64_t prefill_workspace_bytes(int64_t total_tokens, int64_t num_kv_heads, int64_t head_dim);

// Validates (nibble::Error naming expected vs actual) and launches the bf16 conversion of k/v and
// the attention kernel. No allocation, no host sync.
void prefill_attention(const PrefillAttentionParams& params, cudaStream_t stream);

namespace detail {
// K and V f32 [rows][cols] (n = rows · cols elements each, a multiple of 4, 16-byte aligned) ->
// out [2][rows][cols] bf16, round to nearest even: the workspace prefill_attention and
// extend_attention read the step's own K/V from. Asynchronous on `stream`.
void convert_kv_to_bf16(const float* k, const float* v, void* out, int64_t n, cudaStream_t stream);
}  // namespace detail

}  // namespace nibble::cuda
