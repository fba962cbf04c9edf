#pragma once
// Tensor-core paged decode attention (bf16, fp8, nvfp4, k8v4 caches; f32 uses the CUDA-core kernel
// in decode_attention.cuh). Host entry point: decode_attention.h.
//
// Work decomposition: one block (kWarps: 4, or 8 or 16 in nvfp4's long- and short-item builds) = one work item
// of the split plan × one KV head × up to 8 query heads of its GQA
// group; a 1-D grid with the head chunks of an item in consecutive blocks. Each warp streams its own
// steps of kSteps 16-token chunks (tc_steps: 2 for nvfp4 at head_dim 64 and 128, else 1; steps w, w +
// kWarps, ...) through a private ring of cp.async stages (tc_geometry: 2..8 stages), so there is no
// block barrier in the main loop; the warps' (m, l, O) are merged once at the end
// (decode_tc_epilogue.cuh).
//
// Per 16-token chunk, one warp (one softmax per step):
//   QK  mma.sync m16n8k16, A = Q (rows 0-7 = the 8 heads' high halves, rows 8-15 = their low
//       halves: q = hi + lo in f16/bf16 gives ~22/16 significant bits at no extra MMA cost),
//       B = K^T (8 tokens per n-tile, 2 n-tiles). K is decoded from shared memory straight into B
//       fragments: bf16 as is, fp8 by the hardware e4m3x2 -> f16x2 convert, nvfp4 by integer bit
//       placement (e2m1_decode.h) times the block scale in f16. The reduction order of head_dim
//       inside a k-step is free, so every thread reads whole 16-byte pieces of its token's row and
//       Q's fragments are permuted the same way (k_dim()).
//       Where K is nvfp4 and the exact mode is off (kOneQ), transposed instead: S^T = K · Q^T with
//       A = K (the chunk's 16 tokens as rows, the same decoded registers), B = Q^T as one f16 (8
//       heads as columns, in registers), one MMA per k-step; P^T's B fragments then come from two
//       movmatrix transposes of the f16 p.
//   softmax  online, in registers (a quad of lanes holds one head's 16 scores; kOneQ: 8 lanes hold
//       two heads' scores), exp2 domain; the running max moves only when a score exceeds it by
//       more than kMaxSlack, so most steps need no cross-lane max and no rescale.
//   PV  transposed, O^T += V^T · P^T (pv_pair): A = V^T (16 dims × 16 tokens: two V n-tiles),
//       B = P^T straight from the QK accumulators (hi and lo halves: two MMAs; one f16, one MMA,
//       where V is nvfp4: kOneP), so O^T takes
//       head_dim/16 accumulator tiles (32 registers at head_dim 128, half of P in A). Token pairs at
//       one dim are built with byte permutes, then converted as for K.
// Values are exact in f16 (fp8 units; nvfp4 units · 2^-8), so the only rounding is f32 accumulation
// and the hi/lo splits of q and p (p rounded once to f16 where V is nvfp4, q where K is nvfp4).
//
// Shared memory (bytes, tc_geometry): qfrag [head_dim/16][32 lanes] uint4 (Q A-fragments; kOneQ:
// Q^T's B fragments [head_dim/16][32] uint2 in its first half, read once into registers; aliased
// by the q staging [8][head_dim] f32 (q_swz layout) in the prologue, the same 32·head_dim bytes), m/l
// [kWarps][8] f32 each, then work: the stages [kWarps][stages][stage] — aliased by the reduction
// [kWarps][8][head_dim] f32 in the epilogue; kPair blocks then have an inbox for the partner's rows
// (decode_pair_merge.cuh). The stages never alias the q staging, so the first KV chunks are copied
// while q is loaded and turned into fragments.
//
// Launch: programmatic dependent launch (decode_attention_launch.cuh). A block reads the plan and
// its first page-table entry, copies (with a.prefix_ready) its first chunks that end before the
// sequence's last token, then griddepcontrol.wait (the previous kernel's q / last token), then
// loads q and, once its q has arrived, issues its other first copies; it triggers its dependents
// (the split merge) at its start.
// Tried and reverted (H200, 2026-12-01): the step's KV write folded into this kernel (q's RoPE in the
// prologue's staging, the warp holding a sequence's last chunk rotating, quantizing and storing the
// new token with kv_write.cuh's functions before copying it back; bit for bit the two kernels'
// result). ~1 us per layer less than the same kernel with the write kernel before it, but the
// write's code slowed every decode (inlined: 1 x 1K nvfp4 8.8 -> 9.3 us, bf16 9.4 -> 9.7, the 8B
// step at nvfp4 32K +3.6%; out of line: the writer's call and read-back made the decode link 7.94 us
// against 1.3-1.5 + 5.9 for both kernels): net -0.6% to +1.1% per step (PERFORMANCE.md, twelfth round).
// A stage = K data [16][kKRow] | K scales [16][kKScaleRow] | V data [16][kVRow] | V scales [16][..];
// data regions are XOR-swizzled in 16-byte pieces within 128-byte lines (k_swz / v_swz) so the
// fragment reads are free of bank conflicts; the copies that fill a stage: decode_tile_copy.cuh.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <type_traits>

#include "backend/cuda/decode_attention.cuh"  // cp.async helpers, hadamard_rows_smem
#include "backend/cuda/decode_kernel_args.h"
#include "backend/cuda/decode_pair_merge.cuh"     // cluster_arrive_relaxed (TcItems::kPair)
#include "backend/cuda/decode_tc_epilogue.cuh"    // the warps' merge and the stores
#include "backend/cuda/decode_tc_fragments.cuh"  // K / V^T fragments, MMAs
#include "backend/cuda/decode_tc_traits.cuh"     // TcTraits, kMaxSlack, fast_exp2, q_swz
#include "backend/cuda/decode_tile_copy.cuh"

