// The kernel of gemv.h. One template instance per (activation rows, epilogue).
//
// Work: "items" are W rows (kStore: the segments' rows end to end, from 6 activation rows on two
// consecutive rows of a segment per item; kSwiGlu: row i of gate together with row i of up); an
// item's rows are loaded side by side and share each read of x. Warp g of G takes items g, g + G,
// ...; within an item its 32 lanes take the 16-byte chunks c = lane + 32·j of the k axis, kU chunks
// per lane per batch (per matrix). A warp's (item, batch) sequence is software-pipelined: batch
// t + 1's loads are issued before batch t is used, also across items, so every warp keeps one to two
// batches of loads in flight (2·kU·16·kMats bytes per lane) and the reduction of one item overlaps
// the loads of the next.
// Sums, on the tensor cores: the 32 lanes' 16-byte chunks of one load instruction are 256
// consecutive k of one W row, lane (g, q) holding k 32g + 8q .. + 7. Two m16n8k16 MMAs (bf16, f32
// accumulate) take them as B (column n = row segment n: k 32n .. 32n + 31, one k-step per half of
// each chunk) against A = the same segments of bf16(x) (row m = x's segment m; rows 8-15 the next
// activation row's): C[n][n] += segment n of W row · segment n of x, and the off-diagonal products
// are discarded. An item's 8 diagonal elements (per activation row) meet in a butterfly over the
// warp. Fixed order, hence deterministic; no FMA or bf16 unpacking per weight, so a warp's work
// between two loads is 2 MMAs and a shared-memory read.
// Measured (H200, 2026-12-01, thirteenth session; a scratch chain of the 8B products of 32 layers
// with their norms and residuals, PDL, as the engine runs them): 112.9 us/layer with the per-lane
// FMA sums this replaced, 109.1 with the MMAs (94.4 at the read bandwidth); the engine's 8B step:
// docs/PERFORMANCE.md, thirteenth round. The per-row pattern of loads matters more than the
// arithmetic: a pure read of the same rows reaches ~100% of the read bandwidth, while each warp's
// loads spanning 8 rows × 64 bytes instead (an MMA's natural B layout) fell to 75-91%.
// The experiments recorded below the Config (before the thirteenth session) ran on the FMA form.
#include <algorithm>
#include <cstdint>
#include <mutex>
#include <utility>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/gemv.h"
#include "backend/cuda/gemv_common.cuh"
#include "backend/cuda/kernel_launch.h"
#include "quant/bf16.h"

namespace nibble::cuda::detail {

int gemv_max_smem_bytes();
size_t gemv_smem_bytes(int64_t rows, int64_t k, GemvEpilogue epilogue);

namespace {

using gemv_common::evict_first_policy;
using gemv_common::kWideRow;
using gemv_common::mma_bf16;
using gemv_common::multiprocessors;
using gemv_common::pack_bf16x2;

constexpr int kWarps = 16;
constexpr int kThreads = kWarps * 32;

// A 16-byte weight load that skips L1 and is evicted first from L2 (each weight byte is read once).
__device__ __forceinline__ uint4 load_weights(const uint4* p, uint64_t policy) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p), "l"(policy));
  return v;
}


// The segment of kStore item `item` (the segments' rows end to end in groups of kGroup rows, a
// segment's last group possibly short), and the item's first row within it.
struct SegmentRow {
  const uint16_t* w;
  const float* bias;
  float* out;
  int64_t n;
  int64_t row;
};
template <int kGroup>
__device__ __forceinline__ SegmentRow segment_row(const GemvParams& p, int64_t item) {
  const int64_t n0 = p.segments[0].n, n1 = p.segments[1].n;
  const int64_t g0 = (n0 + kGroup - 1) / kGroup, g1 = (n1 + kGroup - 1) / kGroup;
  if (item < g0) return {p.segments[0].w, p.segments[0].bias, p.segments[0].out, n0, item * kGroup};
  if (item < g0 + g1) return {p.segments[1].w, p.segments[1].bias, p.segments[1].out, n1, (item - g0) * kGroup};
  return {p.segments[2].w, p.segments[2].bias, p.segments[2].out, p.segments[2].n, (item - g0 - g1) * kGroup};
}

