#pragma once
// The decode kernels' argument block (device pointers and scalars, built by decode_attention.cpp
// from DecodeAttentionParams) and the launchers the .cu files define. Plain C++: no device code.
#include <cuda_runtime.h>

#include <cstdint>

#include "cache/page_layout.h"
#include "quant/kv_format.h"

namespace nibble::cuda {
struct DecodeAttentionParams;  // decode_attention.h
}

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
  const int32_t* unit_first_item;  // [num_units + 1] (DecodeSplitPlan::unit_first_item)
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
  int num_work;            // work items of the plan
  int num_units;           // units of the plan (tensor-core grid: num_units × kv_heads · group_chunks)
  bool early_dependents;   // the call's last kernel triggers the next at its start (DecodeAttentionParams)
  bool trigger_at_start;   // the decode kernel triggers its dependents at its start: the merge when the
                           // plan splits a sequence, else the next kernel when early_dependents
  bool prefix_ready;       // a sequence's tokens before its last may be read before the wait (DecodeAttentionParams)
};

// ---- the tensor-core decode kernel's geometry (decode_attention_tc.cuh), plain C++ so that the host
// (split plan, benchmark) can size the grid from the same numbers the kernel uses -----------------
// Warps per block (kTcWarps; kTcWideWarps and kTcSmWarps in nvfp4's long-item builds, below).
inline constexpr int kTcWarps = 4;                 // warps per block; each streams its own 16-token chunks
inline constexpr int kTcThreads = 32 * kTcWarps;
inline constexpr int kTcChunk = 16;                // tokens per warp step (one PV k-step, two QK n-tiles)
inline constexpr int kTcStageBudget = 12288;       // bytes of cp.async stages per warp (>= 2 stages)
// nvfp4's wider blocks (kTcWideWarps, kTcSmWarps) size their rings otherwise (tc_geometry):
//  - the long-item builds (32-token steps) keep kTcWideInFlightBytes per warp in flight beside their
//    step: 2 chunks at head_dim 128 (4 stages of 2304 bytes), 4 at head_dim 64 (6 of 1152). Fewer
//    bytes in flight made them faster: H200, 2026-12-04, graph replays, nvfp4 us, 5 -> 4 stages at
//    head_dim 128 on three H200s: GQA 4 8 x 32K 76.3 -> 74.2-74.3 (nvfp4 / fp8 0.599-0.602 ->
//    0.583-0.585), 79.1 -> 76.4-76.5 (0.612-0.614 -> 0.592-0.594) and 78.2-78.4 -> 75.5-75.7, 8 x 128K
//    -3.5%, 32 x 32K (8 warps) 285 -> 277; 6 stages slower (8 x 32K 77.7 -> 79.1), and not the L1's
//    size (a forced carveout measured the same); 8 -> 6 stages at head_dim 64: 8 x 32K 44.9 -> 44.3-44.4,
//    32 x 32K 165.3-167.1 -> 162.9-163.2. PERFORMANCE.md, thirty-ninth round.
//  - the short-item build (16-token steps, 1-4 chunks per warp and a joined tail) at most
//    kTcShortItemStages, which hold a whole item: at head_dim 64, 8 -> 6 measured 2 x 64 tokens 4.0 ->
//    3.8 us (nvfp4 / fp8 1.05 -> 1.00), 1 x 1K 6.6-6.7 -> 6.3 (same day); at head_dim 128 it keeps 5
//    (4 measured 0.1-0.2 us slower at 1 x 4K).
inline constexpr int kTcWideInFlightBytes = 4608;
inline constexpr int kTcShortItemStages = 6;
inline constexpr int kSmemPerSm = 233472;          // H100/H200: 228 KiB per SM
inline constexpr int kSmemReservedPerBlock = 1024;

// Dynamic shared memory that lets at most `blocks` blocks share an SM (at least the kernel's own;
// blocks <= 0: the kernel's own). The decode kernel's spread launch and the split merge use it.
constexpr int spread_smem_bytes(int own, int blocks) {
  const int share = blocks > 0 ? kSmemPerSm / blocks - kSmemReservedPerBlock : 0;
  return share > own ? share : own;
}

struct TcGeometry {
  int stage_bytes;  // one 16-token chunk: K data, K scales, V data, V scales
  int stages;       // per warp
  int smem_bytes;   // per block
  int blocks_per_sm;
};