namespace nibble::cuda::detail {

using quant::ElemFormat;

// kSteps: 16-token chunks per warp step (1 or 2, tc_steps): warp w takes chunks kSteps·w ..
// kSteps·w + kSteps - 1, then kSteps·(w + 4) ..; one softmax, one rescale vote and one ring wait per
// step, and two chunks' MMA chains to interleave.
//
// kFewBlocks (DecodeLaunch::tc_few_blocks; nvfp4 at head_dim 64 and 128): the build for plans of at most
// kTcFewBlocksPerSm blocks per SM (the short shapes, where each scheduler has 2-3 warps and a block's
// few steps wait on its prologue): registers of 3 blocks (144 instead of 122, the compiler schedules
// the K decode more freely) and the prologue's last copy deferred to the first step (kDefer).
// Measured on the H200 (2026-11-30, graph replays, GQA 4, nvfp4 us, fp8 beside it): the registers alone
// 1 x 4K 11.5 -> 11.4 (fp8 11.2), 1 x 16K 17.3 -> 17.0 (16.6), 8 x 1K 14.2 -> 13.9 (13.6); with the
// deferred copy 10.7 (10.8), 16.5 (16.6), 13.5 (13.6); GQA 8: 11.4 (11.4), 17.0 (16.9), 15.0 (14.7).
// What else was tried in this build and rejected (the next step's K decoded during this one, a
// 7-stage ring, the copies ahead of step 0 after its data, the dependents' trigger later):
// docs/cuda_kernels.md, "nvfp4 at head_dim 128: 32 tokens per warp step".
//
// kOneP (DecodeLaunch::tc_one_p: V in nvfp4, unless DecodeAttentionParams::exact_p): the softmax
// weights enter P·V as one f16 (11 significant bits) instead of hi + lo halves, one P·V MMA per V
// tile pair instead of two. The rounding adds at most 2^-12 · max|V| to an output (relative to p,
// in the numerator only; l sums the f32 p), three orders of magnitude below the format's own error
// (E2M1 steps are 1/4 to 1/2 of the value); the issue-bound loop gains (H200, 2026-12-01, graph
// replays, nvfp4 us, hi + lo -> one f16: GQA 8 32 x 32K 393.5 / 392.9 -> 366.6, 8 x 32K 109.3 /
// 108.5 -> 102.2; GQA 4 32 x 32K 391.1 -> 363.8, 8 x 32K 108.2 -> 101.5, 128 x 16K 752.0 -> 696.9).
// bf16 and fp8 blocks are memory-bound and always take the hi/lo pair. Tried first, same day: for
// groups of <= 4 heads, p's hi halves in B columns 0-3 and its lo halves in the empty columns 4-7
// (heads 0-3 repeated in Q's rows 4-7), one MMA and exact: GQA 4 32 x 32K 375.2 us, GQA 8 nothing;
// and two QK MMA chains per tile in the 32-token step: 389.5 vs 376.7 us, 4 bytes spilled.
//
// kWarps: warps per block, kTcWarps or (the long-item builds, DecodeLaunch::tc_warps) kTcWideWarps, kTcSmWarps;
// kTcWideWarps also in the short-item build (kSteps 1, kFewBlocks; decode_short_item_warps): items of
// 1-4 16-token chunks per warp (+1 for a joined tail), one block per SM (docs/cuda_kernels.md).
//
// kItems (DecodeLaunch::tc_items): one item per block (kOne), a unit's items in turn (kUnits), or the
// two items of a sequence in the two blocks of a cluster, merged there (kPair, decode_pair_merge.cuh).
template <ElemFormat KF, ElemFormat VF, int kHeadDim, int kSteps, bool kFewBlocks = false, bool kOneP = false,
          int kWarps = kTcWarps, TcItems kItems = TcItems::kOne>
__global__ void __launch_bounds__(32 * kWarps, !kFewBlocks ? TcTraits<KF, VF, kHeadDim, kWarps, kSteps>::kMinBlocks
                                                : kWarps == kTcWarps ? kTcFewBlocksPerSm : 1)
    decode_attention_tc_kernel(DecodeKernelArgs a) {
  static_assert(kWarps == kTcWarps || ((kWarps == kTcWideWarps || kWarps == kTcSmWarps) && kSteps == 2 && !kFewBlocks) ||
                    (kWarps == kTcWideWarps && kSteps == 1 && kFewBlocks),
                "wide blocks only in the long-item builds (32-token steps) and the short-item one (16-token steps, "
                "few blocks)");
  static_assert(kItems == TcItems::kOne || (kWarps != kTcWarps && kSteps == 2 && !kFewBlocks),
                "units of several items and cluster pairs: long-item builds");
  constexpr bool kUnits = kItems == TcItems::kUnits;
  constexpr bool kPair = kItems == TcItems::kPair;
  constexpr int kThreads = 32 * kWarps;
  using T = TcTraits<KF, VF, kHeadDim, kWarps, kSteps>;
  constexpr int kOT = T::kNTiles / 2;  // O^T accumulator tiles (pv_pair)
  static_assert(kSteps == 1 || kSteps == 2, "1 or 2 chunks per step");
  static_assert(T::kStages > kSteps, "the ring must hold a step plus at least one chunk in flight");
  static_assert(!kOneP || VF == ElemFormat::kNVFP4, "p as one f16 only where V is nvfp4");
  // kOneQ: the same non-exact build where K is nvfp4 too: q enters Q·K^T as one f16, and Q·K^T runs
  // transposed (S^T = K · Q^T, the chunk's 16 tokens as the MMA's rows, the heads as its 8 columns):
  // one MMA per k-step instead of one per 8-token tile, and a lane holds heads 2c, 2c+1 (kLaneHeads).
  constexpr bool kOneQ = kOneP && KF == ElemFormat::kNVFP4;
  constexpr int kLaneHeads = kOneQ ? 2 : 1;  // softmax states per lane: head g, or heads 2c and 2c+1
  // The lanes sharing a head's scores differ in lane bits [log2 kFirstLane, log2 kLastLane): the 8
  // lanes of column c (kOneQ) or the 4 lanes of row g; reductions shuffle over those bits.
  constexpr int kFirstLane = kOneQ ? 4 : 1, kLastLane = kOneQ ? 32 : 4;
  constexpr int D = kHeadDim;
  extern __shared__ uint4 smem_u4[];
  uint8_t* smem = reinterpret_cast<uint8_t*>(smem_u4);
  uint4* qfrag = smem_u4;                                            // [kKSteps][32]
  float* m_w = reinterpret_cast<float*>(smem + T::kQFragBytes);      // [kWarps][8]
  float* l_w = m_w + kWarps * 8;                                     // [kWarps][8]
  uint8_t* work = smem + T::kQFragBytes + 2 * kWarps * 8 * 4;        // stages | reduction
  float* inbox = reinterpret_cast<float*>(smem + T::kSmemBytes);     // kPair: kPairInboxBytes, past the geometry's
  // q staging [8][D] f32 aliases qfrag (both 32·D bytes), not the stages: the first KV chunks are
  // copied while q is loaded and turned into fragments (the two latency chains overlap).
  float* q_s = reinterpret_cast<float*>(smem_u4);                    // [8][D] prologue only
  static_assert(8 * kHeadDim * 4 == T::kQFragBytes, "q staging must fit the qfrag region exactly");

  // The split merge (launched programmatically behind this kernel) may be scheduled now: it waits
  // for this grid's completion before reading anything this grid writes. Without splits the
  // dependent is the stream's next kernel, scheduled now only when the caller asks for it
  // (early_dependents, as the merge's trigger); otherwise at this grid's completion. Triggering at
  // the start regardless let bench_decode_attention's next call (early_dependents off) park its
  // blocks beside this one's: H200, 2026-12-01, graph replays, GQA 4 32 x 1K (one 1024-token item
  // per sequence) bf16 / fp8 / nvfp4 41.9 / 24.6 / 25.5 -> 36.7 / 22.5 / 20.3 us (nvfp4 / fp8 1.037
  // -> 0.902); 64 x 1K bf16 / fp8 / nvfp4 67.4 / 37.4 / 32.5 -> 68.8 / 38.2 / 33.8 (the next call no
  // longer fills this one's tail). The engine's step (early_dependents on) is unchanged; there the
  // late trigger measured within noise (bench_model_decode modes 0 / 5, batch 32-64 x 1K, 32 x 4K).
  if (a.trigger_at_start) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  // kPair: the partner may write this block's inbox once both have arrived here (decode_pair_merge.cuh).
  if constexpr (kItems == TcItems::kPair) cluster_arrive_relaxed();
  // 1-D grid of num_units × (kv_heads · group_chunks) blocks: the head chunks of one unit are
  // consecutive blocks, so they run together and read the same pages (measured 0-2% faster than
  // items first, most at short contexts).
  // The unit's items run one after the other (DecodeSplitPlan::unit_first_item): in the long-item
  // builds (kUnits, below) a plan's units may span sequences (decode_plan.h, "Spanning units"); every
  // other build runs one item per unit (the launch checks), without the extra read. Every item waits
  // for the previous kernel (griddepcontrol.wait returns at once after the first) and may copy its
  // chunks before the last token's before that wait. The loop costs the 8- and 16-warp builds, which
  // run at the register file's bound (128 per thread), 28-64 bytes spilled in the prologue and ~4%
  // on the same plan (32 x 32K, one item per unit: 307.6 against 294.6 us; H200, 2026-12-02), which
  // is why it has instantiations of its own. Tried there and no better: the loop's bounds read again
  // per item, the first item peeled (120-152 bytes), the block's indices read per item through
  // volatile moves (44-76), the per-item body not inlined (80-152), one Q·K^T chain.
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int g = lane / 4, c = lane % 4;
  // kPair: blocks 2p and 2p + 1 (one cluster; rank = blockIdx.x % 2) take items 0 and 1 of sequence
  // p / head_chunks (the plan's items 2·seq and 2·seq + 1), head chunk p % head_chunks.
  const int head_chunks = gridDim.x / a.num_units;
  const int rank = static_cast<int>(blockIdx.x & 1u), pair = static_cast<int>(blockIdx.x >> 1);
  const int unit = kPair ? 2 * (pair / head_chunks) + rank : blockIdx.x / head_chunks;
  const int head_chunk = kPair ? pair % head_chunks : blockIdx.x - unit * head_chunks;
  const int kv_head = head_chunk / a.group_chunks;
  const int chunk_of_group = head_chunk % a.group_chunks;
  const int q_head0 = kv_head * a.group + chunk_of_group * kMaxGroupPerBlock;
  const int n_heads = min(kMaxGroupPerBlock, a.group - chunk_of_group * kMaxGroupPerBlock);
  auto run_item = [&](const int item) {
    const int seq = a.work_seq[item];
    const int begin = a.work_begin[item];
    const int end = a.work_end[item];
    const int32_t* page_table = a.page_tables + static_cast<int64_t>(seq) * a.max_pages_per_seq;

    // Main-loop geometry: this warp's steps w, w+4, ... (kSteps chunks each) through its ring of stages.
    constexpr int kStepTokens = kSteps * kTcChunk;
    const int n_steps = (end - begin + kStepTokens - 1) / kStepTokens;
    const int n_local_steps = n_steps > warp ? (n_steps - warp + kWarps - 1) / kWarps : 0;
    const int n_local = kSteps * n_local_steps;  // chunks, a last step's empty tail chunk included
    uint8_t* ring = work + warp * T::kStages * T::kStageBytes;
    const cache::KvPartLayout& KL = a.k_layout;
    const cache::KvPartLayout& VL = a.v_layout;

    // Chunk cursor of this warp: the first token of its next chunk to copy (cursor_tok) and where that
    // chunk lies (page, slot), found one of two ways:
    //  - kPageBatches (nvfp4 d128, whose loop is issue-bound): the pages and slots of the warp's chunks
    //    come from the page table 32 chunks at a time, one per lane (ChunkPageBatches in
    //    decode_tile_copy.cuh), the next batch read when the current one starts, 32 chunks ahead of
    //    its use; a copy takes its pair by two shuffles.
    //    H200, 2026-12-01, graph replays, GQA 4, nvfp4 us, the constant-time advance below -> batches:
    //    32 x 32K 336.5 / 335.9 -> 327.5 / 326.6, 8 x 32K 94.5 -> 92.2 / 92.1, 8 x 128K 337.3 / 336.6
    //    -> 328.3 / 327.6, 32 x 4K 53.4 / 53.3 -> 52.5 / 52.3, short shapes equal. The memory-bound
    //    formats lost with it (fp8 32 x 32K 480.2 -> 491.5, 8 x 128K 483.5 -> 497.6; k8v4 8 x 32K
    //    108.4 -> 112.8; bf16 equal), so they keep the advance. The batch in shared memory (one
    //    broadcast load per copy instead of two shuffles and their convergence check) measured
    //    slower: 32 x 32K 312.1 -> 314.1 us, 8 x 32K 88.8 -> 89.1.
    //  - otherwise a constant-time advance: the page-table entry (a pointer), slot and page of the next
    //    chunk, the page read ahead of its use; no division, all offsets inside a page 32-bit. (The entry
    //    as a pointer rather than an index: the index form recomputed the 64-bit address from seq ·
    //    max_pages_per_seq at every lookup.)
    // ncu, nvfp4 d128, 32 x 32K GQA 4 (H200, 2026-11-30): the copy + cursor code was 155 of 943
    // instructions per 32-token step and 28% of the stall samples (a page walk loop, the page lookup
    // waited for by the next copy, int64 address math). With the constant-time advance, the late second
    // copy, the pointer, the 32-bit page base and the branch-free scale copy: 472 -> 445 instructions
    // per 16 tokens, kernel 420 -> 394 us, DRAM 60 -> 64% (graph replays 424 -> 397 us).
    constexpr bool kPageBatches = T::kLeanCopy;
    const int page_size = static_cast<int>(KL.page_size);
    const int k_off = static_cast<int>(KL.data_at(kv_head, 0));
    const int ks_off = static_cast<int>(KL.scales_at(kv_head, 0));
    const int v_off = static_cast<int>(VL.data_at(kv_head, 0));
    const int vs_off = static_cast<int>(VL.scales_at(kv_head, 0));
    int cursor_tok = begin + warp * kStepTokens;
    constexpr int kNextStep = kTcChunk * (kSteps * (kWarps - 1) + 1);  // to the warp's next step
    ChunkPageBatches<kSteps, kWarps> batches{page_table, page_size, begin, end, warp, lane};
    if constexpr (kPageBatches) batches.start();
    // Otherwise: the next chunk's slot, page-table entry and page, and the advance to the warp's next
    // step in whole pages and remaining slots (page_size is a multiple of 16, so a 16-token advance
    // wraps exactly).
    const int cursor_pidx0 = kPageBatches ? 0 : cursor_tok / page_size;
    int cursor_slot = cursor_tok - cursor_pidx0 * page_size;
    const int32_t* cursor_pt = page_table + cursor_pidx0;
    int32_t cursor_page = !kPageBatches && cursor_tok < end ? *cursor_pt : 0;
    const int next_pages = kNextStep / page_size;
    const int next_slots = kNextStep - next_pages * page_size;

    // ---- prologue copies of chunks that hold no token of this step, before the wait ---------------------
    const uint32_t ring_s = static_cast<uint32_t>(__cvta_generic_to_shared(ring));
    LeanCopyLane lean{};
    if constexpr (T::kLeanCopy) lean = lean_copy_lane<T>(lane, k_off, ks_off, v_off, vs_off);
    // Copies local chunk j (the cursor's) into stage `slot`, then advances the cursor by `advance`
    // tokens (16 inside a step, to the warp's next step after its last chunk). A chunk wholly past the
    // end (a step's tail) is zero-filled: its scores are masked and its V is zero.
    auto issue = [&](int slot, int j, int advance) {
      int page = cursor_page;
      if constexpr (kPageBatches) batches.take(j, j > 0, page, cursor_slot);
      const int n_valid = min(kTcChunk, end - cursor_tok);
      // 32-bit page index and page size (both checked on the host), one 32 x 32 + 64-bit multiply-add
      // (page_address; the int64 form cost a sign extension and two more multiplies per pointer).
      const uint8_t* page_base =
          page_address(a.pool, static_cast<uint32_t>(page), static_cast<uint32_t>(a.page_bytes));
      uint8_t* st = ring + slot * T::kStageBytes;
      if (T::kLeanCopy && n_valid == kTcChunk) {  // warp-uniform
        lean_copy_chunk<T>(ring_s + slot * T::kStageBytes, page_base, static_cast<uint32_t>(cursor_slot), lean);
      } else if (T::kFastCopy && n_valid == kTcChunk) {  // warp-uniform
        copy_chunk<T, true>(st, page_base, cursor_slot, k_off, ks_off, v_off, vs_off, n_valid, lane);
      } else {
        copy_chunk<T, false>(st, page_base, cursor_slot, k_off, ks_off, v_off, vs_off, n_valid, lane);
      }
      cursor_tok += advance;
      if constexpr (!kPageBatches) {
        // Constant time (advance is kTcChunk or kNextStep after unrolling): a page walk loop here took
        // 2 (page 64) to 7 (page 16) iterations per step.
        const bool next_step = advance != kTcChunk;
        cursor_slot += next_step ? next_slots : kTcChunk;
        cursor_pt += next_step ? next_pages : 0;
        bool new_page = next_step && next_pages > 0;
        if (cursor_slot >= page_size) {
          cursor_slot -= page_size;
          ++cursor_pt;
          new_page = true;
        }
        // A later page: look it up now, ahead of its use (tokens only grow: once past the end, no
        // chunk reads a page again).
        if (new_page && cursor_tok < end) cursor_page = *cursor_pt;
      }
    };
    // issue for a chunk known to be full (the steady steps below): no partial-chunk branch, and the
    // cursor is not advanced (the steady loop sets it when it ends). may_switch: j can be a multiple
    // of 32 (known per unrolled copy: j modulo kSteps is fixed in a step). Those two and the step's
    // token count also left to the loop's end: H200, 2026-12-01, graph replays, nvfp4 us, 32 x 32K
    // 307.9 / 310.5 -> 305.1 / 305.7, 8 x 32K 87.8 / 88.4 -> 87.2 / 87.6, 8 x 128K 309.2 / 311.7 ->
    // 307.1 / 309.2.
    auto issue_full = [&](int slot, int j, bool may_switch) {
      static_assert(!kPageBatches || T::kLeanCopy, "the steady steps copy by lean_copy_chunk");
      if constexpr (kPageBatches) {
        int page, page_slot;
        batches.take(j, may_switch, page, page_slot);  // j > 0 here
        const uint8_t* page_base =
            page_address(a.pool, static_cast<uint32_t>(page), static_cast<uint32_t>(a.page_bytes));
        lean_copy_chunk<T>(ring_s + slot * T::kStageBytes, page_base, static_cast<uint32_t>(page_slot), lean);
      }
    };
    // Token advance after local chunk j: the next chunk of the step, or the first of the warp's next step.
    auto advance_after = [](int j) { return (j % kSteps) == kSteps - 1 ? kNextStep : kTcChunk; };

    // Prologue copies: local chunks 0 .. kStages - kSteps - 1, one commit group each (kDefer: see
    // below). With a.prefix_ready the leading ones that end before the sequence's last token (written
    // by the kernel this one waits for) are issued here, before griddepcontrol.wait, so that their
    // DRAM latency overlaps the previous kernel's tail instead of following the wait; the rest after
    // it. The groups are committed in chunk order either way.
    constexpr int kPrologue = T::kStages - kSteps;
    // (The whole ring in the long-item builds' prologue: slower; PERFORMANCE.md, twentieth round.)
    // kFewBlocks: the last prologue chunk (local chunk kStages - kSteps - 1, the first of the next
    // step) is issued at the first step instead, after the q fragments (its own commit group, in
    // cursor order).
    constexpr int kDefer = kFewBlocks && kSteps == 2 ? 1 : 0;
    static_assert(kPrologue - kDefer >= kSteps, "step 0 stays in the prologue");
    int n_early = 0;  // prologue chunks copied before the wait
    if (a.prefix_ready) {
      const int seq_last = a.work_end[a.seq_work_offset[seq + 1] - 1] - 1;  // the token this step writes
#pragma unroll
      for (int s = 0; s < kPrologue - kDefer; ++s) {
        if (s < n_local && batches.chunk_tok(s) + kTcChunk <= seq_last) n_early = s + 1;
      }
    }
#pragma unroll
    for (int s = 0; s < kPrologue; ++s) {
      if (s < n_early) {
        issue(s, s, advance_after(s));
        cp_async_commit();
      }
    }
    // Launched programmatically (PDL): everything above reads only the step's plan and page tables,
    // which no kernel of the step writes, and (prefix_ready) KV of tokens no running kernel writes;
    // q and the rest of the KV pages are the previous kernels' outputs.
    asm volatile("griddepcontrol.wait;" ::: "memory");

    // ---- q loads (registers); once they are in, the other prologue copies; q -> fragments ---------------
    constexpr int kQPerThread = 8 * D / kThreads;  // q elements (of 8 heads × D) per thread
    float q_reg[kQPerThread];
#pragma unroll
    for (int j = 0; j < kQPerThread; ++j) {
      const int i = tid + j * kThreads;
      const int h = i / D, d = i % D;
      float x = 0.0f;
      if (h < n_heads) {
        const int64_t at = (static_cast<int64_t>(seq) * a.num_q_heads + q_head0 + h) * D + d;
        x = a.q_is_bf16 ? __bfloat162float(static_cast<const __nv_bfloat16*>(a.q)[at])
                        : static_cast<const float*>(a.q)[at];
      }
      q_reg[j] = x;
    }

    // The prologue copies not issued before the wait, called after the warp's q stores below: those
    // wait for q's values, and the __syncwarp keeps the copies from being scheduled ahead of them. Not
    // beside the q loads: a load issued while the block's copies are outstanding returns behind them.
    // H200, 2026-12-02, a per-block %globaltimer trace of the benchmark (no copies before the wait
    // there): thread 0's q arrived 3.7 us after the wait with the copies issued right behind its
    // loads, 0.4-0.5 us with them after; graph replays: PERFORMANCE.md, twenty-second round. (With
    // prefix_ready, the copies already outstanding before the wait delay q the same way, ~2.7 us.)
    auto other_prologue_copies = [&] {
      __syncwarp();
#pragma unroll
      for (int s = 0; s < kPrologue; ++s) {
        if (s >= n_early) {
          if (s < kPrologue - kDefer && s < n_local) issue(s, s, advance_after(s));
          cp_async_commit();
        }
      }
    };
    const int n_items = a.seq_work_offset[seq + 1] - a.seq_work_offset[seq];  // epilogue only

    // ---- q -> f32 staging (rotated, scaled; q_swz layout), then hi/lo A fragments ------------------------
    // Tried and reverted for kOneQ without rotation (H200, 2026-12-01): each lane loading only its own
    // Q^T elements from global memory (32 scalar loads at head_dim 128, every warp the whole block) and
    // building q_t in registers, with no staging and no barrier. Correct, but slower everywhere
    // (scattered loads after the wait instead of one coalesced pass): nvfp4 graph replays GQA 4 1 x 1K
    // 8.8 -> 9.9 us, 1 x 32K 21.6 -> 23.6, 8 x 32K 94.5 -> 98.5, 32 x 32K 336 -> 344. A trace of the
    // kernel's phases (PERFORMANCE.md, seventeenth round) puts ~3.3 us between the wait and the
    // staged q at 8 x 32K in the benchmark, where q has left L2.
    // Element i = tid + j·kThreads of the [8][D] q block is q_reg[j]. Rotation runs on the natural
    // layout in shared memory; without it the values go from registers straight to the swizzled one.
    const float q_mult = a.q_multiplier * T::kKUnitMult;
    float amax = 0.0f;
    if (a.rotate) {  // block-uniform
#pragma unroll
      for (int j = 0; j < kQPerThread; ++j) q_s[tid + j * kThreads] = q_reg[j];
      other_prologue_copies();
      __syncthreads();
      hadamard_rows_smem(q_s, 8, D);  // ends with a barrier
      float x[kQPerThread];
#pragma unroll
      for (int j = 0; j < kQPerThread; ++j) {
        x[j] = q_s[tid + j * kThreads] * q_mult;
        amax = fmaxf(amax, fabsf(x[j]));
      }
      __syncthreads();  // every natural-layout read done before the swizzled writes
#pragma unroll
      for (int j = 0; j < kQPerThread; ++j) {
        const int i = tid + j * kThreads;
        q_s[q_swz<D>(i / D, i % D)] = x[j];
      }
    } else {
#pragma unroll
      for (int j = 0; j < kQPerThread; ++j) {
        const int i = tid + j * kThreads;
        const float x = q_reg[j] * q_mult;
        q_s[q_swz<D>(i / D, i % D)] = x;
        amax = fmaxf(amax, fabsf(x));
      }
      other_prologue_copies();
    }
#pragma unroll
    for (int off = 16; off > 0; off /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, off));
    if (lane == 0) m_w[warp] = amax;
    __syncthreads();  // m_w and the staging written
    amax = m_w[0];
#pragma unroll
    for (int w = 1; w < kWarps; ++w) amax = fmaxf(amax, m_w[w]);
    // f16 Q: scale by 2^e so that |q| < 2^14 (no overflow, low halves stay normal); bf16 needs none.
    int e = 0;
    if (!T::kQkBf16 && amax > 0.0f && isfinite(amax)) {
      int x_exp;
      frexpf(amax, &x_exp);
      e = 14 - x_exp;
    }
    const float q_pow = ldexpf(1.0f, e), score_mult = ldexpf(1.0f, -e);
    // This warp's k-steps warp, warp + 4, ...: read every value first (the fragments overwrite the
    // staging they alias), then write.
    constexpr int kQkPerWarp = (T::kKSteps + kWarps - 1) / kWarps;
    uint4 frag[kQkPerWarp];
#pragma unroll
    for (int k = 0; k < kQkPerWarp; ++k) {
      const int ks = warp + k * kWarps;
      if (ks < T::kKSteps) {
        uint32_t r[4];
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int reg = 2 * ks + half;
          const float x0 = q_s[q_swz<D>(g, k_dim<KF, D>(c, reg, 0))] * q_pow;
          const float x1 = q_s[q_swz<D>(g, k_dim<KF, D>(c, reg, 1))] * q_pow;
          split_pair<T::kQkBf16>(x0, x1, r[2 * half], r[2 * half + 1]);  // rows g (hi) and g+8 (lo)
        }
        frag[k] = make_uint4(r[0], r[1], r[2], r[3]);
      }
    }
    __syncthreads();  // every staging read done: the fragments may overwrite it
    // kOneQ: the hi halves alone, as Q^T's B fragments (column = head g; rows 2c, 2c+1 | 2c+8, 2c+9 of
    // the k-step are the A fragment's columns of the same lane): [kKSteps][32] uint2.
    uint2* qfrag_t = reinterpret_cast<uint2*>(smem_u4);
#pragma unroll
    for (int k = 0; k < kQkPerWarp; ++k) {
      const int ks = warp + k * kWarps;
      if (ks < T::kKSteps) {
        if constexpr (kOneQ) {
          qfrag_t[ks * 32 + lane] = make_uint2(frag[k].x, frag[k].z);
        } else {
          qfrag[ks * 32 + lane] = frag[k];
        }
      }
    }
    __syncthreads();  // qfrag ready

