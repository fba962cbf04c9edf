// The split-KV merge of decode attention (launched by decode_attention.cpp).
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/decode_attention.cuh"
#include "backend/cuda/kernel_launch.h"

#include <mutex>

namespace nibble::cuda::detail {

namespace {

// Tried and rejected (H200, 2026-11-30, seventh session): the merge inside the decode kernel, done
// by the last block of each (sequence, head chunk) to finish (counted with an acq_rel atomic; its 4
// warps one head each, 8 partial rows in flight), no merge kernel and no kernel boundary. Slower at
// every split shape that is not long, graph replays, bf16 / fp8 / nvfp4 us, merge kernel -> in the
// decode kernel: GQA 4 1 x 1K 8.7 / 8.1 / 8.0 -> 9.5 / 8.8 / 8.8, 1 x 16K 26.2 / 17.7 / 15.4 ->
// 28.7 / 20.1 / 17.8, 8 x 1K 16.6 / 13.0 / 11.8 -> 16.7 / 13.1 / 12.0; GQA 8 1 x 1K 9.1 / 8.5 / 8.4 ->
// 11.7 / 11.0 / 11.0; 8 x 32K equal; 8B batch-1 step at 1K 4.526 / 4.540 -> 4.571 / 4.557 ms. The
// merge of a sequence's head chunk then falls to one block, 2-4 dependent L2 round trips over 16-32
// items, where this kernel spreads the heads over up to 32 blocks per sequence. (The merge's whole
// cost, timed by leaving it out: 0.8-1.8 us at 1 x 1K, ~4 us at 8 x 32K nvfp4.)
// Also tried (H200, 2026-12-01, tenth session): the merge in the decode kernel through thread block
// clusters. A plan whose every sequence had the same 2-16 items launched one cluster per (sequence,
// head chunk), the items in rank order; after a cluster barrier block r merged heads r, r + S, ...
// reading the other blocks' output rows and lse through distributed shared memory (rotation in the
// block, a second barrier before exit). Correct (every decode test passed, with a new test against
// the merge kernel at 2-16 items, batch 3, group 16, rotated), and no merge kernel in the 8B step,
// but no faster where it ran: a cluster starts only when its GPC has room for all its blocks, so
// the decode blocks, which otherwise become resident SM by SM as the q/k/v product's blocks exit,
// started ~3 us later (lead 5.9 -> 2.8 us) and the decode link grew 6.1 -> 8.7 us, more than the
// removed merge's 2.3 (8B step at 1K, its first step: from 1025 tokens the plan has 17 items, past
// the largest cluster, 16). Engine step (overlapped) at 4K, 16 items per step, cluster / merge
// kernel, ms/token: bf16 4.41 / 4.34, nvfp4 4.42 / 4.44; at 960 tokens (16 items of 64 every step)
// bf16 4.294 / 4.259, nvfp4 4.337 / 4.341; 16K a tie.
// Kept since (thirtieth session) in its narrowest form: two items per sequence on nvfp4's long-item
// builds (TcItems::kPair, decode_pair_merge.cuh): graph replays 8 x 32K nvfp4 ~1 us faster,
// 8 x 128K ~3-4 us, and the engine's 8B step at batch 8 x 32K 7.162 -> 7.147 ms (its decode blocks,
// one per SM, wait for whole SMs anyway, so a cluster's room in one GPC costs them nothing measurable).
constexpr int kReduceWarps = 4;
constexpr int kReduceThreads = 32 * kReduceWarps;
constexpr int kBatch = 8;  // partial rows in flight per warp in pass 2

// Merges a split sequence's partial outputs: out = g_v · Σ_i 2^(lse_i - m) o_i / Σ_i 2^(lse_i - m),
// rotated back when the cache is rotated. grid (num_seqs, num_q_heads), block kReduceThreads: the
// kernel for plans of more than kFewItems items per sequence (kFewItemsWide at head_dim <= 128);
// decode_reduce_few_kernel below takes the rest.
//
// Latency, not bandwidth, bounds it (a sequence's partials are a few KiB, in L2), so every load of
// one pass is independent of the others: pass 1, each thread folds the log2-sum-exps of items
// tid, tid + 128, ... into its own (max, sum) and the block combines them; pass 2, warp w adds the
// rows of items w, w + 4, ... (lane l: float4 pieces l, l + 32, ... of the row), kBatch rows in
// flight per step, the first batch loaded before pass 1; the warps' sums meet in shared memory.
// (The first version looped over the items in every thread, two dependent L2 round trips per item:
// ~10 µs at 64 items; two rows in flight per warp still cost one round trip per 8 items.)
//
// Launched programmatically (PDL) behind the decode kernel: it may be resident before that kernel
// ends (the decode kernel triggers its dependents at its start) and waits for its results
// (griddepcontrol.wait) before reading anything but the plan. Its launch asks for more shared
// memory than it uses, so that its blocks spread over the SMs (launch_decode_reduce).
// Shared memory: row [4 warps][head_dim] f32, then m/l [4 warps] f32 each.
__global__ void __launch_bounds__(kReduceThreads) decode_reduce_kernel(DecodeKernelArgs a, int head_dim) {
  extern __shared__ float4 smem_f4[];
  float* rows = reinterpret_cast<float*>(smem_f4);  // [kReduceWarps][head_dim]
  float* m_w = rows + kReduceWarps * head_dim;       // [kReduceWarps]
  float* l_w = m_w + kReduceWarps;                   // [kReduceWarps]
  // The next kernel's launch (PDL): at this kernel's start only with a.early_dependents, the
  // engine's case, where the next kernel is the o GEMV: its blocks take the SMs the decode kernel
  // leaves idle and load their first two weight batches during the attention (gemv.cu). 8B batch-1
  // decode, bf16 KV at 1K (H200, 2026-11-30, two runs of two): 4.642 / 4.672 / 4.651 / 4.615 ->
  // 4.583 / 4.586 ms/token (each alone: the early trigger 4.626 / 4.617, two batches 4.634 / 4.646).
  // Otherwise at the end (the implicit trigger): triggered at the start with another decode step
  // next, that step's blocks held the SMs while waiting: graph replays of back-to-back calls, fp8
  // 8 x 32K GQA 4 130 -> 153.5 us, nvfp4 1 x 1K 8.7 -> 12.0 us; triggered right after the
  // griddepcontrol.wait below, fp8 8 x 32K 128 -> 149 us, 1 x 16K fp8 16.7 -> 18.4, nvfp4 16.7 ->
  // 19.4, 8 x 1K fp8 13.7 -> 16.6 us, while the 8B step gained ~0.03 ms (within the runs' spread).
  if (a.early_dependents) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  const int seq = blockIdx.x, head = blockIdx.y;
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  // The plan is the step's (uploaded before it, written by no kernel): read before the wait.
  const int first = a.seq_work_offset[seq], last = a.seq_work_offset[seq + 1];
  if (last - first <= 1) return;  // written directly by the decode kernel (uniform per block)
  asm volatile("griddepcontrol.wait;" ::: "memory");
  const int num_q_heads = a.num_q_heads;

  // This warp's first batch of rows (items w, w + 4, ..., kBatch of them) and their lse are loaded
  // before pass 1, so both passes wait on one round trip to L2 (<= 4 · kBatch items per sequence:
  // every plan of up to 32 splits).
  const int pieces = head_dim / 4;  // 16, 32 or 64 float4 per row
  const float4* partial = reinterpret_cast<const float4*>(a.partial_out);
  float lse_b[kBatch];
  float4 row_b[kBatch][2];
  auto load_batch = [&](int w0) {
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int w = w0 + u * kReduceWarps;
      const bool valid = w < last;
      lse_b[u] = valid ? a.partial_lse[static_cast<int64_t>(w) * num_q_heads + head] : -INFINITY;
      const float4* row = partial + (static_cast<int64_t>(valid ? w : first) * num_q_heads + head) * pieces;
#pragma unroll
      for (int k = 0; k < 2; ++k) {
        const int p = lane + 32 * k;
        row_b[u][k] = valid && p < pieces ? row[p] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      }
    }
  };
  load_batch(first + warp);