// Warps per block of the long-item builds (DecodeLaunch::tc_warps): nvfp4's any-plan build of
// 32-token steps also comes with blocks of kTcWideWarps and of kTcSmWarps, for the plans that take
// them (decode_long_item_builds, DecodeSplitPlan::block_warps); every other build has kTcWarps.
// The issue-bound nvfp4 loop ran 4 blocks of 4 warps per SM, and the SM's warp scheduler favours its
// older blocks: on one SM the 4 blocks of equal items ended ~40 us apart at 32 x 32K (at 191, 230,
// 269 and 299 us of the call; a %globaltimer trace of every block, H200, 2026-12-01), so the last
// third of each call ran with 3, 2, then 1 block resident (an SM with one block of 4 warps does ~75%
// of the work per us of one with four). The warps of one block end within ~1 us of each other, so
// fewer, wider blocks (the same per-warp loop, an item's steps over more warps) keep 16 warps busy
// for longer, and fill the SMs with fewer items: 32 x 32K needs no split and no merge. H200,
// 2026-12-01, graph replays, nvfp4 us, 4 -> 8 warps with the items that fill 2 per SM: GQA 4 32 x
// 32K 307.1 / 308.9 -> 296.7 / 296.8 (16K -> 32K items), 8 x 128K 308.8 / 309.9 -> 302.9 / 303.6
// (16K -> 32K), 8 x 32K 87.7 / 88.1 -> 86.3 / 86.4 (4K -> 8K); GQA 8 32 x 32K 308.4 / 310.0 ->
// 296.8 / 297.2; 8 -> 16 warps (one block per SM, no stagger at all) where that grid is one wave: 8
// x 32K 86.4 / 86.5 -> 83.7 / 83.4, 8 x 128K 304.4 / 303.8 -> 292.6 / 292.0. Short items or several
// waves lose (each block's prologue and merge weigh more, and a new block's prologue has fewer
// warps beside it): which plans take which, decode_plan.h (kDecodeWideItemTokens).
inline constexpr int kTcWideWarps = 8;   // 2 blocks per SM
inline constexpr int kTcSmWarps = 16;    // 1 block per SM: the register file at 128 per thread

// steps: 16-token chunks per warp step of the build (tc_steps; the short-item build's 1).
constexpr TcGeometry tc_geometry(quant::ElemFormat kf, quant::ElemFormat vf, int head_dim, int warps = kTcWarps,
                                 int steps = 1) {
  const int stage = kTcChunk * static_cast<int>(quant::data_bytes(kf, head_dim) + quant::scale_bytes(kf, head_dim) +
                                                quant::data_bytes(vf, head_dim) + quant::scale_bytes(vf, head_dim));
  int stages = kTcStageBudget / stage;
  if (warps > kTcWarps) {  // nvfp4's wider blocks (above)
    const int short_item_stages = stages < kTcShortItemStages ? stages : kTcShortItemStages;
    stages = steps > 1 ? steps + kTcWideInFlightBytes / stage : short_item_stages;
  }
  stages = stages < 2 ? 2 : (stages > 8 ? 8 : stages);
  const int qfrag = (head_dim / 16) * 32 * 16;         // [k-steps][32 lanes] uint4
  const int stats = 2 * warps * 8 * 4;              // m and l per warp and head
  const int work_stages = warps * stages * stage;   // per-warp rings of stages
  const int work_red = warps * 8 * head_dim * 4;    // cross-warp reduction
  const int smem = qfrag + stats + (work_stages > work_red ? work_stages : work_red);
  int blocks = kSmemPerSm / (smem + kSmemReservedPerBlock);
  // head_dim 256 needs the registers of 2 blocks/SM. 3 where V is nvfp4 (the one-f16-p builds then
  // fit in 142 / 146 registers; H200, 2026-12-01, graph replays, bench_decode_attention --head-dim
  // 256, us, 2 -> 3): 2 KV heads GQA 8 nvfp4 1 x 32K 21.7 -> 21.1, 8 x 32K 59.9 -> 63.0, 8 x 128K
  // 198.2 -> 193.6, 32 x 32K 199.0 -> 193.0, 64 x 4K 59.8 -> 62.6; 8 KV heads GQA 4 8 x 32K 196.6 ->
  // 190.5, 32 x 32K 739.3 -> 704.2; k8v4 (92-99% of the read bandwidth at 2) 4-11% slower at every
  // batched shape. Mixed for nvfp4, worse for k8v4: kept at 2. 5 blocks/SM for nvfp4 d128 (4 stages, <= 96
  // registers; H200, 2026-11-30, 32 x 32K GQA 4): the 16-token-step build (95 registers) 402.8 ->
  // 409.7 us, the 32-token one spills (132 bytes) and took 490 us: more warps do not help the
  // issue-bound kernel (ncu: 1.2% of its stalls wait on memory).
  const int max_blocks = (head_dim >= 256 ? 2 : 4) * kTcWarps / warps;  // the register file
  blocks = blocks < 1 ? 1 : (blocks > max_blocks ? max_blocks : blocks);
  return {stage, stages, smem, blocks};
}

