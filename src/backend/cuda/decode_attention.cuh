#pragma once
// Device code of paged decode attention (host entry point: decode_attention.h).
//
// One thread block (128 threads) = one work item of the split plan (a token range of one sequence)
// × one KV head × up to 8 query heads of its GQA group. Per tile of kTile tokens:
//   1. cp.async copies the tile's raw K/V rows and nvfp4 scales (16-byte pieces, gathered through the
//      page table) into shared memory, double-buffered: tile i+1 is in flight while tile i computes.
//   2. QK: 128/kTile threads per token, each decodes its slice of the key ONCE into f32 and dots it
//      with all query heads of the group (q in shared memory, pre-multiplied by softmax_scale ·
//      log2(e) · g_k, so the scores are in the log2 domain and g_k costs nothing).
//   3. Online softmax (one warp per head, exp2).
//   4. PV: each thread owns 8 dims of head_dim and a stride of tokens; it decodes each V slice once
//      and accumulates it into all query heads. g_v is applied once to the final output.
// Decoding is per format in kv_tile_decode.cuh (nvfp4: integer E2M1 -> fp16 bit placement).
// A work item that is its sequence's only item writes out directly (rotating back if the cache is
// rotated); otherwise it writes a normalized partial output and its log2-sum-exp for the reduce.
#include <cuda_bf16.h>

#include <cstdint>

#include "backend/cuda/decode_kernel_args.h"
#include "backend/cuda/kv_tile_decode.cuh"
#include "cache/page_layout.h"
#include "quant/kv_format.h"

namespace nibble::cuda::detail {

inline constexpr int kDecodeThreads = 128;

template <quant::ElemFormat KF, quant::ElemFormat VF, int kHeadDim, int kMaxG>
struct DecodeTraits {
  static constexpr int kKRow = static_cast<int>(quant::data_bytes(KF, kHeadDim));
  static constexpr int kKScaleRow = static_cast<int>(quant::scale_bytes(KF, kHeadDim));
  static constexpr int kVRow = static_cast<int>(quant::data_bytes(VF, kHeadDim));
  static constexpr int kVScaleRow = static_cast<int>(quant::scale_bytes(VF, kHeadDim));
  static constexpr int kTokenBytes = kKRow + kKScaleRow + kVRow + kVScaleRow;
  // A stage of at most ~24 KB: 64 tokens for the 4/8-bit formats at head_dim 128.
  static constexpr int kTile = kTokenBytes <= 384 ? 64 : (kTokenBytes <= 768 ? 32 : 16);
  static constexpr int kStageBytes = kTile * kTokenBytes;
  // QK: threads per token and 8-element units per thread.
  static constexpr int kQkThreadsPerToken = kDecodeThreads / kTile;
  static constexpr int kQkUnits = kHeadDim / (8 * kQkThreadsPerToken);
  // PV: dim groups of 8 and token lanes.
  static constexpr int kDimGroups = kHeadDim / 8;
  static constexpr int kTokenLanes = kDecodeThreads / kDimGroups;
  static constexpr int kReduceBytes = kTokenLanes * kMaxG * kHeadDim * 4;
  static constexpr int kWorkBytes = 2 * kStageBytes > kReduceBytes ? 2 * kStageBytes : kReduceBytes;
  // Shared memory: q/out [kMaxG][head_dim] f32, scores [kMaxG][kTile] f32, m/l/alpha [3][8] f32,
  // then the two stages (reused for the final cross-lane reduction).
  static constexpr int kSmemBytes = kMaxG * kHeadDim * 4 + kMaxG * kTile * 4 + 3 * 8 * 4 + kWorkBytes;
  static_assert(kQkUnits >= 1 && kHeadDim % (8 * kQkThreadsPerToken) == 0, "QK split must cover head_dim");
  static_assert(kTokenLanes >= 1, "PV split must cover head_dim");
  static_assert(kKRow % 16 == 0 && kVRow % 16 == 0, "rows must be whole 16-byte pieces");
};

__device__ __forceinline__ void cp_async16(void* smem_dst, const void* global_src) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem_dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(global_src));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