// Chunks per lane per batch (kU) for `mats` W rows per item and `rows` activation rows: two batches'
// buffers (2·kU·mats·4 registers) must fit beside the sums. 8 for one or two rows of one matrix
// (H200, 32-layer product chain at 2 activation rows, 4 -> 8: 120.9 -> 116.5 us/layer; at 4, 5 and 7
// rows 8 was slower: 134.5 / 145.7 / 183.9 -> 136.7 / 153.3 / 188.7; with x staged as A registers,
// 8 at 3-4 rows: chain 1% faster, the batch-4 step 4.960 -> 5.01 ms).
__host__ __device__ constexpr int loads_per_batch(int mats, int rows) {
  return (mats == 1 && rows <= 2) ? 8 : (mats * rows <= 8 ? 4 : 2);
}
// The staged row of bf16(x), in 16-byte chunks: k / 8 rounded up to whole batches (kU·32 chunks) and
// zero past k, so that a batch's MMAs need no bounds (the weights past k load as zeros too).
__host__ __device__ constexpr int64_t staged_chunks(int64_t k, int ku) {
  return (k / 8 + ku * 32 - 1) / (ku * 32) * (ku * 32);
}

// Rows per kStore item at `rows` activation rows: from 6 on, two consecutive rows of W share every
// x read (as a SwiGLU item's gate and up rows do); each load still covers 512 contiguous bytes of
// one row. H200, 32-layer product chain (us/layer, one row -> two, x then in rows' own entries):
// 6 rows 153.6 -> 151.1, 7 179.6 -> 166.5, 8 197.0 -> 175.9; at 3-5 rows within +-1.5 (4: 133.7
// -> 134.3, slower). (Two rows of W in one load, 4 rows x 128 or 2 x 256 bytes, so that an MMA
// takes up to 8 activation rows: 3-8 rows 30-50% slower; 4 rows per item, or 2 gate and 2 up rows:
// slower, spills; the in-flight weights in a shared-memory ring filled by cp.async, 3-8 stages of
// 2 KiB per warp: no gain.)
__host__ __device__ constexpr int store_rows_per_item(int rows) { return rows >= 6 ? 2 : 1; }
// Items of a product: output rows in groups of `group` (kStore: each segment its own groups).
__host__ __device__ inline int64_t gemv_items(const GemvParams& p, int group) {
  if (p.epilogue == GemvEpilogue::kSwiGlu) return p.segments[0].n;
  auto groups = [group](int64_t n) { return (n + group - 1) / group; };
  return groups(p.segments[0].n) + groups(p.segments[1].n) + groups(p.segments[2].n);
}

template <int kRows, GemvEpilogue kEpi>
struct Config {
  static constexpr bool kSwiGlu = kEpi == GemvEpilogue::kSwiGlu;
  static constexpr int kGroup = kSwiGlu ? 1 : store_rows_per_item(kRows);  // output rows per item
  static constexpr int kMats = kSwiGlu ? 2 : kGroup;  // W rows per item, loaded side by side
  static constexpr int kU = loads_per_batch(kMats, kRows);
};