  // Pass 1: m = max lse, l = Σ 2^(lse - m). Every item's lse is finite (its first token is valid).
  float m = -INFINITY, l = 0.0f;
  for (int w = first + tid; w < last; w += kReduceThreads) {
    const float x = a.partial_lse[static_cast<int64_t>(w) * num_q_heads + head];
    const float m_new = fmaxf(m, x);
    l = l * exp2f(m - m_new) + exp2f(x - m_new);
    m = m_new;
  }
#pragma unroll
  for (int off = 16; off > 0; off /= 2) {
    const float m_o = __shfl_xor_sync(0xFFFFFFFFu, m, off);
    const float l_o = __shfl_xor_sync(0xFFFFFFFFu, l, off);
    const float m_new = fmaxf(m, m_o);
    l = (m == -INFINITY ? 0.0f : l * exp2f(m - m_new)) + (m_o == -INFINITY ? 0.0f : l_o * exp2f(m_o - m_new));
    m = m_new;
  }
  if (lane == 0) {
    m_w[warp] = m;
    l_w[warp] = l;
  }
  __syncthreads();
  m = -INFINITY;
#pragma unroll
  for (int w = 0; w < kReduceWarps; ++w) m = fmaxf(m, m_w[w]);
  l = 0.0f;
#pragma unroll
  for (int w = 0; w < kReduceWarps; ++w) l += m_w[w] == -INFINITY ? 0.0f : l_w[w] * exp2f(m_w[w] - m);