// Copies rows (data, or nvfp4 scales when kScales) of tokens [tok0, tok0 + n_valid) of KV head
// `head` into dst [n][row_bytes]. Scale rows are smaller than 16 bytes, so a piece may also carry
// the (unused) scales of tokens past n_valid: they are slots of the same page (pages hold a
// multiple of 16 tokens), so the read stays inside an allocated page.
template <bool kScales>
__device__ __forceinline__ void issue_rows(uint8_t* dst, const DecodeKernelArgs& a, const cache::KvPartLayout& L,
                                           const int32_t* page_table, int64_t head, int tok0, int n_valid,
                                           int row_bytes) {
  const int bytes = kScales ? (n_valid * row_bytes + 15) / 16 * 16 : n_valid * row_bytes;
  for (int b = threadIdx.x * 16; b < bytes; b += kDecodeThreads * 16) {
    const int token = b / row_bytes;
    const int offset = b - token * row_bytes;
    const int64_t pos = tok0 + token;
    const int64_t page = page_table[pos / L.page_size];
    const int64_t slot = pos % L.page_size;
    const uint8_t* src = a.pool + page * a.page_bytes + (kScales ? L.scales_at(head, slot) : L.data_at(head, slot)) + offset;
    cp_async16(dst + b, src);
  }
}

// quant::hadamard_inplace's butterflies (without the 1/sqrt(n)) on rows [num_rows][n] in shared
// memory; every thread of the block must call it.
__device__ __forceinline__ void hadamard_rows_smem(float* rows, int num_rows, int n) {
  const int butterflies = num_rows * (n / 2);
  for (int half = 1; half < n; half *= 2) {
    for (int idx = threadIdx.x; idx < butterflies; idx += blockDim.x) {
      const int r = idx / (n / 2), k = idx % (n / 2);
      float* row = rows + r * n;
      const int j = (k / half) * (2 * half) + k % half;
      const float x = row[j], y = row[j + half];
      row[j] = x + y;
      row[j + half] = x - y;
    }
    __syncthreads();
  }
}

// Stores a block's merged rows of query heads q_head0 .. q_head0 + n_heads - 1 of sequence `seq`
// (rows: [kRows][D] f32 in shared memory, natural layout, kRows >= n_heads): the sequence's only
// item goes to the output (rows rotated back in place where the cache is rotated, then times g_v),
// any other to partial_out at `item` for the split merge (decode_reduce.cu; its lse is the caller's).
// Every thread of the block calls it (the rotation has barriers).
template <int D, int kRows, int kThreads>
__device__ __forceinline__ void store_item_rows(const DecodeKernelArgs& a, float* rows, bool only_item, int seq,
                                                int item, int q_head0, int n_heads) {
  const int tid = static_cast<int>(threadIdx.x);
  if (only_item) {
    if (a.rotate) hadamard_rows_smem(rows, kRows, D);
    const float out_mult = a.v_global_scale * (a.rotate ? rsqrtf(static_cast<float>(D)) : 1.0f);
    for (int i = tid; i < n_heads * D; i += kThreads) {
      const int h = i / D, d = i % D;
      a.out[(static_cast<int64_t>(seq) * a.num_q_heads + q_head0 + h) * D + d] = rows[i] * out_mult;
    }
  } else {
    for (int i = tid; i < n_heads * D; i += kThreads) {
      const int h = i / D, d = i % D;
      a.partial_out[(static_cast<int64_t>(item) * a.num_q_heads + q_head0 + h) * D + d] = rows[i];
    }
  }
}

