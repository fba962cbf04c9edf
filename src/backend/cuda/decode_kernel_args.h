#pragma once
// The decode kernels' argument block (device pointers and scalars, built by decode_attention.cpp
// from DecodeAttentionParams) and the launchers the .cu files define. Plain C++: no device code.
#include <cuda_runtime.h>

#include <cstdint>

#include "cache/page_layout.h"
#include "quant/kv_format.h"

namespace nibble::cuda::detail {

inline constexpr int kMaxGroupPerBlock = 8;  // query heads one block serves (a GQA group chunk)

// Everything the kernels read, device pointers and scalars only (built from DecodeAttentionParams).
struct DecodeKernelArgs {
  const void* q;           // [num_seqs][num_q_heads][head_dim]
  bool q_is_bf16;
  float* out;              // [num_seqs][num_q_heads][head_dim]
  const uint8_t* pool;     // [num_pages][page_bytes]
  const int32_t* page_tables;  // [num_seqs][max_pages_per_seq]
  const int32_t* work_seq;     // [num_work]
  const int32_t* work_begin;   // [num_work]
  const int32_t* work_end;     // [num_work]
  const int32_t* seq_work_offset;  // [num_seqs + 1]
  float* partial_out;      // [num_work][num_q_heads][head_dim]
  float* partial_lse;      // [num_work][num_q_heads]
  int num_q_heads;
  int group;               // query heads per KV head
  int group_chunks;        // ceil(group / 8)
  int64_t max_pages_per_seq;
  int64_t page_bytes;
  cache::KvPartLayout k_layout;
  cache::KvPartLayout v_layout;
  float q_multiplier;      // softmax_scale · log2(e) · g_k (· 1/sqrt(head_dim) when rotating)
  float v_global_scale;
  bool rotate;
};

// Launches decode_attention_kernel for one format pair; head_dim (64/128/256) and the group tile
// (1/2/4/8) are dispatched inside. Explicitly instantiated per format pair in decode_attention_<fmt>.cu.
template <quant::ElemFormat KF, quant::ElemFormat VF>
void launch_decode_attention(const DecodeKernelArgs& args, int head_dim, int max_group, dim3 grid, cudaStream_t stream);

// The split-KV merge (decode_reduce.cu): grid (num_seqs, num_q_heads); returns at once for a
// sequence of one work item.
void launch_decode_reduce(const DecodeKernelArgs& args, int num_seqs, int head_dim, cudaStream_t stream);

}  // namespace nibble::cuda::detail