  // Pass 2: this warp's items, weighted by 2^(lse - m); lane holds float4 pieces lane, lane + 32, ...
  float4 acc[2] = {make_float4(0.0f, 0.0f, 0.0f, 0.0f), make_float4(0.0f, 0.0f, 0.0f, 0.0f)};
  for (int w0 = first + warp;;) {
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const float weight = lse_b[u] == -INFINITY ? 0.0f : exp2f(lse_b[u] - m);  // past the end: 0
#pragma unroll
      for (int k = 0; k < 2; ++k) {
        const float4 v = row_b[u][k];
        acc[k].x += weight * v.x, acc[k].y += weight * v.y, acc[k].z += weight * v.z, acc[k].w += weight * v.w;
      }
    }
    w0 += kBatch * kReduceWarps;
    if (w0 >= last) break;
    load_batch(w0);
  }
#pragma unroll
  for (int k = 0; k < 2; ++k) {
    const int p = lane + 32 * k;
    if (p < pieces) reinterpret_cast<float4*>(rows + warp * head_dim)[p] = acc[k];
  }
  __syncthreads();
  const float inv_l = 1.0f / l;
  for (int d = tid; d < head_dim; d += kReduceThreads) {
    float sum = 0.0f;
#pragma unroll
    for (int v = 0; v < kReduceWarps; ++v) sum += rows[v * head_dim + d];
    rows[d] = sum * inv_l;  // row 0 now holds the merged output; each d is one thread's
  }
  __syncthreads();
  if (a.rotate) hadamard_rows_smem(rows, 1, head_dim);
  const float out_mult = a.v_global_scale * (a.rotate ? rsqrtf(static_cast<float>(head_dim)) : 1.0f);
  for (int d = tid; d < head_dim; d += kReduceThreads) {
    a.out[(static_cast<int64_t>(seq) * num_q_heads + head) * head_dim + d] = rows[d] * out_mult;
  }
}