// One block fills an SM (≤ 112 registers × 512 threads), so under PDL the next kernel's blocks become
// resident only as this kernel's blocks exit. Tried to let two blocks co-reside, all slower (H200,
// bench_model_decode --contexts 1024 --kv bf16 --steps 8 --modes 0, ms/token; this kernel 4.61-4.70):
//   __launch_bounds__(512, 2), half the loads in flight: 4.95;
//   the in-flight weights in a shared-memory ring instead of registers (8 warps per block, per-warp
//   rings filled by cp.async.bulk with one mbarrier per stage, all stages issued before
//   griddepcontrol.wait, ≤ 110 KiB so two blocks fit; bit-identical sums): best 4.783 with 4 KiB
//   stages (LM head alone 90.9% of the read bandwidth against 93%); 2 KiB stages 4.79-5.61; 200 KiB
//   (no co-residency) 5.04; per-lane cp.async instead of bulk copies 5.17-5.88. The per-SM rate grew
//   with warps per SM and stage size, not with bytes in flight (80 vs 110 KiB: same). The overlap
//   did happen (the ring lost 8.8 µs per layer with products timed alone, ~5 in the graph), but even
//   at this kernel's streaming rate it would gain ~0.13 ms/token;
//   two batches issued before griddepcontrol.wait: 4.665 / 4.656 against 4.698 / 4.630 (no gain
//   alone; kept since the merge before the o product triggers it early: decode_reduce.cu);
//   88 registers (__maxnreg__, 6 chunks per lane per batch) so the o GEMV's block fits beside a
//   bf16 decode block (156 registers) during the attention: 4.64-4.67 -> 4.77 ms/token, 4.72-4.74
//   with the early merge trigger (every kStore product streams slower); 8-warp blocks, two per SM
//   at the same registers (so the next kernel's blocks enter half an SM at a time): 4.58 -> 4.68-4.70
//   at 1K (bf16 and nvfp4 KV), 5.81 -> 5.99 at 32K;
//   the o product's weights (or the first 8-16 MB of gate and up) prefetched into L2 by
//   cp.async.bulk.prefetch.L2 during the attention, from a forked graph branch: 4.72 -> 4.72 (o),
//   4.75 -> 4.75 (8 MB), 4.74 -> 4.83 (16 MB); in the kernel chain 4.65 -> 4.82. With its weights in
//   L2 the o product still took 14.1 us eager (15.0 from DRAM): at 33.5 MB it is ramp/drain-bound.
// Measured on a copy of this kernel's batch-1 code (a scratch program: the 8B products of 32 layers
// as 128 PDL kernels in one graph, 83.1% of 4610 GB/s, docs/PERFORMANCE.md sixth round): rows taken
// from an atomic counter, one grab ahead per warp, 75.1%; the warp's next rows prefetched into L2
// (cp.async.bulk.prefetch.L2) before griddepcontrol.wait, 4-32 KiB per warp: 81.3-74.9% (they slow
// the previous kernel's last blocks, which the wait is for). And right after the wait, while x is
// staged and DRAM has nothing else to do, the warp's next 1 / 2 / 4 batches prefetched into L2 (one
// bulk prefetch per batch and matrix from lane 0): slower, 8B batch-1 step at 1K bf16 4.46-4.49 ->
// 4.55-4.60 / 4.66-4.72 / 4.86-4.88 ms (H200, 2026-11-30, seventh session).
// Fewer boundaries (H200, 2026-12-01, ninth session; the step as above, mode 6): consecutive
// products chained into one persistent launch (a layer's o, gate/up, down and the next q/k/v; this
// kernel's code per stage, bit-identical results) with a grid barrier in device memory between
// stages (an acq_rel arrival counter and a generation word, thread 0 of each block polling it with
// ld.acquire) in place of the kernel boundary: 4.26 -> 4.80 ms with the next stage's first batches
// issued before the arrival, 4.30 -> 4.71 issued after it, 4.24 -> 4.78 issued after the barrier;
// chains of 2 / 3 products 4.65 / 4.57. So ~5 us per barrier against the 1-2.4 us of a PDL boundary
// (the arrival and the generation's change are L2 round trips queued behind the weight stream), and
// the RoPE / decode / merge kernels after a chain each took ~1 us longer. And the grid sized to the
// fewest blocks with the same rows per warp (128 instead of 132 blocks for every 8B layer product:
// no warp a row short): 4.312 / 4.312 -> 4.292 / 4.289, then 4.309 / 4.303 -> 4.365 / 4.364 ms,
// within the spread between processes.
// The staging of x after the wait (H200, 2026-12-01, tenth session; the engine's overlapped step,
// bench_model_decode --modes 9, bf16 KV, ms/token at 1K / 32K, each variant against this code in
// the same call): the staging loop issues one entry's loads per iteration and the fused norm's sums
// four loads at a time, so the norm products wait on ~6 dependent L2 round trips and the down
// product on 4 while DRAM streams only the two batches issued above. Issuing every load of a group
// first (x and the norm weight of two entries, the sums' 16 loads at once): the products' links fell
// (gate/up 58.9 -> 58.1-58.4 us, down 31.2 -> 30.2-30.5) but the attention chain after q/k/v rose
// (decode 6.1 -> 6.4-7.4 us, merge 2.3 -> 2.6-3.3): 4.239 / 5.245 -> 4.230 / 5.193 with the change
// for gate/up and down only, 4.234 / 5.237 for gate/up only, 4.265-4.285 / 5.22-5.24 for every
// product (128 registers: the KV write's block no longer fits beside this one and starts late; or
// capped at 112 by __maxnreg__, or the norm weight staged by cp.async before the wait). Not adopted:
// +-0.3% at 1K, -0.3..-0.8% at 32K, within the spread between machines.
// A lean q/k/v build (80 registers, 4 chunks per lane per batch), so that decode attention blocks
// (bf16 d128: 164 registers x 128 threads) become resident beside it and copy their pages early:
// they did (decode lead 5.9 -> 17.4 us), but the decode's link stayed 6.1-6.4 us after the KV write
// and q/k/v streamed slower (14.1 -> 17.2 us): bf16 1K 4.244 -> 4.313-4.320, 32K 5.25 -> 5.34,
// nvfp4 32K 4.715 -> 4.797 (same call).
// The MLP as one kernel (H200, 2026-12-01, eleventh session): block b computes the gate/up rows of
// its slice of the intermediate axis (~109 rows), keeps their SwiGLU outputs in shared memory, reads
// W_down's columns of that slice for a partial of every output, and the 132 partials meet in a
// cross-block sum; no boundary between gate/up and down, and no staging of the 14336-wide SwiGLU
// output. Scratch program, 32 layers' MLPs in one graph, us/layer against these two products' 87-89:
// partials stored but not summed 80.5-81.9, summed by f32 vector atomics 80.4-81.8 (the order of the
// adds varies: decode would stop being deterministic), by int64 fixed-point atomics (exact, so
// deterministic; 2^-32 units) 82.8 with W_down stored transposed and 84.5 in its own layout (224-byte
// pieces of every row); turning the sum back into the residual in the kernel's last block costs 2.8
// more (the fence, the arrival counter, one block's pass). In the engine, with the sum left pending
// for the next products (the q/k/v product read x + sum, the o product's epilogue folded it in and
// cleared it): bf16 1K 4.21 -> 4.78 ms/token. Timeline: the MLP kernel 95.5 us against 58.9 + 30.7
// (runtime shapes: a copy with hidden and inter as constants 86.2, the scratch kernel 82.9), the o
// product 9.5 -> 17.2 (its epilogue's load and clear of the sum, +8.5 us; either alone costs
// nothing), q/k/v 14.6 -> 16.4 (the fold of the sum before its norm). Built without the path for
// slices of more than 16 units (the 8B slice has 13-14): 89.5 us with runtime shapes, 86.3 with
// constant ones, against the two products' 88.6 in the same call. At best ~1.5 us per layer: not
// adopted.
// Also (same session): the staging's loops unrolled (#pragma unroll 8 on the norm's sums, 4 on the
// staging; gate/up and the down product only, 115/121 registers) so their loads issue together:
// slower, ms/token at 1K / 32K over three runs each, bf16 4.218-4.221 / 5.233-5.235 -> 4.251-4.264 /
// 5.300-5.312, nvfp4 4.262-4.271 / 4.708-4.721 -> 4.288-4.302 / 4.767-4.780.
// And the o product's whole share of W in flight before the wait: a one-row kernel whose block
// issued all of its ~31 rows there (25 by cp.async.bulk into shared memory on one mbarrier, the
// rest one per warp in registers; sums bit-identical to this kernel's). Its link fell 9.47 -> 8.19
// us and gate/up's 58.9 -> 57.1, but the decode attention and the merge, whose loads now queued
// behind 33.5 MB instead of 17, rose 5.9 -> 6.7 and 3.1 -> 5.1: bf16 1K / 4K / 32K 4.222-4.227 /
// 4.336-4.344 / 5.237-5.251 -> 4.235-4.239 / 4.360-4.371 / 5.231-5.237, nvfp4 4.271-4.277 /
// 4.419-4.428 / 4.706-4.707 -> 4.305-4.309 / 4.441-4.453 / 4.745-4.746. DRAM is not idle to the
// attention chain: its latency grows with the bytes queued ahead of it. The other way, one batch
// before the o product's wait instead of two, was slower too (+0.3-0.7% at 1K-32K, two runs each).
// At most 112 registers (one 512-thread block uses 57344 of an SM's 65536): the KV write's block
// (128 threads × 64) then fits beside the q/k/v product and starts before it ends (tenth round: at
// 128 registers its link went 1.3 -> 2.6 us). A few batch > 2 instances spill 4-20 bytes.
template <int kRows, GemvEpilogue kEpi>
__global__ void __maxnreg__(112) gemv_kernel(const GemvParams p) {
  using C = Config<kRows, kEpi>;
  constexpr int kMats = C::kMats, kU = C::kU, kGroup = C::kGroup;
  // Accumulator tiles (m16n8 f32, 4 registers a lane): per matrix, one per pair of activation rows
  // (A rows 0-7 = row 2p's segments, 8-15 = row 2p + 1's), and at one pair two chains (the chunk's
  // two k-steps), so that consecutive MMAs do not wait on each other.
  constexpr int kPairs = (kRows + 1) / 2;
  constexpr int kChains = kPairs == 1 ? 2 : 1;
  struct Acc {
    float c[kMats][kPairs][kChains][4];
    __device__ __forceinline__ void clear() {
#pragma unroll
      for (int m = 0; m < kMats; ++m)
#pragma unroll
        for (int pr = 0; pr < kPairs; ++pr)
#pragma unroll
          for (int h = 0; h < kChains; ++h) c[m][pr][h][0] = c[m][pr][h][1] = c[m][pr][h][2] = c[m][pr][h][3] = 0.0f;
    }
  };
  // bf16(x), zero past k. One row: [xrow] entries, entry j = chunk j (x values 8j .. 8j + 7), each
  // MMA's A register pair taken twice (rows 8-15 repeat rows 0-7, their products unused). More
  // rows, laid out as the MMAs' A registers: [kPairs][2][xrow] entries, entry (p, h, j) = words
  // 2h, 2h + 1 of chunk j of rows 2p and 2p + 1 interleaved (row 2p's word 2h, row 2p + 1's word 2h,
  // then the same for word 2h + 1; zeros for a row past kRows), so that one 16-byte read is one
  // k-step's A operand and a warp's reads are consecutive (no bank conflict). (From rows' own
  // 16-byte entries the compiler moved every register into place: 4 moves per MMA, half the
  // instructions of the 4-row instance. H200, 32-layer product chain, us/layer, rows' entries ->
  // this: 2 rows 114.9 -> 113.1, 6 153.5 -> 146.7, 8 196.4 -> 162.0, 3-5 within +-1.6; 1 row 108.8
  // -> 109.6, so one row keeps its entries. The two planes' entries side by side instead put lanes
  // 32 bytes apart: 2-way bank conflicts, every batch size slower, 1 row 110 -> 116.4.)
  extern __shared__ uint4 xs[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t k = p.k;
  const int64_t chunks = k / 8;
  const int64_t xrow = staged_chunks(k, kU);
  const int batches = static_cast<int>(xrow / (kU * 32));
  const int64_t items = gemv_items(p, kGroup);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kWarps;
  const uint64_t policy = evict_first_policy();

  // Issues batch b of item `item` into buf (the chunks past the row's end are zeros, not loaded).
  auto issue = [&](uint4 (&buf)[kU][kMats], int64_t item, int b) {
    const uint16_t* rows[kMats];
    if constexpr (kEpi == GemvEpilogue::kSwiGlu) {
      rows[0] = p.segments[0].w + item * k;
      rows[1] = p.segments[1].w + item * k;
    } else {
      const SegmentRow s = segment_row<kGroup>(p, item);
#pragma unroll
      for (int m = 0; m < kMats; ++m) rows[m] = s.w + (m == 0 ? s.row : min(s.row + m, s.n - 1)) * k;  // past n: unused
    }
    // A whole batch (warp-uniform) loads without bounds. (Bounds on every load, as in the batch
    // past the end, cost ~1.7 us per 8B layer: H200, 32-layer product chain, 110.8 vs 109.1 us.)
    if (static_cast<int64_t>(b + 1) * (kU * 32) <= chunks) {
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        const int64_t c = static_cast<int64_t>(b) * (kU * 32) + u * 32 + lane;
#pragma unroll
        for (int m = 0; m < kMats; ++m) buf[u][m] = load_weights(reinterpret_cast<const uint4*>(rows[m]) + c, policy);
      }
    } else {
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        const int64_t c = static_cast<int64_t>(b) * (kU * 32) + u * 32 + lane;
#pragma unroll
        for (int m = 0; m < kMats; ++m) {
          buf[u][m] = c < chunks ? load_weights(reinterpret_cast<const uint4*>(rows[m]) + c, policy)
                                 : make_uint4(0, 0, 0, 0);
        }
      }
    }
  };
  // acc += W_m row · bf16(x) rows over batch b's chunks, on the tensor cores (the file comment's
  // "Sums"). No bounds: past k both operands are zero. (A variant that skipped the selects only in
  // whole batches, two copies of this loop behind a warp-uniform branch, cost ~1.2 us per 8B layer
  // against this form: H200, 32-layer product chain, 112.4 vs 111.3 us/layer.)
  auto consume = [&](const uint4 (&buf)[kU][kMats], int b, Acc& acc) {
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int c = b * (kU * 32) + u * 32 + lane;  // shared-memory indices fit 32 bits
      if constexpr (kRows == 1) {
        const uint4 x = xs[c];
#pragma unroll
        for (int m = 0; m < kMats; ++m) {
          const uint4 w = buf[u][m];
          mma_bf16(acc.c[m][0][0], x.x, x.x, x.y, x.y, w.x, w.y);            // k-step A
          mma_bf16(acc.c[m][0][kChains - 1], x.z, x.z, x.w, x.w, w.z, w.w);  // k-step B
        }
      } else {
#pragma unroll
        for (int pr = 0; pr < kPairs; ++pr) {
          const uint4 xa = xs[2 * pr * static_cast<int>(xrow) + c];        // k-step A of rows 2pr, 2pr + 1
          const uint4 xb = xs[(2 * pr + 1) * static_cast<int>(xrow) + c];  // k-step B
#pragma unroll
          for (int m = 0; m < kMats; ++m) {
            const uint4 w = buf[u][m];
            mma_bf16(acc.c[m][pr][0], xa.x, xa.y, xa.z, xa.w, w.x, w.y);
            mma_bf16(acc.c[m][pr][kChains - 1], xb.x, xb.y, xb.z, xb.w, w.z, w.w);
          }
        }
      }
    }
  };
  // The warp's sums of `item` -> out; lane r stores activation row r. Resets acc. Lane (g, q) with
  // q == g / 2 holds the diagonal element C[n][n] (n = g = lane / 4; even rows of a pair) and
  // C[8 + n][n] (odd rows) of every accumulator tile: row segment n's part of the dot product; a
  // butterfly adds the 8.
  auto finish = [&](int64_t item, Acc& acc) {
    const int seg = lane / 4;
    const bool diagonal = lane % 4 == seg / 2;
    float mine[kMats];
#pragma unroll
    for (int m = 0; m < kMats; ++m) {
      mine[m] = 0.0f;
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        const int pr = r / 2, base = 2 * (r % 2);  // c0, c1: rows g; c2, c3: rows g + 8
        float even = acc.c[m][pr][0][base], odd = acc.c[m][pr][0][base + 1];
        if constexpr (kChains == 2) even += acc.c[m][pr][1][base], odd += acc.c[m][pr][1][base + 1];
        float v = diagonal ? (seg % 2 == 1 ? odd : even) : 0.0f;
#pragma unroll
        for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
        if (lane == r) mine[m] = v;
      }
    }
    acc.clear();
    if (lane >= kRows) return;
    if constexpr (kEpi == GemvEpilogue::kSwiGlu) {
      const float g = mine[0];
      p.segments[0].out[lane * p.segments[0].n + item] = g / (1.0f + expf(-g)) * mine[1];
    } else {
      const SegmentRow s = segment_row<kGroup>(p, item);
#pragma unroll
      for (int m = 0; m < kMats; ++m) {
        const int64_t row = s.row + m;
        if (m > 0 && row >= s.n) break;
        float y = mine[m];
        if (s.bias != nullptr) y += s.bias[row];
        const int64_t at = lane * s.n + row;
        if (p.residual != nullptr) y = p.residual[at] + y;
        s.out[at] = y;
      }
    }
  };

  // A dependent kernel launched programmatically may start now: it waits for this grid's completion
  // before it reads what this grid writes. (No-op without such a dependent.)
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  // The batch after (it, bb) in this warp's sequence: the next batch of the item, else the first of
  // the warp's next item.
  auto advance = [&](int64_t& it, int& bb) {
    if (++bb == batches) bb = 0, it += stride;
  };
  uint4 buf0[kU][kMats], buf1[kU][kMats];
  int64_t item = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  int b = 0;
  // The first two batches are in flight while the previous kernel finishes and x is staged: the
  // o product after a decode attention whose merge triggers early (decode_reduce.cu) waits through
  // most of the attention with them loaded.
  if (item < items) issue(buf0, item, 0);
  {
    int64_t item1 = item;
    int b1 = 0;
    advance(item1, b1);
    if (item1 < items) issue(buf1, item1, b1);
  }
  bool next_issued = true;  // buf1 holds the loop's first `next` batch already
  // Launched programmatically: wait for the previous kernel (x, the residual, the outputs' readers)
  // before touching activations. Weights never change within a step. (No-op otherwise.)
  asm volatile("griddepcontrol.wait;" ::: "memory");

  // The fused RMSNorm's sums of squares, in elementwise.cu's order: rows of more than kWideRow
  // columns by 256 threads (thread t: i = t, t + 256, ...; butterfly; the 8 warps added in order),
  // narrower rows by one warp (lane l: i = l, l + 32, ...; butterfly).
  __shared__ float norm_sums[kRows][8];
  const bool wide = k > kWideRow;
  if (p.norm_weight != nullptr) {
    const int width = wide ? 256 : 32, t = wide ? threadIdx.x % 256 : lane;
    const int group = wide ? threadIdx.x / 256 : warp, groups = wide ? kThreads / 256 : kWarps;
    for (int r = group; r < kRows; r += groups) {
      const float* in = p.x + r * k;
      float sum_sq = 0.0f;
      for (int64_t i = t; i < k; i += width) sum_sq = fmaf(in[i], in[i], sum_sq);
      for (int o = 16; o > 0; o /= 2) sum_sq += __shfl_xor_sync(0xffffffffu, sum_sq, o);
      if (lane == 0) norm_sums[r][t / 32] = sum_sq;
    }
    __syncthreads();
  }
  // Stage bf16(x) (or bf16 of the normalized x) in the layout above, a pair of rows per chunk and
  // thread (x is [kRows, k] contiguous, k % 8 == 0).
  const float4* x4 = reinterpret_cast<const float4*>(p.x);
  const float4* g4 = reinterpret_cast<const float4*>(p.norm_weight);
  // Chunk j of row r as four bf16x2 words (zeros past the last row).
  auto row_chunk = [&](int64_t r, int64_t j) -> uint4 {
    if (r >= kRows) return make_uint4(0, 0, 0, 0);
    float4 a = x4[2 * (r * chunks + j)], c = x4[2 * (r * chunks + j) + 1];
    if (p.norm_weight != nullptr) {
      float total = 0.0f;
      for (int w = 0; w < (wide ? 8 : 1); ++w) total += norm_sums[r][w];
      const float inv_rms = 1.0f / sqrtf(total / static_cast<float>(k) + p.norm_eps);
      const float4 ga = g4[2 * j], gc = g4[2 * j + 1];
      a = make_float4(ga.x * (a.x * inv_rms), ga.y * (a.y * inv_rms), ga.z * (a.z * inv_rms), ga.w * (a.w * inv_rms));
      c = make_float4(gc.x * (c.x * inv_rms), gc.y * (c.y * inv_rms), gc.z * (c.z * inv_rms), gc.w * (c.w * inv_rms));
    }
    return make_uint4(pack_bf16x2(a.x, a.y), pack_bf16x2(a.z, a.w), pack_bf16x2(c.x, c.y), pack_bf16x2(c.z, c.w));
  };
  for (int64_t i = threadIdx.x; i < kPairs * xrow; i += kThreads) {
    const int64_t pr = kPairs == 1 ? 0 : i / xrow, j = i - pr * xrow;
    uint4 e = make_uint4(0, 0, 0, 0), o = e;  // rows 2pr, 2pr + 1; the zero tail past k
    if (j < chunks) e = row_chunk(2 * pr, j), o = kRows == 1 ? e : row_chunk(2 * pr + 1, j);
    if constexpr (kRows == 1) {
      xs[j] = e;
    } else {
      xs[(2 * pr) * xrow + j] = make_uint4(e.x, o.x, e.y, o.y);
      xs[(2 * pr + 1) * xrow + j] = make_uint4(e.z, o.z, e.w, o.w);
    }
  }
  __syncthreads();

  Acc acc;
  acc.clear();
  // Two buffers in turn: the loop body is written twice so that both stay in registers.
  auto step = [&](uint4 (&cur)[kU][kMats], uint4 (&next)[kU][kMats]) {
    int64_t next_item = item;
    int next_b = b;
    advance(next_item, next_b);
    if (next_item < items && !next_issued) issue(next, next_item, next_b);
    next_issued = false;
    consume(cur, b, acc);
    if (b == batches - 1) finish(item, acc);
    item = next_item;
    b = next_b;
  };
  while (item < items) {
    step(buf0, buf1);
    if (item >= items) break;
    step(buf1, buf0);
  }
}

