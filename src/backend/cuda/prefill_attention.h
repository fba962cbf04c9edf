#pragma once
// Causal attention for prefill and extend (chunked prefill over a quantized prefix), and a generic
// decode for geometries the decode kernel does not take (head_dim outside 64/128/256, page sizes
// not a multiple of 16). One kernel for all three paths of backend/step_plan.h:
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

#include "cache/page_layout.h"
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
};

// Head dims the kernel is built for: 8, 16, 32, 64, 96, 128, 256.
bool chunk_attention_supports_head_dim(int64_t head_dim);

// Validates (nibble::Error naming expected vs actual) and launches. No allocation, no host sync.
void chunk_attention(const ChunkAttentionParams& params, cudaStream_t stream);

}  // namespace nibble::cuda