    // kOneQ: Q^T's B fragments live in registers for the whole loop (2 per k-step: 16 at head_dim 128).
    // H200, 2026-12-01, graph replays, nvfp4 us, from shared memory at every chunk -> registers: GQA 4
    // 32 x 32K 348.1 / 346.7 -> 333.8 / 335.4, GQA 8 8 x 128K 349.7 / 350.3 -> 337.2 / 336.7 (126
    // registers, no spill, at the 4-blocks bound of 128).
    uint2 q_t[kOneQ ? T::kKSteps : 1];
    if constexpr (kOneQ) {
#pragma unroll
      for (int ks = 0; ks < T::kKSteps; ++ks) q_t[ks] = qfrag_t[ks * 32 + lane];
    }
    float o[kOT][4];
#pragma unroll
    for (int nt = 0; nt < kOT; ++nt) o[nt][0] = o[nt][1] = o[nt][2] = o[nt][3] = 0.0f;
    // The running max and sum of this lane's heads (head g, or kOneQ heads 2c + j); l_run sums only
    // this lane's tokens until the epilogue.
    // m_run is kept in the scores' own unit (Q·K^T with q scaled by q_pow = 2^e, score_mult = 2^-e
    // back to the log2 domain) and neg_m = -m_run · score_mult: each p is one FFMA and one exp2, and
    // every value is as with the scores scaled first (powers of two commute with rounding). 4 FMULs
    // fewer per 16 tokens; with the p sums started from the first p (no 0 + p) and two V row
    // addresses instead of four (nvfp4_v_words): H200, 2026-12-01, graph replays, nvfp4 us, GQA 4
    // 32 x 32K 318.8 / 320.0 -> 311.8 / 312.4, 8 x 32K 90.2 / 90.4 -> 88.7 / 88.9, 8 x 128K 319.6 /
    // 320.1 -> 313.2 / 313.4; GQA 8 256 x 32K 2368 / 2367 -> 2325 / 2322; bf16, fp8, k8v4 equal.
    // (The fourteenth round measured the folding alone within noise, on a longer loop.)
    float m_run[kLaneHeads], l_run[kLaneHeads], neg_m[kLaneHeads];
#pragma unroll
    for (int j = 0; j < kLaneHeads; ++j) m_run[j] = -INFINITY, l_run[j] = 0.0f, neg_m[j] = INFINITY;
    const float slack = kMaxSlack * q_pow;  // kMaxSlack in the scores' unit