// Blocks of one instance that fit on a multiprocessor with `smem` bytes of dynamic shared memory
// (cached per size: launches inside graph capture then make no occupancy queries).
template <int kRows, GemvEpilogue kEpi>
int blocks_per_sm(size_t smem) {
  static std::mutex mutex;
  static std::vector<std::pair<size_t, int>> cache;
  const std::lock_guard<std::mutex> lock(mutex);
  for (const auto& [bytes, blocks] : cache) {
    if (bytes == smem) return blocks;
  }
  auto* kernel = gemv_kernel<kRows, kEpi>;
  NIBBLE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, gemv_max_smem_bytes()));
  NIBBLE_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared));
  int blocks = 0;
  NIBBLE_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, kThreads, smem));
  if (blocks < 1) {
    throw_unsupported("gemv_bf16", "shared memory bytes", "what one block can hold", static_cast<long long>(smem));
  }
  cache.emplace_back(smem, blocks);
  return blocks;
}

int device_attribute(cudaDeviceAttr attribute) {
  int device = 0, value = 0;
  NIBBLE_CUDA_CHECK(cudaGetDevice(&device));
  NIBBLE_CUDA_CHECK(cudaDeviceGetAttribute(&value, attribute, device));
  return value;
}

template <int kRows, GemvEpilogue kEpi>
void launch(const GemvParams& p, cudaStream_t stream) {
  const size_t smem = gemv_smem_bytes(kRows, p.k, kEpi);
  const int64_t items = gemv_items(p, Config<kRows, kEpi>::kGroup);
  const int64_t resident = static_cast<int64_t>(multiprocessors()) * blocks_per_sm<kRows, kEpi>(smem);
  const int64_t blocks = std::min<int64_t>(resident, (items + kWarps - 1) / kWarps);
  launch_kernel(gemv_kernel<kRows, kEpi>,
                {.grid = dim3(static_cast<unsigned>(blocks)), .block = dim3(kThreads), .smem_bytes = smem}, stream,
                p.programmatic_launch, p);
}