// 16-token chunks per warp step of the tensor-core kernel: 2 for nvfp4 at head_dim 64 and 128 (one softmax
// and loop per 32 tokens, two chunks' MMA chains to interleave; ~7% fewer SASS per token, 464 vs
// 486 us at 32 x 32K, 3-5% at every benchmarked shape; the 4-warp build's ring of 5 stages keeps 3
// chunks in flight during a step; 4 stages, 2 in flight, measured 3% slower there on 2026-12-01: 32 x
// 32K 313 -> 324 us (the long-item builds of 8 and 16 warps gained from 4 on 2026-12-04:
// kTcWideInFlightBytes);
// 6 stages (a 13824-byte budget) too, with the 8- and 16-warp long-item builds: 32 x 32K 296.4 ->
// 303.4, 8 x 128K 292.0 -> 299.1, 8 x 32K 83.5 -> 85.8, 4K x 128 161 -> 197 on 4-warp blocks),
// 1 elsewhere (too few stages, or not measured). head_dim 64 (8 stages of 1152 bytes) took them, with
// its few-blocks and long-item builds, on 2026-12-01 (H200, graph replays, 8 KV heads, GQA 4, nvfp4
// us, 16 -> 32-token steps, still on the generic copy path then; the lean copy came next,
// TcTraits::kLeanCopy): 32 x 32K 234.9 -> 212.6, 8 x 32K 66.8 -> 61.0, 8 x 128K 235.1 -> 206.6, 32 x
// 4K 39.5 -> 33.9, 1 x 32K 18.35 -> 17.4, 64 x 8K 120.2 -> 116.0; 1 x 1K and 1 x 4K within 0.1.
constexpr int tc_steps(quant::ElemFormat kf, quant::ElemFormat vf, int head_dim) {
  return kf == quant::ElemFormat::kNVFP4 && vf == quant::ElemFormat::kNVFP4 && (head_dim == 64 || head_dim == 128) ? 2
                                                                                                                  : 1;
}

// Items of at most this many tokens run the 16-token-step build even where tc_steps is 2: with
// 32-token steps a 64-token item keeps only 2 of the 4 warps busy, and a 128-token item gives each
// warp one step that waits for both its chunks. Measured on the H200 (graph replays, nvfp4 d128,
// GQA 4): first (2026-11-30) 1 x 1K 64-token items 9.2 / 9.5 us (GQA 4 / 8) with 16-token steps
// against 9.8 / 10.1 with 32, 128-token items 9.9 against 9.6 (so the threshold was one granule);
// after the lean copy, the few-blocks build and the conflict-free epilogue (2026-12-02, bench
// --chunks 128, 16- / 32-token steps): 1 x 640 8.2 / 8.3, 1 x 768 8.3 / 8.4, 1 x 1K 8.4 / 8.6, 1 x
// 1280 9.3 / 9.5 (GQA 8 1 x 1K 8.7 / 8.9), so 128-token items take the 16-token build too.
inline constexpr int kTcShortItemTokens = 128;
// Item sizes at the short shapes where nvfp4 is still behind fp8 (H200, 2026-11-30, graph replays,
// bench --chunks, GQA 4, fp8 / nvfp4 us, after the copy-path changes of that day): 1 x 4K 256-token
// items (the plan's) 11.2 / 11.5, 128: 11.7 / 11.7, 512: 13.3 / 13.5; 1 x 16K 512 (the plan's)
// 16.6 / 17.3, 256: 21.4 / 22.7, 1024: 18.5 / 18.3; 8 x 1K 256 (the plan's) 13.6 / 14.2, 512: 13.9 /
// 13.9 (GQA 8: 14.8 / 15.5 and 14.9 / 14.9). No item size puts nvfp4 under the plan's fp8 there; at
// 8 x 1K 512-token items would take nvfp4 from 14.2 to 13.9 us (not applied: the plan is shared).
// With the few-blocks build (DecodeLaunch::tc_few_blocks) the plan's 256-token items win at 8 x 1K:
// 13.5 us against 14.1 for 512 (GQA 8: 15.0 against 15.3), so the plan stays as it is.