template <quant::ElemFormat KF, quant::ElemFormat VF, int kHeadDim, int kMaxG>
__global__ void __launch_bounds__(kDecodeThreads) decode_attention_kernel(DecodeKernelArgs a) {
  using T = DecodeTraits<KF, VF, kHeadDim, kMaxG>;
  constexpr int kTile = T::kTile;
  extern __shared__ uint4 smem_u4[];
  float* q_s = reinterpret_cast<float*>(smem_u4);  // [kMaxG][head_dim]; later the output
  float* scores = q_s + kMaxG * kHeadDim;          // [kMaxG][kTile]
  float* m_s = scores + kMaxG * kTile;             // [8] running max (log2 domain)
  float* l_s = m_s + 8;                            // [8] running sum
  float* alpha_s = l_s + 8;                        // [8] rescale of this tile
  uint8_t* work_smem = reinterpret_cast<uint8_t*>(alpha_s + 8);  // 2 stages / reduction

  const int tid = threadIdx.x;
  const int work = blockIdx.x;
  const int kv_head = blockIdx.y / a.group_chunks;
  const int chunk = blockIdx.y % a.group_chunks;
  const int seq = a.work_seq[work];
  const int begin = a.work_begin[work];
  const int end = a.work_end[work];
  const int n_items = a.seq_work_offset[seq + 1] - a.seq_work_offset[seq];
  const int q_head0 = kv_head * a.group + chunk * kMaxGroupPerBlock;
  const int n_heads = min(kMaxG, a.group - chunk * kMaxGroupPerBlock);
  const int32_t* page_table = a.page_tables + seq * a.max_pages_per_seq;

  auto stage = [&](int buf) { return work_smem + buf * T::kStageBytes; };
  auto issue_tile = [&](int tile, int buf) {
    const int tok0 = begin + tile * kTile;
    const int n_valid = min(kTile, end - tok0);
    uint8_t* s = stage(buf);
    issue_rows<false>(s, a, a.k_layout, page_table, kv_head, tok0, n_valid, T::kKRow);
    s += kTile * T::kKRow;
    if constexpr (T::kKScaleRow > 0) issue_rows<true>(s, a, a.k_layout, page_table, kv_head, tok0, n_valid, T::kKScaleRow);
    s += kTile * T::kKScaleRow;
    issue_rows<false>(s, a, a.v_layout, page_table, kv_head, tok0, n_valid, T::kVRow);
    s += kTile * T::kVRow;
    if constexpr (T::kVScaleRow > 0) issue_rows<true>(s, a, a.v_layout, page_table, kv_head, tok0, n_valid, T::kVScaleRow);
  };

  const int n_tiles = (end - begin + kTile - 1) / kTile;
  issue_tile(0, 0);
  cp_async_commit();

  // q -> shared memory (heads past n_heads are zero), rotated if the cache is, then scaled.
  for (int i = tid; i < kMaxG * kHeadDim; i += kDecodeThreads) {
    const int h = i / kHeadDim, d = i % kHeadDim;
    float x = 0.0f;
    if (h < n_heads) {
      const int64_t at = (static_cast<int64_t>(seq) * a.num_q_heads + q_head0 + h) * kHeadDim + d;
      x = a.q_is_bf16 ? __bfloat162float(static_cast<const __nv_bfloat16*>(a.q)[at]) : static_cast<const float*>(a.q)[at];
    }
    q_s[i] = x;
  }
  if (tid < 8) {
    m_s[tid] = -INFINITY;
    l_s[tid] = 0.0f;
  }
  __syncthreads();
  if (a.rotate) hadamard_rows_smem(q_s, kMaxG, kHeadDim);
  for (int i = tid; i < kMaxG * kHeadDim; i += kDecodeThreads) q_s[i] *= a.q_multiplier;
  __syncthreads();

  const int dim_group = tid % T::kDimGroups;
  const int token_lane = tid / T::kDimGroups;
  float o[kMaxG][8];
#pragma unroll
  for (int h = 0; h < kMaxG; ++h)
#pragma unroll
    for (int i = 0; i < 8; ++i) o[h][i] = 0.0f;

  for (int tile = 0; tile < n_tiles; ++tile) {
    if (tile + 1 < n_tiles) issue_tile(tile + 1, (tile + 1) & 1);
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();

    const int n_valid = min(kTile, end - (begin + tile * kTile));
    const uint8_t* k_data = stage(tile & 1);                 // [kTile][kKRow]
    const uint8_t* k_scales = k_data + kTile * T::kKRow;     // [kTile][kKScaleRow]
    const uint8_t* v_data = k_scales + kTile * T::kKScaleRow;  // [kTile][kVRow]
    const uint8_t* v_scales = v_data + kTile * T::kVRow;     // [kTile][kVScaleRow]

    // ---- QK: scores[h][t] = q_s[h] · k_t (unit values) --------------------------------------------
    {
      const int t = tid / T::kQkThreadsPerToken;
      const int part = tid % T::kQkThreadsPerToken;
      float acc[kMaxG];
#pragma unroll
      for (int h = 0; h < kMaxG; ++h) acc[h] = 0.0f;
      if (t < n_valid) {
#pragma unroll
        for (int j = 0; j < T::kQkUnits; ++j) {
          const int e0 = (part + j * T::kQkThreadsPerToken) * 8;
          float k[8];
          decode8<KF>(k_data + t * T::kKRow, k_scales + t * T::kKScaleRow, e0, k);
#pragma unroll
          for (int h = 0; h < kMaxG; ++h) {
            const float4 qa = *reinterpret_cast<const float4*>(q_s + h * kHeadDim + e0);
            const float4 qb = *reinterpret_cast<const float4*>(q_s + h * kHeadDim + e0 + 4);
            acc[h] += qa.x * k[0] + qa.y * k[1] + qa.z * k[2] + qa.w * k[3] + qb.x * k[4] + qb.y * k[5] +
                      qb.z * k[6] + qb.w * k[7];
          }
        }
      }
#pragma unroll
      for (int h = 0; h < kMaxG; ++h)
#pragma unroll
        for (int off = 1; off < T::kQkThreadsPerToken; off *= 2) acc[h] += __shfl_xor_sync(0xFFFFFFFFu, acc[h], off);
      if (part == 0 && t < n_valid) {
#pragma unroll
        for (int h = 0; h < kMaxG; ++h) scores[h * kTile + t] = acc[h];
      }
    }
    __syncthreads();

    // ---- online softmax, one warp per head --------------------------------------------------------
    for (int h = tid / 32; h < kMaxG; h += kDecodeThreads / 32) {
      const int lane = tid % 32;
      float s[2], tile_max = -INFINITY;
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int t = lane + 32 * r;
        s[r] = (t < n_valid) ? scores[h * kTile + t] : -INFINITY;
        tile_max = fmaxf(tile_max, s[r]);
      }
#pragma unroll
      for (int off = 16; off > 0; off /= 2) tile_max = fmaxf(tile_max, __shfl_xor_sync(0xFFFFFFFFu, tile_max, off));
      const float m_old = m_s[h];
      const float m_new = fmaxf(m_old, tile_max);  // finite: every tile has >= 1 valid token
      float sum = 0.0f;
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int t = lane + 32 * r;
        if (t < n_valid) {
          const float prob = exp2f(s[r] - m_new);
          scores[h * kTile + t] = prob;
          sum += prob;
        }
      }
#pragma unroll
      for (int off = 16; off > 0; off /= 2) sum += __shfl_xor_sync(0xFFFFFFFFu, sum, off);
      __syncwarp();  // every lane has read m_s[h] / l_s[h] before lane 0 overwrites them
      if (lane == 0) {
        const float alpha = exp2f(m_old - m_new);  // 0 on the first tile (m_old = -inf)
        alpha_s[h] = alpha;
        l_s[h] = l_s[h] * alpha + sum;
        m_s[h] = m_new;
      }
    }
    __syncthreads();

    // ---- PV: o[h][dims] = o·alpha + sum_t p[h][t] · v_t[dims] ---------------------------------------
