#pragma once
// The chunk-attention kernel (prefill_attention.h states the contract and the layouts).
//
// Block: 128 threads = 32 queries (one query head, kChunkQueryTile new tokens of one sequence) × 4
// lanes; lane l of a query owns dims l, l+4, l+8, ... (interleaved, so the 4 lanes read 4
// consecutive floats of a shared-memory row: no bank conflicts, and the 8 queries of a warp read
// the same row: broadcast). Keys stream through one shared tile [2][kKeys][D] f32 (K rows, then V
// rows): first the cached prefix, dequantized from the pages (and rotated back for a Hadamard cache),
// then the chunk's own K/V rows with the causal mask. Scores live in registers, softmax in log2.
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/prefill_attention.h"
#include "quant/kv_format.h"

namespace nibble::cuda::detail {

template <int D>
struct ChunkTile {
  static constexpr int kThreads = 128;
  static constexpr int kLanesPerQuery = 4;
  static constexpr int kQueries = kThreads / kLanesPerQuery;
  static constexpr int kDims = D / kLanesPerQuery;  // dims per lane
  // Keys per tile: the K+V tile stays <= 32 KB of static shared memory.
  static constexpr int kKeys = D <= 64 ? 64 : (D <= 128 ? 32 : 16);
  // Elements dequantized per unit of work: one nvfp4 block (16), or the whole row when shorter.
  static constexpr int kChunk = D < 16 ? D : 16;
  static_assert(kQueries == kChunkQueryTile, "a work item is one block's queries");
  static_assert(D % kLanesPerQuery == 0, "head_dim must be a multiple of 4");
};

// Dequantizes kChunk elements (chunk `c`) of one head vector at `base` (the page) into out.
template <int kChunk>
__device__ __forceinline__ void dequantize_chunk(const cache::KvPartLayout& part, const uint8_t* page,
                                                 int64_t head, int64_t slot, int c, float global_scale,
                                                 float* out) {
  const uint8_t* data = page + part.data_at(head, slot);
  switch (part.format) {
    case quant::ElemFormat::kF32: {
      const float* in = reinterpret_cast<const float*>(data) + c * kChunk;
#pragma unroll
      for (int e = 0; e < kChunk; ++e) out[e] = in[e];
      break;
    }
    case quant::ElemFormat::kBF16: {
      const uint16_t* in = reinterpret_cast<const uint16_t*>(data) + c * kChunk;
#pragma unroll
      for (int e = 0; e < kChunk; ++e) out[e] = quant::f32_from_bf16(in[e]);
      break;
    }
    case quant::ElemFormat::kFP8: {
      const uint8_t* in = data + c * kChunk;
#pragma unroll
      for (int e = 0; e < kChunk; ++e) out[e] = quant::f32_from_e4m3(in[e]) * global_scale;
      break;
    }
    case quant::ElemFormat::kNVFP4: {
      // kChunk == 16 == one block (nvfp4 needs head_dim % 16 == 0, validated on the host).
      const uint8_t scale = page[part.scales_at(head, slot) + c];
      quant::nvfp4_dequantize_block(data + c * quant::kNvfp4BlockBytes, scale, global_scale, out);
      break;
    }
  }
}

// Normalized Hadamard transform of every row of tile [rows][D] in shared memory (all threads).
template <int D, int kThreads>
__device__ __forceinline__ void hadamard_rows(float* tile, int rows) {
  const int pairs = rows * (D / 2);
  for (int half = 1; half < D; half *= 2) {
    for (int u = threadIdx.x; u < pairs; u += kThreads) {
      const int row = u / (D / 2), r = u % (D / 2);
      const int i = (r / half) * (2 * half) + r % half;
      float* x = tile + row * D;
      const float a = x[i], b = x[i + half];
      x[i] = a + b;
      x[i + half] = a - b;
    }
    __syncthreads();
  }
  const float norm = 1.0f / sqrtf(static_cast<float>(D));
  for (int u = threadIdx.x; u < rows * D; u += kThreads) tile[u] *= norm;
  __syncthreads();
}

template <int D>
__global__ void __launch_bounds__(ChunkTile<D>::kThreads) chunk_attention_kernel(ChunkAttentionParams p) {
  using T = ChunkTile<D>;
  __shared__ float tile[2 * T::kKeys * D];  // [K rows | V rows][D]
  float* k_tile = tile;
  float* v_tile = tile + T::kKeys * D;

  const int64_t seq = p.work[2 * blockIdx.x];
  const int64_t q_begin = p.work[2 * blockIdx.x + 1];
  const int32_t* info = p.seq_info + seq * kSeqInfoFields;
  const int64_t row0 = info[0], num_new = info[1], cached_len = info[2];
  const bool own = info[3] != 0;
  if (p.skip_prefill && cached_len == 0 && own) return;  // prefill_attention's sequence (whole block)
  const int64_t head = blockIdx.y;
  const int64_t kv_head = head / (p.num_q_heads / p.num_kv_heads);
  const int lane = threadIdx.x % T::kLanesPerQuery;
  const int64_t q_index = q_begin + threadIdx.x / T::kLanesPerQuery;  // among the sequence's new tokens
  const bool valid = q_index < num_new;
  const int64_t q_cols = p.num_q_heads * D, kv_cols = p.num_kv_heads * D;

  // q in registers, pre-multiplied so scores come out in the log2 domain.
  constexpr float kLog2e = 1.4426950408889634f;
  float q[T::kDims], acc[T::kDims];
  {
    const float* q_row = p.q + (row0 + q_index) * q_cols + head * D;
#pragma unroll
    for (int i = 0; i < T::kDims; ++i) {
      q[i] = valid ? q_row[i * T::kLanesPerQuery + lane] * (p.softmax_scale * kLog2e) : 0.0f;
      acc[i] = 0.0f;
    }
  }
  float m = -INFINITY, l = 0.0f;

  // Folds keys [0, count) of the tile into the state; `causal_first` >= 0: key j is at own index
  // causal_first + j and is masked past q_index.
  auto fold_tile = [&](int count, int64_t causal_first) {
    float s[T::kKeys];
    float tile_max = -INFINITY;
#pragma unroll
    for (int j = 0; j < T::kKeys; ++j) {
      s[j] = -INFINITY;
      if (j < count) {  // uniform across the block
        const float* key = k_tile + j * D;
        float dot = 0.0f;
#pragma unroll
        for (int i = 0; i < T::kDims; ++i) dot += q[i] * key[i * T::kLanesPerQuery + lane];
        dot += __shfl_xor_sync(0xffffffffu, dot, 1);
        dot += __shfl_xor_sync(0xffffffffu, dot, 2);
        if (causal_first < 0 || causal_first + j <= q_index) s[j] = dot;
        tile_max = fmaxf(tile_max, s[j]);
      }
    }
    const float m_new = fmaxf(m, tile_max);
    if (m_new == -INFINITY) return;  // every key masked and nothing seen yet
    const float correction = exp2f(m - m_new);  // 0 when m is -inf
    l *= correction;
#pragma unroll
    for (int i = 0; i < T::kDims; ++i) acc[i] *= correction;
#pragma unroll
    for (int j = 0; j < T::kKeys; ++j) {
      if (j < count) {
        const float prob = exp2f(s[j] - m_new);
        l += prob;
        const float* value = v_tile + j * D;
#pragma unroll
        for (int i = 0; i < T::kDims; ++i) acc[i] += prob * value[i * T::kLanesPerQuery + lane];
      }
    }
    m = m_new;
  };

  // 1. The cached prefix, tile by tile from the pages.
  const bool rotate = p.rotation == quant::Rotation::kHadamard;
  const int64_t page_size = p.k_layout.page_size;
  const int32_t* page_table = p.page_tables + seq * p.max_pages_per_seq;
  constexpr int kChunksPerRow = D / T::kChunk;
  for (int64_t t0 = 0; t0 < cached_len; t0 += T::kKeys) {
    const int count = static_cast<int>(cached_len - t0 < T::kKeys ? cached_len - t0 : T::kKeys);
    __syncthreads();  // the previous tile is consumed
    for (int u = threadIdx.x; u < 2 * count * kChunksPerRow; u += T::kThreads) {
      const int is_v = u / (count * kChunksPerRow);
      const int j = (u / kChunksPerRow) % count;
      const int c = u % kChunksPerRow;
      const int64_t pos = t0 + j;
      const uint8_t* page = p.pool + static_cast<int64_t>(page_table[pos / page_size]) * p.page_bytes;
      float* dst = (is_v ? v_tile : k_tile) + j * D + c * T::kChunk;
      if (is_v) {
        dequantize_chunk<T::kChunk>(p.v_layout, page, kv_head, pos % page_size, c, p.v_global_scale, dst);
      } else {
        dequantize_chunk<T::kChunk>(p.k_layout, page, kv_head, pos % page_size, c, p.k_global_scale, dst);
      }
    }
    __syncthreads();
    if (rotate) {
      hadamard_rows<D, T::kThreads>(k_tile, count);
      hadamard_rows<D, T::kThreads>(v_tile, count);
    }
    fold_tile(count, -1);
  }

  // 2. The chunk's own K/V at full precision, causal: keys [0, min(num_new, q_begin + kQueries)).
  if (own) {
    const int64_t own_end = num_new < q_begin + T::kQueries ? num_new : q_begin + T::kQueries;
    for (int64_t t0 = 0; t0 < own_end; t0 += T::kKeys) {
      const int count = static_cast<int>(own_end - t0 < T::kKeys ? own_end - t0 : T::kKeys);
      __syncthreads();
      for (int u = threadIdx.x; u < count * D; u += T::kThreads) {
        const int j = u / D, e = u % D;
        const int64_t at = (row0 + t0 + j) * kv_cols + kv_head * D + e;
        k_tile[j * D + e] = p.k[at];
        v_tile[j * D + e] = p.v[at];
      }
      __syncthreads();
      fold_tile(count, t0);
    }
  }

  if (valid) {
    const float inv_l = 1.0f / l;
    float* out_row = p.out + (row0 + q_index) * q_cols + head * D;
#pragma unroll
    for (int i = 0; i < T::kDims; ++i) out_row[i * T::kLanesPerQuery + lane] = acc[i] * inv_l;
  }
}

}  // namespace nibble::cuda::detail