// The step build a launch uses: tc_steps, or 1 when every item of the plan is short
// (longest item = DecodeSplitPlan::chunk_tokens).
constexpr int decode_tc_steps(quant::ElemFormat kf, quant::ElemFormat vf, int head_dim, int item_tokens) {
  return item_tokens <= kTcShortItemTokens ? 1 : tc_steps(kf, vf, head_dim);
}

// Blocks per SM of the few-blocks build of the 32-token-step kernel (decode_attention_tc.cuh,
// kFewBlocks): its register budget (144 of 168 used), and the most blocks per SM a plan may put on it.
// 4 (128 registers, grids up to 4 blocks per SM) measured worse or equal (H200, graph replays, two
// runs, nvfp4 us, 3 -> 4): GQA 4 8 x 1K 12.7 -> 13.4, 1 x 16K 16.6 -> 16.8, GQA 8 1 x 16K 16.9 ->
// 17.1-17.2, 1 x 4K 11.4 -> 11.5-11.6; 128-token items at 8 x 1K (then 512 blocks, on this build)
// 17.8 / 18.2-18.3 us against 13.5 / 14.7 for fp8's plan.
inline constexpr int kTcFewBlocksPerSm = 3;

// Launches decode_attention_kernel (CUDA cores, exact f32 arithmetic; used for the f32 cache) for one
// format pair; head_dim (64/128/256) and the group tile (1/2/4/8) are dispatched inside.
template <quant::ElemFormat KF, quant::ElemFormat VF>
void launch_decode_attention(const DecodeKernelArgs& args, int head_dim, int max_group, dim3 grid, cudaStream_t stream);

// How a tensor-core block finds its work items, and where its output goes (DecodeLaunch::tc_items):
//   kOne    one item per unit (the plan's units are its items): the output row where the item holds
//           its whole sequence, else a partial row and lse for the split merge (decode_reduce.cu);
//   kUnits  the unit's items in turn (units that span sequences; the long-item builds);
//   kPair   every sequence has exactly two items, run by the two blocks of a thread block cluster,
//           which merge them through distributed shared memory and write the output: no merge
//           kernel (the long-item builds; decode_pair_merge.cuh).
enum class TcItems : int { kOne, kUnits, kPair };

// Launches decode_attention_tc_kernel (tensor cores) for one format pair; head_dim dispatched inside,
// steps = 16-token chunks per warp step (1, or 2 where tc_steps is 2; decode_tc_steps); few_blocks
// (where tc_steps is 2, either step size) = the few-blocks build (DecodeLaunch::tc_few_blocks); warps
// (kTcWarps; where tc_steps is 2, with 32-token steps and not few_blocks, also a long-item build's,
// and with 16-token steps and few_blocks kTcWideWarps, the short-item build: DecodeLaunch::tc_warps);
// one_p = p into P·V as one f16 (only where V is nvfp4: DecodeLaunch::tc_one_p); items = how blocks
// take the plan's items (DecodeLaunch::tc_items; kUnits and kPair only in the long-item builds).
// Instantiated in decode_attention_<fmt>.cu for bf16, fp8, nvfp4 and k8v4.
template <quant::ElemFormat KF, quant::ElemFormat VF>
void launch_decode_attention_tc(const DecodeKernelArgs& args, int head_dim, int steps, bool few_blocks, int warps,
                                bool one_p, TcItems items, int max_blocks_per_sm, dim3 grid, cudaStream_t stream);

// How many clusters of the long-item build of `warps` with TcItems::kPair (two blocks each) the
// device holds at once (cudaOccupancyMaxActiveClusters: a cluster needs room for both blocks in one
// GPC); 0 where the format pair and head_dim have no long-item builds. Queried once per build.
template <quant::ElemFormat KF, quant::ElemFormat VF>
int decode_tc_pair_clusters(int head_dim, int warps, bool one_p);