    constexpr int kLateIssue = kSteps > 1 ? 1 : 0;
    int read_slot = 0, write_slot = T::kStages - kSteps;  // stage of chunk i, of chunk i + kStages - kSteps
    int step_tok = begin + warp * kStepTokens;           // first token of the current step
    // Copies of the chunks kStages - kSteps ahead, one commit group each: local chunk i + kStages - kSteps + u.
    // steady (std::true_type in the steady steps below): the chunk is known to exist and to be full.
    auto issue_ahead = [&](int i, int u, auto steady) {
      const int j = i + T::kStages - kSteps + u;
      if constexpr (decltype(steady)::value) {
        issue_full(write_slot, j, (T::kStages - kSteps + u) % kSteps == 0);  // i is a multiple of kSteps
      } else {
        if (j < n_local) issue(write_slot, j, advance_after(T::kStages - kSteps + u));
      }
      write_slot = write_slot + 1 == T::kStages ? 0 : write_slot + 1;
      cp_async_commit();
    };
    // Steps 0 .. steady_end - kSteps (kSteadySteps): every chunk they copy ahead, and every chunk they
    // read, is full, so they run without the range, partial-chunk and mask checks. The warp's chunks
    // in token order are full up to n_full; step i copies up to chunk i + kStages - 1. H200,
    // 2026-12-01, graph replays, nvfp4 us, checks on every step -> steady steps: GQA 4 32 x 32K 325.6 /
    // 325.0 -> 318.7 / 319.0, 8 x 32K 91.7 / 91.8 -> 90.6 / 90.5, 8 x 128K 326.7 / 326.9 -> 320.8 /
    // 320.1, 32 x 4K 52.2 / 52.1 -> 51.4 / 51.3; GQA 8 256 x 32K 2416 / 2411 -> 2373 / 2376. Not in the
    // few-blocks build, whose short items have no steady step (8 x 1K went 11.4 / 11.3 -> 11.6 / 11.7).
    constexpr bool kSteadySteps = kPageBatches && !kFewBlocks;
    int steady_end = 0;
    if constexpr (kSteadySteps) {
      const int span = end - begin - warp * kStepTokens;  // tokens from the warp's first chunk on
      int n_full = 0;
#pragma unroll
      for (int u = 0; u < kSteps; ++u) {
        const int from = kTcChunk * (u + 1);  // the chunk's end in its step
        n_full += span >= from ? (span - from) / (kWarps * kStepTokens) + 1 : 0;
      }
      steady_end = n_full - T::kStages + 1;  // steady: i + kStages - 1 < n_full
    }
    auto run_step = [&](int i, auto steady) {
      constexpr bool kSteady = decltype(steady)::value;
      // The deferred prologue copy: the commit groups stay in chunk order (the prologue committed an
      // empty group in its place), so the waits below count as without kDefer.
      if (kDefer > 0 && i == 0) {
#pragma unroll
        for (int s = T::kStages - kSteps - kDefer; s < T::kStages - kSteps; ++s) {
          if (s < n_local) issue(s, s, advance_after(s));
          cp_async_commit();
        }
      }
      // Copy the chunks ahead, then wait for this step's. With two chunks per step the second copy is
      // issued after Q·K^T (kLateIssue): the two copies straddle a step boundary, so the first one's
      // page lookup (a new page) was otherwise waited for right away by the second (ncu, 32 x 32K:
      // the top stall of the copy code). Measured alone it is within noise (H200, graph replays, GQA
      // 4: 32 x 32K 406 vs 408 us, 8 x 128K 407 vs 404, short shapes equal); kept, as the page-table
      // pointer and 32-bit page base (issue) were measured on top of it.
#pragma unroll
      for (int u = 0; u < kSteps - kLateIssue; ++u) issue_ahead(i, u, steady);
      cp_async_wait<T::kStages - kSteps - kLateIssue>();
      __syncwarp();

      const uint8_t* st[kSteps];
#pragma unroll
      for (int u = 0; u < kSteps; ++u) {
        st[u] = ring + read_slot * T::kStageBytes;
        read_slot = read_slot + 1 == T::kStages ? 0 : read_slot + 1;
      }
      const int rem = end - step_tok;  // valid tokens from the step's first (> 0; may be < kStepTokens)
      if (!kSteady) step_tok += kWarps * kStepTokens;

      // Scores, log2 domain times 2^e (m_run above). kOneQ: s[u][0..1] = token g of chunk u at heads
      // 2c, 2c+1, s[u][2..3] = token 8+g at the same heads. Otherwise: head g at chunk u's tokens 2c,
      // 2c+1 (tile 0) and 8+2c, 9+2c (tile 1).
      float s[kSteps][4];
      if constexpr (kOneQ) {
        // S^T = K · Q^T: A = the chunk's K (rows g and 8+g: the B registers of both 8-token tiles, as
        // decoded for the other form), B = Q^T (q_t). Even and odd k-steps accumulate separately (one
        // chain per chunk in the 32-token step, 127 registers: 0.3-1% slower; H200, 2026-12-01).
#pragma unroll
        for (int u = 0; u < kSteps; ++u) {
          const uint8_t* k_data = st[u];
          const uint8_t* k_scales = st[u] + T::kKBytes;
          uint32_t kb0[T::kKRegs], kb1[T::kKRegs];
          load_k_regs<KF, D>(k_data, k_scales, g, c, kb0);
          load_k_regs<KF, D>(k_data, k_scales, 8 + g, c, kb1);
          float acc[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
#pragma unroll
          for (int ks = 0; ks < T::kKSteps; ++ks) {
            const uint2 qb = q_t[ks];
            mma16816<false>(acc[T::kQkTwoChains ? ks % 2 : 0],
                            make_uint4(kb0[2 * ks], kb1[2 * ks], kb0[2 * ks + 1], kb1[2 * ks + 1]), qb.x, qb.y);
          }
#pragma unroll
          for (int j = 0; j < 4; ++j) s[u][j] = T::kQkTwoChains ? acc[0][j] + acc[1][j] : acc[0][j];
        }
      } else {
        // QK: two n-tiles of 8 tokens per chunk; acc[t][0..1] = hi rows, [2..3] = lo rows of head g.
        // Even and odd k-steps accumulate separately: 4 independent MMA chains of kKSteps/2 instead of 2
        // of kKSteps (the chain latency, not issue, bounded a warp's step).
        // (Two chunks per step give independent MMA chains already: one chain each, 4 fewer registers.)
        constexpr bool kTwoChains = T::kQkTwoChains && kSteps == 1;
#pragma unroll
        for (int u = 0; u < kSteps; ++u) {
          const uint8_t* k_data = st[u];
          const uint8_t* k_scales = st[u] + T::kKBytes;
          float acc[2][4];
#pragma unroll
          for (int t = 0; t < 2; ++t) {
            uint32_t kb[T::kKRegs];
            load_k_regs<KF, D>(k_data, k_scales, 8 * t + g, c, kb);
            float acc_odd[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = 0.0f;
#pragma unroll
            for (int ks = 0; ks < T::kKSteps; ks += 2) {
              mma16816<T::kQkBf16>(acc[t], qfrag[ks * 32 + lane], kb[2 * ks], kb[2 * ks + 1]);
              mma16816<T::kQkBf16>(kTwoChains ? acc_odd : acc[t], qfrag[(ks + 1) * 32 + lane], kb[2 * ks + 2],
                                   kb[2 * ks + 3]);
            }
            if constexpr (kTwoChains) {
#pragma unroll
              for (int j = 0; j < 4; ++j) acc[t][j] += acc_odd[j];
            }
          }
#pragma unroll
          for (int t = 0; t < 2; ++t) {
#pragma unroll
            for (int j = 0; j < 2; ++j) s[u][2 * t + j] = acc[t][j] + acc[t][j + 2];
          }
        }
      }
      // kHoistV (the few-blocks build of 16-token steps: nvfp4 items of <= 64 tokens, one chunk per
      // warp, registers of 3 blocks): V decoded now, so that its integer work overlaps Q·K^T's MMAs
      // and the softmax instead of following them. H200, 2026-11-30, graph replays, fp8 / nvfp4 us,
      // GQA 4: 1 x 1K 8.0 / 8.0 -> 8.0 / 7.9 (0.995 -> 0.979-0.984), 1 x 768 7.7 / 7.8 -> 7.7 / 7.7
      // (1.011 -> 0.997-0.999); GQA 8 1 x 1K 0.985 -> 0.976-0.978. In the main build (its steady
      // steps, chunk 0 of each step) it spilled 20 bytes at 128 registers and was slower: 32 x 32K
      // 311.6 -> 328.2 us, 8 x 32K 88.9 -> 93.7 (H200, 2026-12-01).
      constexpr bool kHoistV = kSteps == 1 && kFewBlocks && VF == ElemFormat::kNVFP4;
      uint32_t vb[kHoistV ? D / 16 : 1][4];
      if constexpr (kHoistV) {
        const uint8_t* v_data = st[0] + T::kKBytes + T::kKScaleBytes;
        nvfp4_v_decode<D>(v_data, v_data + T::kVBytes, g, c, vb);
      }
      // Mask tokens past the end: warp-uniform, only an item's last step has any (the per-score
      // compare and select ran on every step before: ~20 instructions per 32 tokens).
      if (!kSteady && rem < kStepTokens) {
#pragma unroll
        for (int u = 0; u < kSteps; ++u) {
#pragma unroll
          for (int k = 0; k < 4; ++k) {
            const int tok = kTcChunk * u + 8 * (k / 2) + (kOneQ ? g : 2 * c + k % 2);
            if (tok >= rem) s[u][k] = -INFINITY;
          }
        }
      }
      if constexpr (kLateIssue == 1) issue_ahead(i, kSteps - 1, steady);
      // Score k of s[u][k] belongs to lane head kOneQ ? k % 2 : 0; a head's scores are spread over the
      // 8 lanes of column c (kOneQ, shuffles 4, 8, 16) or the 4 lanes of row g (shuffles 1, 2).
      // The running max moves only when a score exceeds it by more than kMaxSlack (a lane-local test
      // and one vote): otherwise p = 2^((s - m_run) · 2^-e) <= 2^kMaxSlack is used as is, exact in f32
      // and in f16 (P·V's operand), and l and O keep their reference m_run. The warp's max and the
      // rescale of O and l run only when some lane's score outgrows the slack: at the first step and
      // rarely after.
      float lane_max[kLaneHeads];
      bool grow = false;
#pragma unroll
      for (int j = 0; j < kLaneHeads; ++j) {
        lane_max[j] = -INFINITY;
#pragma unroll
        for (int u = 0; u < kSteps; ++u) {
#pragma unroll
          for (int k = j; k < 4; k += kLaneHeads) lane_max[j] = fmaxf(lane_max[j], s[u][k]);
        }
        grow = grow || lane_max[j] > m_run[j] + slack;
      }
      // The few-blocks build of 16-token steps serves items of a step or two per warp, whose first step
      // takes this path anyway: it skips the vote (with it, GQA 4 1 x 1K nvfp4 / fp8 went from 0.993 to
      // 1.002). H200, 2026-12-01, graph replays, nvfp4 us, every step's max -> the slack: GQA 4 32 x 32K
      // 360.7 / 361.4 -> 349.2 / 352.3, 8 x 64K 187.4 / 187.9 -> 181.5 / 182.4; bf16, fp8, k8v4 equal.
      // (Rescaling every step without a vote, one basic block for QK..PV, measured ~1% slower for
      // nvfp4 d128 on the H200: 427.7 vs 423.7 us at 32 x 32K.)
      if ((kFewBlocks && kSteps == 1) || __any_sync(0xFFFFFFFFu, grow)) {  // warp-uniform
        float alpha[kLaneHeads];
#pragma unroll
        for (int j = 0; j < kLaneHeads; ++j) {
          float mx = lane_max[j];
#pragma unroll
          for (int off = kFirstLane; off < kLastLane; off *= 2) mx = fmaxf(mx, __shfl_xor_sync(0xFFFFFFFFu, mx, off));
          const float m_new = fmaxf(m_run[j], mx);  // finite: token 0 of the first step is valid
          alpha[j] = fast_exp2((m_run[j] - m_new) * score_mult);
          m_run[j] = m_new;
          neg_m[j] = -m_new * score_mult;
          l_run[j] *= alpha[j];
        }
        // O^T: this thread's columns are heads 2c, 2c+1 (kOneQ: its own; else lanes 8c and 8c+4 hold them).
        const float alpha0 = kOneQ ? alpha[0] : __shfl_sync(0xFFFFFFFFu, alpha[0], 8 * c);
        const float alpha1 = kOneQ ? alpha[kLaneHeads - 1] : __shfl_sync(0xFFFFFFFFu, alpha[0], 8 * c + 4);
#pragma unroll
        for (int m = 0; m < kOT; ++m) {
          o[m][0] *= alpha0, o[m][1] *= alpha1, o[m][2] *= alpha0, o[m][3] *= alpha1;
        }
      }
      float p[kSteps][4], p_sum[kLaneHeads];
#pragma unroll
      for (int u = 0; u < kSteps; ++u) {
#pragma unroll
        for (int k = 0; k < 4; ++k) p[u][k] = fast_exp2(fmaf(s[u][k], score_mult, neg_m[k % kLaneHeads]));
#pragma unroll
        for (int j = 0; j < kLaneHeads; ++j) {
          float sum_u = p[u][j];  // not 0 + p: that add is kept (signed zeros)
#pragma unroll
          for (int k = j + kLaneHeads; k < 4; k += kLaneHeads) sum_u += p[u][k];
          p_sum[j] = u == 0 ? sum_u : p_sum[j] + sum_u;
        }
      }
#pragma unroll
      for (int j = 0; j < kLaneHeads; ++j) l_run[j] += p_sum[j];
#pragma unroll
      for (int u = 0; u < kSteps; ++u) {
        uint4 pa;
        if constexpr (kOneQ) {
          // P^T rows g and 8+g (tokens) at columns 2c, 2c+1 (heads): the m8n8 fragments of P^T's two
          // 8-token halves, transposed by movmatrix into B = P^T's (tokens 2c, 2c+1 | 8+2c, 9+2c of head g).
          const __half2 p01 = __floats2half2_rn(p[u][0], p[u][1]), p23 = __floats2half2_rn(p[u][2], p[u][3]);
          pa.x = movmatrix_trans(*reinterpret_cast<const uint32_t*>(&p01));
          pa.z = movmatrix_trans(*reinterpret_cast<const uint32_t*>(&p23));
        } else if constexpr (kOneP) {  // B = P as f16: tokens 2c, 2c+1 | 8+2c, 9+2c of head g
          const __half2 p01 = __floats2half2_rn(p[u][0], p[u][1]), p23 = __floats2half2_rn(p[u][2], p[u][3]);
          pa.x = *reinterpret_cast<const uint32_t*>(&p01);
          pa.z = *reinterpret_cast<const uint32_t*>(&p23);
        } else {
          split_pair<T::kPvBf16>(p[u][0], p[u][1], pa.x, pa.y);  // k = tokens 2c, 2c+1: rows g (hi), g+8 (lo)
          split_pair<T::kPvBf16>(p[u][2], p[u][3], pa.z, pa.w);  // k = tokens 8+2c, 9+2c
        }
        if constexpr (kHoistV) {
          pv_nvfp4_decoded<D, kOneP>(vb, pa, o);
        } else {
          const uint8_t* v_data = st[u] + T::kKBytes + T::kKScaleBytes;
          pv_chunk<VF, D, kOneP>(v_data, v_data + T::kVBytes, g, c, pa, o);
        }
      }
      __syncwarp();  // the next issue overwrites these stages
    };
    int i = 0;
    if constexpr (kSteadySteps) {
      for (; i < steady_end; i += kSteps) run_step(i, std::true_type{});
      // The cursors the checked steps go on from: step i's first token, and that of chunk i + kStages
      // - kSteps (the next to copy).
      step_tok = batches.chunk_tok(i);
      cursor_tok = batches.chunk_tok(i + T::kStages - kSteps);
    }
    for (; i < n_local; i += kSteps) run_step(i, std::false_type{});
    cp_async_wait<0>();

    // ---- epilogue: merge the warps' (m, l, O), store the rows (decode_tc_epilogue.cuh) -------------------
    tc_epilogue<T, D, kWarps, kOneQ, kPair>(a, {seq, item, n_items, q_head0, n_heads, rank}, o, m_run, l_run,
                                            score_mult, m_w, l_w, work, q_s, inbox);
  };
  if constexpr (kUnits) {
    const int32_t* bounds = a.unit_first_item + unit;
    for (int item = bounds[0]; item < bounds[1]; ++item) {
      run_item(item);
      // The next item's q staging overwrites `rows`, which the output stores read.
      if (item + 1 < bounds[1]) __syncthreads();
    }
  } else {
    run_item(unit);
  }
}

}  // namespace nibble::cuda::detail
