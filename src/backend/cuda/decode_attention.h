#pragma once
// Paged decode attention: one query token per sequence, reading the quantized KV pages directly and
// dequantizing in the kernel, for every format (f32, bf16, fp8, nvfp4, k8v4), head_dim 64/128/256,
// any GQA group size (heads are processed in chunks of <= 8 per KV head), split-KV by a
// DecodeSplitPlan (decode_plan.h) with a reduce kernel for split sequences.
//
// Rotation: when the cache is rotated (Hadamard), the kernel rotates q itself and rotates the
// output back, so the caller always passes and receives unrotated vectors.
//
// Layouts (device memory):
//   q            [num_seqs][num_q_heads][head_dim]   f32 or bf16
//   out          [num_seqs][num_q_heads][head_dim]   f32
//   pool         [num_pages][page_bytes]             cache/page_layout.h
//   page_tables  [num_seqs][max_pages_per_seq]       int32
//   plan         DecodeSplitPlan::packed()           int32, uploaded once per step
//   partial_out  [plan.num_work][num_q_heads][head_dim] f32   (needed when plan.max_splits > 1)
//   partial_lse  [plan.num_work][num_q_heads]           f32   (log2-sum-exp of the item's scores)
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/decode_plan.h"
#include "backend/cuda/kv_write.h"  // ActivationDtype
#include "cache/page_layout.h"
#include "quant/kv_format.h"

namespace nibble::cuda {

struct DecodeAttentionParams {
  const void* q = nullptr;
  ActivationDtype q_dtype = ActivationDtype::kF32;
  float* out = nullptr;
  const uint8_t* pool = nullptr;
  const int32_t* page_tables = nullptr;
  const int32_t* plan_device = nullptr;  // plan.packed() in device memory
  const DecodeSplitPlan* plan = nullptr;  // the same plan on the host (sizes, launch shape)
  float* partial_out = nullptr;
  float* partial_lse = nullptr;