template <GemvEpilogue kEpi>
void launch_rows(const GemvParams& p, cudaStream_t stream) {
  switch (p.rows) {
    case 1: launch<1, kEpi>(p, stream); break;
    case 2: launch<2, kEpi>(p, stream); break;
    case 3: launch<3, kEpi>(p, stream); break;
    case 4: launch<4, kEpi>(p, stream); break;
    case 5: launch<5, kEpi>(p, stream); break;
    case 6: launch<6, kEpi>(p, stream); break;
    case 7: launch<7, kEpi>(p, stream); break;
    case 8: launch<8, kEpi>(p, stream); break;
    default: throw_unsupported("gemv_bf16", "rows", "1..8", p.rows);
  }
}

}  // namespace

// bf16(x) [rows, k] (rows padded to whole batches, gemv_smem_bytes) must fit in one block's shared
// memory: the device's opt-in limit (227 KiB on sm_90) less 1 KiB for the kernel's static shared
// memory (the norm sums, 256 bytes at most).
int gemv_max_smem_bytes() {
  static const int bytes = device_attribute(cudaDevAttrMaxSharedMemoryPerBlockOptin) - 1024;
  return bytes;
}

size_t gemv_smem_bytes(int64_t rows, int64_t k, GemvEpilogue epilogue) {
  const int r = static_cast<int>(rows);
  const int mats = epilogue == GemvEpilogue::kSwiGlu ? 2 : store_rows_per_item(r);
  const int64_t planes = rows == 1 ? 1 : (rows + 1) / 2 * 2;  // one row's entries, else pairs' A planes
  return static_cast<size_t>(planes) * staged_chunks(k, loads_per_batch(mats, r)) * 16;
}

void launch_gemv_bf16(const GemvParams& p, cudaStream_t stream) {
  if (p.epilogue == GemvEpilogue::kSwiGlu) {
    launch_rows<GemvEpilogue::kSwiGlu>(p, stream);
  } else {
    launch_rows<GemvEpilogue::kStore>(p, stream);
  }
}

}  // namespace nibble::cuda::detail