// The merge of sequences split into at most kItems items: one warp per query head, 4 heads per
// block, grid (num_seqs, ceil(num_q_heads / 4)). Lane i holds item i's lse; each lane adds its float4
// pieces (lane, lane + 32, ...: kPiecesPerLane of them, 32·kPiecesPerLane >= head_dim / 4) of every
// item's row, all loads of the warp issued at once. The block per head above left 3 of its 4 warps
// idle at 2 items: a plan of 2 items at 32 x 2K GQA 8 launched 2048 merge blocks and took nvfp4 43.1
// us, against 40.9 unsplit. This kernel (H200, 2026-11-30, graph
// replays, bf16 / fp8 / nvfp4 us): 32 x 2K GQA 8 75.4 / 40.8 / 43.1 -> 75.4 / 40.9 / 37.1, GQA 4
// nvfp4 38.8 -> 36.3; 8 x 1K GQA 8 17.3 / 14.0 / 13.5 -> 15.3 / 12.3 / 11.8; 16 x 1K GQA 8 26.9 /
// 18.9 / 18.4 -> 23.6 / 15.5 / 15.2; 32 x 4K GQA 8 nvfp4 66.8 -> 60.7; unchanged above 8 items.
// Its wide build (kItems = kFewItemsWide, one float4 per lane: head_dim <= 128, 107 registers, no
// spill) takes the plans of 9-32 items per sequence that the block per head took before: a batch-1
// step up to 2K tokens (items of 64). 8B batch-1 step (H200, ms/token, one call, two runs each):
// with 16 items (2026-12-01, tenth session) at 960 tokens bf16 4.244 / 4.235 -> 4.193 / 4.195,
// nvfp4 4.332 / 4.333 -> 4.250 / 4.253, and 1024 tokens (17 items from the second step) unchanged;
// then 32 items against 16 (eleventh session): bf16 960 / 1024 / 2048 4.225 / 4.233 / 4.301 and
// 4.227 / 4.230 / 4.297 -> 4.218 / 4.227 / 4.292 and 4.215 / 4.217 / 4.287, nvfp4 4.281 / 4.276 /
// 4.399 and 4.279 / 4.279 / 4.400 -> 4.271 / 4.268 / 4.384 and 4.270 / 4.269 / 4.371.
constexpr int kFewItems = 8;
constexpr int kFewItemsWide = 32;
template <int kItems, int kPiecesPerLane>
__global__ void __launch_bounds__(kReduceThreads) decode_reduce_few_kernel(DecodeKernelArgs a, int head_dim) {
  extern __shared__ float4 smem_f4[];
  float* rows = reinterpret_cast<float*>(smem_f4);  // [kReduceWarps][head_dim]: the rotated path only
  if (a.early_dependents) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");  // as above
  const int seq = blockIdx.x;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int head = blockIdx.y * kReduceWarps + warp;
  const int first = a.seq_work_offset[seq], last = a.seq_work_offset[seq + 1];
  const int n = last - first;
  if (n <= 1) return;  // written directly by the decode kernel (uniform per block)
  asm volatile("griddepcontrol.wait;" ::: "memory");
  const int num_q_heads = a.num_q_heads;
  const bool active = head < num_q_heads;  // warp-uniform; every warp stays for the rotated path's barriers
  const int pieces = head_dim / 4;          // 16, 32 or 64 float4 per row
  const float4* partial = reinterpret_cast<const float4*>(a.partial_out);

  float4 row_b[kItems][kPiecesPerLane];
#pragma unroll
  for (int u = 0; u < kItems; ++u) {
    const int64_t item = first + (u < n ? u : 0);
    const float4* row = partial + (item * num_q_heads + (active ? head : 0)) * pieces;
#pragma unroll
    for (int k = 0; k < kPiecesPerLane; ++k) {
      const int p = lane + 32 * k;
      row_b[u][k] = active && u < n && p < pieces ? row[p] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
  }
  const float x =
      active && lane < n ? a.partial_lse[static_cast<int64_t>(first + lane) * num_q_heads + head] : -INFINITY;
  float m = x;
#pragma unroll
  for (int off = 16; off > 0; off /= 2) m = fmaxf(m, __shfl_xor_sync(0xFFFFFFFFu, m, off));
  const float weight = lane < n && active ? exp2f(x - m) : 0.0f;  // every item's lse is finite
  float l = weight;
#pragma unroll
  for (int off = 16; off > 0; off /= 2) l += __shfl_xor_sync(0xFFFFFFFFu, l, off);

  float4 acc[kPiecesPerLane];
#pragma unroll
  for (int k = 0; k < kPiecesPerLane; ++k) acc[k] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
  for (int u = 0; u < kItems; ++u) {
    const float w = __shfl_sync(0xFFFFFFFFu, weight, u);  // 0 past the last item
#pragma unroll
    for (int k = 0; k < kPiecesPerLane; ++k) {
      const float4 v = row_b[u][k];
      acc[k].x += w * v.x, acc[k].y += w * v.y, acc[k].z += w * v.z, acc[k].w += w * v.w;
    }
  }
  const float inv_l = active ? 1.0f / l : 0.0f;
#pragma unroll
  for (int k = 0; k < kPiecesPerLane; ++k) {
    acc[k].x *= inv_l, acc[k].y *= inv_l, acc[k].z *= inv_l, acc[k].w *= inv_l;
  }
  const float out_mult = a.v_global_scale * (a.rotate ? rsqrtf(static_cast<float>(head_dim)) : 1.0f);
  float4* out = reinterpret_cast<float4*>(a.out + (static_cast<int64_t>(seq) * num_q_heads + head) * head_dim);
  if (a.rotate) {  // block-uniform: the inverse rotation of the 4 merged rows in shared memory
    float4* mine = reinterpret_cast<float4*>(rows + warp * head_dim);
#pragma unroll
    for (int k = 0; k < kPiecesPerLane; ++k) {
      if (lane + 32 * k < pieces) mine[lane + 32 * k] = acc[k];
    }
    __syncthreads();
    hadamard_rows_smem(rows, kReduceWarps, head_dim);  // ends with a barrier
#pragma unroll
    for (int k = 0; k < kPiecesPerLane; ++k) {
      if (lane + 32 * k < pieces) acc[k] = mine[lane + 32 * k];
    }
  }
  if (!active) return;
#pragma unroll
  for (int k = 0; k < kPiecesPerLane; ++k) {
    const int p = lane + 32 * k;
    if (p < pieces) {
      out[p] = make_float4(acc[k].x * out_mult, acc[k].y * out_mult, acc[k].z * out_mult, acc[k].w * out_mult);
    }
  }
}

// One merge kernel's launch; the first launch raises the kernel's shared-memory limit so that the
// spread launch (launch_decode_reduce) may ask for up to an SM's whole share.
template <auto kKernel>
void launch_merge(const LaunchShape& shape, cudaStream_t stream, bool programmatic, const DecodeKernelArgs& args,
                  int head_dim) {
  static std::once_flag raised;
  std::call_once(raised, [] {
    NIBBLE_CUDA_CHECK(cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, spread_smem_bytes(0, 1)));
  });
  launch_kernel(kKernel, shape, stream, programmatic, args, head_dim);
}

}  // namespace