// The split-KV merge (decode_reduce.cu); a sequence of one work item is skipped (the decode kernel
// wrote it). max_items (the plan's max_splits) picks the kernel: up to 8 items one warp per query
// head (grid (num_seqs, ceil(num_q_heads / 4))), more a block per head (grid (num_seqs,
// num_q_heads)). programmatic: launched with programmatic stream serialization (PDL), so its blocks
// may be scheduled before the decode kernel ends (they wait for its results first). spread_sms > 0:
// at most ceil(blocks / spread_sms) merge blocks share an SM (DecodeLaunch::reduce_spread_sms).
void launch_decode_reduce(const DecodeKernelArgs& args, int num_seqs, int head_dim, int max_items, int spread_sms,
                          bool programmatic, cudaStream_t stream);

// One decode_attention call, validated and resolved (decode_attention.cpp): the kernel arguments and
// launch shapes. decode_attention() = prepare_decode_launch, launch_decode_kernel, then (split)
// launch_decode_reduce; the pieces exist apart so that a benchmark can time the kernel and the merge.
struct DecodeLaunch {
  DecodeKernelArgs args;
  quant::ElemFormat k_format;
  quant::ElemFormat v_format;
  int head_dim;
  int max_group;   // group tile of the CUDA-core (f32) kernel
  dim3 grid;       // CUDA-core kernel: (num_work, kv_heads · group_chunks)
  dim3 grid_tc;    // tensor-core kernel: num_units · kv_heads · group_chunks blocks
  int num_seqs;
  bool split;      // the reduce kernel must run: some sequence has > 1 work item, and they are not pairs (kPair)
  int max_splits;  // most work items of one sequence (the plan's)
  // 16-token chunks per warp step of the tensor-core kernel (decode_tc_steps: 1 or 2); a benchmark
  // may override it before launch_decode_kernel to compare both builds on one plan.
  int tc_steps;
  // Where tc_steps(format, head_dim) is 2 (nvfp4 d64, d128), with either step size: the few-blocks build
  // (decode_attention_tc.cuh, kFewBlocks; with 16-token steps it also decodes V before the softmax), for plans of short
  // items (< kDecodeLongItemTokens, sized for kDecodeMemoryBoundBlocksPerSm blocks per SM) whose grid
  // fits kTcFewBlocksPerSm blocks on each of the plan's SMs (DecodeSplitPlan::num_sms). A benchmark
  // may clear it to time the any-plan build.
  bool tc_few_blocks;
  // Warps per block: kTcWarps, or a long-item build's (kTcWideWarps, kTcSmWarps) where tc_steps is 2
  // and the plan was sized for it (DecodeSplitPlan::block_warps), or kTcWideWarps with 16-token steps
  // and few_blocks for a plan of one to four chunks per warp (the short-item build, decode_short_item_warps).
  int tc_warps = kTcWarps;
  // > 0: the tensor-core kernel's shared memory is raised so that at most this many blocks share an
  // SM (DecodeAttentionParams::spread_blocks); 0: as many as fit.
  int max_blocks_per_sm = 0;
  // The softmax weights enter P·V as one f16 (decode_attention_tc.cuh, kOneP): where V is nvfp4 and
  // DecodeAttentionParams::exact_p is off.
  bool tc_one_p = false;
  // How the blocks take the plan's items (TcItems): kUnits where the plan's units span sequences
  // (DecodeSplitPlan::spans_units: the long-item build's units loop); kPair where a long-item plan
  // gives every sequence two items, DecodeAttentionParams::pair_merge is on and the device holds all
  // the grid's pairs at once (decode_tc_pair_clusters); else kOne.
  TcItems tc_items = TcItems::kOne;
  // > 0: the split merge's blocks are spread over this many SMs (launch_decode_reduce; the plan's
  // SMs, decode_attention.cpp), so that its blocks, scheduled early (PDL), do not crowd onto the
  // few SMs with room beside the decode blocks; 0: as many per SM as fit.
  int reduce_spread_sms = 0;
};

// Throws nibble::Error naming the problem (decode_attention's checks).
DecodeLaunch prepare_decode_launch(const DecodeAttentionParams& params);
// The decode kernel of the launch's format pair (no reduce).
void launch_decode_kernel(const DecodeLaunch& launch, cudaStream_t stream);

}  // namespace nibble::cuda::detail