  int64_t num_q_heads = 0;
  int64_t max_pages_per_seq = 0;
  int64_t page_bytes = 0;
  cache::KvPartLayout k_layout{};
  cache::KvPartLayout v_layout{};
  float k_global_scale = 1.0f;
  float v_global_scale = 1.0f;
  quant::Rotation rotation = quant::Rotation::kNone;
  float softmax_scale = 0.0f;  // usually 1/sqrt(head_dim)
  // The call's last kernel (the split merge, or the decode kernel when the plan splits no sequence)
  // lets the stream's next kernel launch (PDL) at its start rather than at its end: right when
  // that kernel is a product that loads its weights before its griddepcontrol.wait (the engine:
  // the o GEMV, whose blocks then take the SMs the decode kernel leaves idle and load weights
  // during the attention); wrong when it is another decode step (its blocks then hold SMs while
  // waiting; bench_decode_attention's back-to-back calls leave it off).
  bool early_dependents = false;
  // Every token of a sequence but its last was complete before this launch (no kernel that may
  // still run writes it): the tensor-core kernel then copies the pages of those tokens before its
  // griddepcontrol.wait, while the previous kernel (the step's KV write of the last token) still
  // runs, and only the chunk holding the last token after it. True for the engine's steps: each
  // begins with plainly launched work (the plan upload, the embedding kernel) that waits for all
  // earlier work of the stream, and inside a step only the step's own tokens are written.
  bool prefix_ready = false;
  // A plan sized for at most kDecodeMemoryBoundBlocksPerSm blocks per SM launches with shared memory
  // that lets no more than that many share an SM, so its blocks spread over the SMs even when they
  // become resident one SM at a time behind a previous kernel (the engine's step: behind the KV
  // write, as the q/k/v product's blocks exit); on an idle GPU the blocks spread anyway.
  bool spread_blocks = false;
  // Where V is nvfp4 the tensor-core kernel takes the softmax weights p into P·V as one f16 (one MMA
  // per V tile pair; error <= 2^-12 · max|V|, decode_attention_tc.cuh); true keeps p as exact
  // hi + lo halves (two MMAs), as for the other formats: the CUDA backend's exact mode (f32 weights).
  bool exact_p = false;
  // Where a long-item plan gives every sequence two items (nvfp4 at 8 x 32K, 8 x 128K, ...), the two
  // blocks of each (sequence, head chunk) run as a thread block cluster and merge their items through
  // distributed shared memory (decode_pair_merge.cuh), so the call has no merge kernel; false: the
  // merge kernel, as for every other split plan (a benchmark's A/B, the tests' cross-check).
  bool pair_merge = true;
};

// Floats of partial_out the plan needs (0 when no sequence is split); partial_lse needs
// num_work * num_q_heads floats.
int64_t decode_partial_out_floats(const DecodeSplitPlan& plan, int64_t num_q_heads, int64_t head_dim);

// Validates (nibble::Error naming expected vs actual) and launches the decode kernel, then the
// reduce kernel when the plan splits a sequence. No allocation, no host synchronization.
// Both kernels are launched with programmatic dependent launch (PDL): they read the plan and the
// page tables before waiting for the previous kernel of the stream, so those two must not be
// written by a kernel launched just before (the step's host upload writes them); q and the pool
// are read only after the wait.
void decode_attention(const DecodeAttentionParams& params, cudaStream_t stream);

// Thread blocks per SM the split plan may fill for this format pair and head_dim: 2 where V is bf16
// or fp8 (memory-bound blocks: two per SM already reach full bandwidth, more only add prologues and
// merge work), every resident block (from the shared-memory footprint) where V is nvfp4
// (issue-bound blocks gain from more). The DecodePlanInputs::blocks_per_sm of the plan.
int64_t decode_blocks_per_sm(quant::ElemFormat k_format, quant::ElemFormat v_format, int64_t head_dim);

// Granules (kDecodeSplitGranule tokens) whose multiples the split plan's items should span: a
// 4-warp block's warps then get equal numbers of steps. 2 where the tensor-core kernel takes 32-token
// warp steps (nvfp4 at head_dim 64 and 128), else 1. The DecodePlanInputs::item_granule_multiple.
int64_t decode_item_granules(quant::ElemFormat k_format, quant::ElemFormat v_format, int64_t head_dim);

// The long-item builds of the format pair and head_dim, in order of preference (decode_plan.h): for
// nvfp4 at head_dim 64 and 128 blocks of 16 warps (1 per SM) and of 8 warps (2 per SM), items of whole
// rounds of their warps' 32-token steps; none (warps 0) for every other. The DecodePlanInputs::long_items.
std::array<DecodeLongItemBuild, kDecodeLongItemBuilds> decode_long_item_builds(quant::ElemFormat k_format,
                                                                               quant::ElemFormat v_format,
                                                                               int64_t head_dim);

// The short-item build's warps per block (DecodePlanInputs::short_item_warps): kTcWideWarps (8) for
// nvfp4 at head_dim 64 and 128, whose items of 128 to 512 tokens then run one to four 16-token chunks
// per warp on one block per SM (instead of twice as many in 4-warp blocks, or 64-token items); 0 for
// every other.
int32_t decode_short_item_warps(quant::ElemFormat k_format, quant::ElemFormat v_format, int64_t head_dim);

// On the short-item build, the most 16-token chunks per warp of an item holding a whole sequence on any
// grid (DecodePlanInputs::short_item_whole_rounds): 3 for nvfp4 at head_dim 128 (at batch 1-4 x 512 four
// lose to split items: 7.2 against 6.8 us at 1 x 512 on the H200), 4 at head_dim 64, whose chunks
// carry half the bytes (1 x 512 5.9 against 6.2); 0 without the build.
int64_t decode_short_item_whole_rounds(quant::ElemFormat k_format, quant::ElemFormat v_format, int64_t head_dim);

// The shortest item the split plan makes before its idle-SM rules (DecodePlanInputs::min_chunk_tokens):
// 128 tokens for nvfp4 at head_dim 64, whose items carry half the bytes per token of head_dim 128's,
// else the default 256 (kDecodeMinChunkTokens).
int64_t decode_min_chunk_tokens(quant::ElemFormat k_format, quant::ElemFormat v_format, int64_t head_dim);

// The split plan's inputs that depend on the KV format and head_dim (blocks_per_sm,
// item_granule_multiple, long_items, short_item_warps, short_item_whole_rounds, min_chunk_tokens: the
// six functions above); the caller adds the batch's lengths, its KV heads and group chunks, and the
// device's SMs.
DecodePlanInputs decode_plan_format_inputs(quant::ElemFormat k_format, quant::ElemFormat v_format, int64_t head_dim);

// ceil(query heads per KV head / 8): the DecodePlanInputs::group_chunks for this geometry.
int64_t decode_group_chunks(int64_t num_q_heads, int64_t num_kv_heads);

}  // namespace nibble::cuda