void launch_decode_reduce(const DecodeKernelArgs& args, int num_seqs, int head_dim, int max_items, int spread_sms,
                          bool programmatic, cudaStream_t stream) {
  if (head_dim != 64 && head_dim != 128 && head_dim != 256) {
    throw_unsupported("decode reduce", "head_dim", "64, 128, 256", head_dim);
  }
  const bool few = max_items <= kFewItems || (max_items <= kFewItemsWide && head_dim <= 128);
  const int head_blocks = few ? (args.num_q_heads + kReduceWarps - 1) / kReduceWarps : args.num_q_heads;
  // Spread (spread_sms > 0): at most ceil(blocks / spread_sms) blocks per SM, by raising each
  // block's dynamic shared memory (spread_smem_bytes), so that the blocks scheduled early land on
  // every SM rather than crowd onto the few with room (DecodeLaunch::reduce_spread_sms).
  const int own_smem = static_cast<int>((kReduceWarps * head_dim + 2 * kReduceWarps) * sizeof(float));
  const int blocks = num_seqs * head_blocks;
  const int per_sm = spread_sms > 0 ? (blocks + spread_sms - 1) / spread_sms : 0;
  const LaunchShape shape{.grid = dim3(static_cast<unsigned>(num_seqs), static_cast<unsigned>(head_blocks)),
                          .block = dim3(kReduceThreads),
                          .smem_bytes = static_cast<size_t>(spread_smem_bytes(own_smem, per_sm))};
  if (max_items <= kFewItems) {
    launch_merge<decode_reduce_few_kernel<kFewItems, 2>>(shape, stream, programmatic, args, head_dim);
  } else if (few) {
    launch_merge<decode_reduce_few_kernel<kFewItemsWide, 1>>(shape, stream, programmatic, args, head_dim);
  } else {
    launch_merge<decode_reduce_kernel>(shape, stream, programmatic, args, head_dim);
  }
}

}  // namespace nibble::cuda::detail