#pragma unroll
    for (int h = 0; h < kMaxG; ++h) {
      const float alpha = alpha_s[h];
#pragma unroll
      for (int i = 0; i < 8; ++i) o[h][i] *= alpha;
    }
    for (int t = token_lane; t < n_valid; t += T::kTokenLanes) {
      float v[8];
      decode8<VF>(v_data + t * T::kVRow, v_scales + t * T::kVScaleRow, dim_group * 8, v);
#pragma unroll
      for (int h = 0; h < kMaxG; ++h) {
        const float prob = scores[h * kTile + t];
#pragma unroll
        for (int i = 0; i < 8; ++i) o[h][i] += prob * v[i];
      }
    }
    __syncthreads();  // the next iteration overwrites this stage, the scores and alpha
  }
  cp_async_wait<0>();
  __syncthreads();

  // ---- reduce the token lanes: red [kTokenLanes][kMaxG][head_dim] over the stage buffers ------------
  float* red = reinterpret_cast<float*>(work_smem);
#pragma unroll
  for (int h = 0; h < kMaxG; ++h)
#pragma unroll
    for (int i = 0; i < 8; ++i) red[(token_lane * kMaxG + h) * kHeadDim + dim_group * 8 + i] = o[h][i];
  __syncthreads();
  float* out_s = q_s;  // [kMaxG][head_dim], q is no longer needed
  for (int i = tid; i < kMaxG * kHeadDim; i += kDecodeThreads) {
    const int h = i / kHeadDim;
    float sum = 0.0f;
    for (int lane = 0; lane < T::kTokenLanes; ++lane) sum += red[lane * kMaxG * kHeadDim + i];
    out_s[i] = sum / l_s[h];
  }
  __syncthreads();

  store_item_rows<kHeadDim, kMaxG, kDecodeThreads>(a, out_s, n_items == 1, seq, work, q_head0, n_heads);
  if (n_items != 1 && tid < n_heads) {
    a.partial_lse[static_cast<int64_t>(work) * a.num_q_heads + q_head0 + tid] = m_s[tid] + log2f(l_s[tid]);
  }
}

}  // namespace nibble::cuda::detail
