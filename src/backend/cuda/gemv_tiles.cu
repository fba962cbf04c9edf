// The decode GEMV's build for 3..8 activation rows (gemv.h; gemv_bf16 picks it where it applies):
// out [rows, n] = bf16(x) [rows, k] · W^T with W in tiles of 16 rows on the tensor cores as the MMA's
// A operand, so that one m16n8k16 MMA takes 512 bytes of W for all 8 activation rows at once. The
// streaming GEMV (gemv.cu) takes two MMAs and a read of x per pair of activation rows for each
// 512-byte load, and slows with the rows (58% of the read bandwidth at 8 rows).
//
// Work: a persistent grid, one block per SM (8 warps). Tiles (16 rows of W; kSwiGlu: 16 gate rows
// and the same 16 up rows) go to blocks round robin; within a block warp w owns the k slice
// [w·k/8, (w+1)·k/8) of every tile. Each warp streams its slices of its block's tiles through a
// private ring of 3 shared-memory stages (kStageK columns of the tile's rows), each filled by one
// cp.async.bulk per row (lanes 0..15, or 0..31 for gate and up) completing on the stage's mbarrier;
// a consumed stage is refilled at once, so the ring runs ahead across tiles. Rows sit kStageK · 2 +
// 16 bytes apart in a stage: ldmatrix's 8 row addresses then fall on distinct banks.
//   A   ldmatrix.x4 of 16 rows × 16 columns of the stage;
//   B   bf16(x)^T, the activation rows as the MMA's 8 columns (rows past p.rows are zeros): the
//       warp's slice is fixed, so its k-steps' B fragments are made once, before the tiles, and
//       kept in registers (2 per k-step);
//   D   f32, even and odd k-steps in two chains. At a tile's end the 8 warps' partial tiles meet in
//       shared memory (double-buffered, one barrier per tile) and 128 threads add them in warp
//       order and apply the epilogue (bias, residual, SwiGLU).
// k-split (kParts = kGemvKParts; the down products, k in kGemvSplitKs = 12288, 14336, whose B
// fragments of a whole k would not fit in registers): the grid is kParts groups of SMs / kParts blocks, group q
// summing columns [q·k/kParts, (q+1)·k/kParts) of every tile; the blocks of the four groups with the
// same index take the same tiles, store their partial tiles in the backend's workspace
// (GemvSplitWorkspace) and the last of them to finish adds the parts in part order (split_finish).
// Measured (H200, 2026-12-01, sixteenth session): the down product + residual alone 38.3 / 38.7 /
// 40.7 us at 3 / 4 / 8 rows against cuBLAS's 39.2 / 39.0 / 39.8 (the streaming build: 44.8 at 4,
// 54.1 at 8); in the engine's step (bench_model_decode --modes 9, two runs each, ms) batch 8 bf16 1K
// 5.115 -> 5.042, 32K 12.524 -> 12.479, nvfp4 1K 5.154 -> 4.951, 32K 7.948 -> 7.860; batch 4 bf16 1K
// 4.840 -> 4.684, 32K 8.663 -> 8.531, nvfp4 1K 4.955 -> 4.747, 32K 6.575 -> 6.405. Qwen3-8B's down
// (k = 12288; bench_model_decode --model qwen3-8b --layers 36): alone 34.1 / 35.4 us at 4 / 8 rows
// against cuBLAS's 36.7 / 36.3; its step batch 8 bf16 1K 5.374 -> 5.231, nvfp4 1K 5.433 -> 5.137,
// nvfp4 32K 8.520 -> 8.373; batch 4 bf16 1K 5.005 -> 4.847, nvfp4 32K 6.929 -> 6.740.
// Every hidden size of kGemvTileKs and the split of 8192 (same session; --model, batch 8, 1K, ms,
// against the streaming build and cuBLAS for those shapes): Qwen2.5-7B bf16 5.911 -> 5.126, nvfp4
// 5.950 -> 5.224; Llama-3.2-3B 3.454 -> 2.674, 3.426 -> 2.630; Qwen3-14B 10.428 -> 9.135, 10.396 ->
// 9.339; Qwen3-4B (its down, 9728, not a split shape) 4.232 -> 3.728, 4.254 -> 3.763.
// Tried there and not kept: the prologue's loads in larger batches (the norm's sums of squares 64
// loads per thread at a time instead of 32, the B fragments 16 k-steps instead of 8; 186 registers
// at k = 4096): batch 4 0.4-1.1% faster, batch 8 -0.2% to +1.2% (nvfp4 1K the slower one).
// Numerics: x (RMS-normalized first when fused, its sums of squares in elementwise.cu's order, as
// gemv.cu) rounded to bf16, products and f32 sums on the tensor cores in a fixed order:
// deterministic (the k-split's parts too); another order than gemv.cu's, so the two builds agree to
// f32 rounding, not bits.
//
// Measured (H200, 2026-12-01, fifteenth session). The engine's step (bench_model_decode --modes 9;
// batch 8 against the streaming GEMV's run earlier that session, batch 4 against the fourteenth
// round's): batch 8 bf16 1K 5.860 -> 5.094 ms, nvfp4 32K 8.666 -> 7.863; batch 4 bf16 1K 4.994 ->
// 4.805 (docs/PERFORMANCE.md, fifteenth round). A scratch chain of the 8B products of 32 layers (PDL,
// one graph; q/k/v, o and gate/up on the tile build, down on gemv.cu; us/layer against gemv.cu alone
// in the same call), with the
// stages filled by TMA 2D tiles (a tensor map per weight, 128-byte swizzle), which had measured the
// same as these bulk copies: 3 rows 128.9 / 132.1, 4 131.1 / 135.6, 5 136.9 / 147.8, 6 137.4 /
// 148.2, 7 140.8 / 159.7, 8 141.3 / 163.7 (2 rows 122.0 / 114.8: gemv.cu keeps 1 and 2). Before the
// B fragments were loaded 8 k-steps at a time, each lane's 32 k-steps were 32 dependent L2 round
// trips (ncu: the o product alone 28.1 us at 25% of DRAM throughput, the stall samples on those
// loads); before that, x in shared memory and 4 warps per block (one per scheduler): 40-45%.
#include <algorithm>
#include <cstdint>
#include <mutex>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/gemv.h"
#include "backend/cuda/gemv_common.cuh"
#include "backend/cuda/kernel_launch.h"

namespace nibble::cuda::detail {

int gemv_max_smem_bytes();  // gemv.cu

namespace {

using gemv_common::evict_first_policy;
using gemv_common::kWideRow;
using gemv_common::mma_bf16;
using gemv_common::multiprocessors;
using gemv_common::pack_bf16x2;

constexpr int kWarps = 8;
constexpr int kThreads = 32 * kWarps;
constexpr int kTileRows = 16;    // W rows per A tile (m16)
constexpr int kStages = 3;       // ring stages per warp

constexpr int stage_columns(int slice, int cap) {
  for (int c = cap; c > 16; c -= 16) {
    if (slice % c == 0) return c;
  }
  return 16;
}

// kParts > 1: the k-split build (the down product): k = kParts · kK, part q's blocks sum columns
// [q·kK, (q+1)·kK) of every tile they take.
template <int kSliceSteps, GemvEpilogue kEpi, int kParts = 1>
struct Cfg {
  static constexpr int kStepsPerWarp = kSliceSteps;
  static constexpr GemvEpilogue kEpilogue = kEpi;
  static constexpr int kSplitParts = kParts;
  static constexpr int kK = kSliceSteps * 16 * kWarps;                 // the k of one block's sums
  static constexpr int kLd = kK * kParts;                              // the product's k (row stride)
  static constexpr int kMats = kEpi == GemvEpilogue::kSwiGlu ? 2 : 1;  // A tiles per k-step (gate, up)
  static constexpr int kSlice = kSliceSteps * 16;                      // one warp's columns
  // Columns per stage: the widest multiple of 16 that divides the slice, up to 256 (128 for gate
  // and up): 256 / 128 at k = 2048 and 4096, 224 / 112 for slices of 448, 160 / 80 of 320. Rows
  // sit kStageK · 2 + 16 bytes apart, an odd number of 16-byte units: ldmatrix's 8 rows on
  // distinct banks.
  static constexpr int kStageK = stage_columns(kSlice, kMats == 2 ? 128 : 256);
  static constexpr int kStepsPerStage = kStageK / 16;
  static constexpr int kRowPitch = kStageK * 2 + 16;
  static constexpr int kStagesPerTile = kSliceSteps * 16 / kStageK;
  static constexpr int kStageBytes = kMats * kTileRows * kRowPitch;
  static constexpr int kRingBytes = kWarps * kStages * kStageBytes;
  static constexpr int kRedBytes = 2 * kWarps * kMats * 128 * 4;  // two tiles' partials
  static constexpr int kSmemBytes = kRingBytes + kRedBytes + kWarps * kStages * 8;
  static_assert(kStagesPerTile >= 1 && kStagesPerTile * kStageK == kSliceSteps * 16, "whole stages per slice");
  static_assert(kStageK % 16 == 0 && (kRowPitch / 16) % 2 == 1, "ldmatrix rows on distinct banks");
  static_assert(kParts == 1 || kEpi == GemvEpilogue::kStore, "the k-split build stores (bias, residual)");
};

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "wait_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra wait_%=;\n"
      "}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}
// `bytes` of global memory into shared memory, completing on `bar`; evicted first from L2.
__device__ __forceinline__ void bulk_copy(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar, uint64_t policy) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
      " [%0], [%1], %2, [%3], %4;" ::"r"(dst),
      "l"(src), "r"(bytes), "r"(bar), "l"(policy)
      : "memory");
}
__device__ __forceinline__ void ldmatrix_x4(uint32_t addr, uint32_t& a0, uint32_t& a1, uint32_t& a2, uint32_t& a3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(a0), "=r"(a1), "=r"(a2), "=r"(a3)
               : "r"(addr));
}

// A tile's rows: W at its first row (gate and up for kSwiGlu), bias, out, the segment's n and the
// tile's first row in it. (The segment chosen by compares: indexing the parameter's array with a
// runtime index put it in local memory.)
struct TileRows {
  const uint16_t* w0;
  const uint16_t* w1;
  const float* bias;
  float* out;
  int n;
  int row;
};
template <GemvEpilogue kEpi>
__device__ __forceinline__ TileRows tile_rows(const GemvParams& p, int tile, int k) {
  if constexpr (kEpi == GemvEpilogue::kSwiGlu) {
    const int row = tile * kTileRows;
    return {p.segments[0].w + static_cast<int64_t>(row) * k, p.segments[1].w + static_cast<int64_t>(row) * k, nullptr,
            p.segments[0].out, static_cast<int>(p.segments[0].n), row};
  } else {
    const int t0 = static_cast<int>(p.segments[0].n / kTileRows), t1 = static_cast<int>(p.segments[1].n / kTileRows);
    const GemvSegment& s = tile < t0 ? p.segments[0] : (tile < t0 + t1 ? p.segments[1] : p.segments[2]);
    const int row = (tile < t0 ? tile : (tile < t0 + t1 ? tile - t0 : tile - t0 - t1)) * kTileRows;
    return {s.w + static_cast<int64_t>(row) * k, nullptr, s.bias, s.out, static_cast<int>(s.n), row};
  }
}
__host__ __device__ int tile_count(const GemvParams& p) {
  if (p.epilogue == GemvEpilogue::kSwiGlu) return static_cast<int>(p.segments[0].n / kTileRows);
  int64_t t = 0;
  for (int s = 0; s < p.num_segments; ++s) t += p.segments[s].n / kTileRows;
  return static_cast<int>(t);
}

// The k-split build (kParts > 1). The kParts blocks with the same `first` (one per part) take the
// same tiles. At each tile's end threads 0-127 store the block's partial tile (its sum over the
// warps) to the workspace; after the last tile the block counts itself done on its group's
// counter, and the group's last block adds the parts of every tile in part order (deterministic:
// the order never depends on which block finishes last), then bias and residual, writes the
// outputs and resets the counter. (A count per tile, fenced at each tile's end, held warps 0-3 at
// every tile: the down product alone 46-48 us at 3-8 rows against cuBLAS's 35-39.)
__device__ __forceinline__ void split_store_partial(const GemvParams& p, const float* red, int tile, int part) {
  const int t = static_cast<int>(threadIdx.x);
  float sum = 0.0f;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) sum += red[w * 128 + t];
  const int64_t max_tiles = p.split.max_n / kTileRows;
  p.split.partials[(part * max_tiles + tile) * 128 + t] = sum;
}
template <int kParts>
__device__ __forceinline__ void split_finish(const GemvParams& p, int first, int grid, int tiles, int rows,
                                             int& last_part) {
  __threadfence();
  __syncthreads();  // every partial of this block stored and fenced before the count
  if (threadIdx.x == 0) last_part = atomicAdd(p.split.counters + first, 1u) == kParts - 1;
  __syncthreads();
  if (!last_part) return;
  __threadfence();
  const int64_t max_tiles = p.split.max_n / kTileRows;
  const int t = static_cast<int>(threadIdx.x) % 128, l = t / 4, e = t % 4;
  const int row = l / 4 + 8 * (e / 2), act = 2 * (l % 4) + e % 2;
  const GemvSegment& s = p.segments[0];
  // Threads 0-127 take the group's even tiles, 128-255 its odd ones, 4 tiles' loads in flight.
  constexpr int kBatch = 4;
  for (int tile0 = first + (static_cast<int>(threadIdx.x) / 128) * grid; tile0 < tiles; tile0 += 2 * kBatch * grid) {
    float y[kBatch], r[kBatch];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int tile = tile0 + 2 * b * grid;
      y[b] = 0.0f;
      r[b] = 0.0f;
      if (tile < tiles && act < rows) {
        float part_sum[kParts];
#pragma unroll
        for (int q = 0; q < kParts; ++q) part_sum[q] = __ldcg(p.split.partials + (q * max_tiles + tile) * 128 + t);
#pragma unroll
        for (int q = 0; q < kParts; ++q) y[b] += part_sum[q];
        if (s.bias != nullptr) y[b] += s.bias[tile * kTileRows + row];
        if (p.residual != nullptr) r[b] = p.residual[static_cast<int64_t>(act) * s.n + tile * kTileRows + row];
      }
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int tile = tile0 + 2 * b * grid;
      if (tile < tiles && act < rows) {
        s.out[static_cast<int64_t>(act) * s.n + tile * kTileRows + row] = p.residual != nullptr ? r[b] + y[b] : y[b];
      }
    }
  }
  if (threadIdx.x == 0) p.split.counters[first] = 0;  // for the next launch (ordered after this grid ends)
}

// Shared memory: rings [warps][kStages][stage] | partial tiles [2][warps][mats][128] f32 | mbarriers.
// Grid: kParts groups of gridDim.x / kParts blocks; group q sums columns [q·kK, (q+1)·kK) of tiles
// first, first + per_part, ... (kParts = 1: every block all of k).
template <int kSliceSteps, GemvEpilogue kEpi, int kParts>
__global__ void __launch_bounds__(kThreads, 1) gemv_tiles_kernel(const GemvParams p) {
  using C = Cfg<kSliceSteps, kEpi, kParts>;
  constexpr int kK = C::kK, kLd = C::kLd, kMats = C::kMats, kStageK = C::kStageK, kPer = C::kStagesPerTile;
  constexpr int kSlice = kSliceSteps * 16;
  extern __shared__ __align__(128) uint8_t smem[];
  uint8_t* rings = smem;
  float* red = reinterpret_cast<float*>(rings + C::kRingBytes);
  uint64_t* bars = reinterpret_cast<uint64_t*>(reinterpret_cast<uint8_t*>(red) + C::kRedBytes);
  __shared__ float norm_sums[kGemvMaxRows][8];
  __shared__ int last_part;  // kParts > 1: whether this block is the last of its group to finish

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int tiles = tile_count(p);
  const int grid = static_cast<int>(gridDim.x) / kParts;  // blocks per part: the tile stride
  const int part = static_cast<int>(blockIdx.x) / grid;
  const int first = static_cast<int>(blockIdx.x) - part * grid;
  const int slice0 = part * kK + warp * kSlice;  // this warp's first column
  const uint32_t ring_s = smem_addr(rings + warp * kStages * C::kStageBytes);
  const uint32_t bar0 = smem_addr(bars + warp * kStages);
  const uint64_t policy = evict_first_policy();

  // A dependent kernel launched programmatically may start now: it waits for this grid's completion
  // before it reads what this grid writes.
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  if (lane == 0) {
    for (int s = 0; s < kStages; ++s) mbar_init(bar0 + 8 * s, 1);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncwarp();

  // Copy cursor: the warp's next stage to fill (stage j of tile `it`) and its ring slot.
  int it = first, ij = 0, islot = 0;
  auto issue = [&] {
    if (it < tiles) {
      const uint32_t bar = bar0 + 8 * islot;
      if (lane == 0) mbar_expect_tx(bar, kMats * kTileRows * kStageK * 2);
      __syncwarp();
      if (lane < kMats * kTileRows) {
        const TileRows t = tile_rows<kEpi>(p, it, kLd);
        const int m = lane / kTileRows, r = lane % kTileRows;
        const uint16_t* src = (m == 0 ? t.w0 : t.w1) + r * kLd + slice0 + ij * kStageK;
        bulk_copy(ring_s + islot * C::kStageBytes + (m * kTileRows + r) * C::kRowPitch, src, kStageK * 2, bar, policy);
      }
    }
    if (++ij == kPer) ij = 0, it += grid;
    if (++islot == kStages) islot = 0;
  };
  // Weights do not depend on the previous kernel: the ring fills while it finishes.
  for (int q = 0; q < kStages; ++q) issue();
  asm volatile("griddepcontrol.wait;" ::: "memory");

  // The fused RMSNorm's sums of squares in elementwise.cu's order for rows wider than kWideRow (both
  // k this build takes): 256 threads (thread t: i = t, t + 256, ...; butterfly; the 8 warps' sums
  // added in order) — this block's 256 threads, every row at once so that all rows' loads are in
  // flight together.
  const int rows = static_cast<int>(p.rows);
  static_assert(kK > kWideRow && kThreads == 256, "the wide-row order of elementwise.cu's rms_norm");
  if (kParts == 1 && p.norm_weight != nullptr) {  // (no fused norm with a k-split: gemv_tile_shape)
    float s[kGemvMaxRows];
#pragma unroll
    for (int r = 0; r < kGemvMaxRows; ++r) s[r] = 0.0f;
#pragma unroll 4
    for (int i = static_cast<int>(threadIdx.x); i < kK; i += 256) {
      float v[kGemvMaxRows];
#pragma unroll
      for (int r = 0; r < kGemvMaxRows; ++r) v[r] = r < rows ? p.x[r * kK + i] : 0.0f;
#pragma unroll
      for (int r = 0; r < kGemvMaxRows; ++r) s[r] = fmaf(v[r], v[r], s[r]);
    }
#pragma unroll
    for (int r = 0; r < kGemvMaxRows; ++r) {
      for (int o = 16; o > 0; o /= 2) s[r] += __shfl_xor_sync(0xffffffffu, s[r], o);
      if (lane == 0) norm_sums[r][warp] = s[r];
    }
    __syncthreads();
  }
  // This warp's B fragments: k-step s of its slice, lane (g, c) = row g's columns 2c, 2c + 1 and
  // 8 + 2c, 9 + 2c. Loaded 8 k-steps at a time, every load of a batch before its first use (one
  // k-step at a time they were 32 dependent L2 round trips per lane).
  uint2 xr[kSliceSteps];
  {
    const int g = lane / 4, c = lane % 4, gr = g < rows ? g : 0;
    const bool norm = kParts == 1 && p.norm_weight != nullptr;
    float inv_rms = 1.0f;
    if (norm) {
      float total = 0.0f;
      for (int w = 0; w < kWarps; ++w) total += norm_sums[gr][w];
      inv_rms = 1.0f / sqrtf(total / static_cast<float>(kK) + p.norm_eps);
    }
    constexpr int kBatch = 8;
#pragma unroll
    for (int s0 = 0; s0 < kSliceSteps; s0 += kBatch) {
      float2 a[kBatch], b[kBatch], ga[kBatch], gb[kBatch];
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        if (s0 + u >= kSliceSteps) break;  // (the split build's 28 k-steps: a last batch of 4)
        const int k0 = slice0 + 16 * (s0 + u) + 2 * c;
        a[u] = *reinterpret_cast<const float2*>(p.x + gr * kLd + k0);
        b[u] = *reinterpret_cast<const float2*>(p.x + gr * kLd + k0 + 8);
        if (norm) {
          ga[u] = *reinterpret_cast<const float2*>(p.norm_weight + k0);
          gb[u] = *reinterpret_cast<const float2*>(p.norm_weight + k0 + 8);
        }
      }
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        if (s0 + u >= kSliceSteps) break;
        float2 x0 = a[u], x1 = b[u];
        if (norm) {  // the order of gemv.cu's staging: weight · (x · inv_rms)
          x0 = make_float2(ga[u].x * (x0.x * inv_rms), ga[u].y * (x0.y * inv_rms));
          x1 = make_float2(gb[u].x * (x1.x * inv_rms), gb[u].y * (x1.y * inv_rms));
        }
        xr[s0 + u] = g < rows ? make_uint2(pack_bf16x2(x0.x, x0.y), pack_bf16x2(x1.x, x1.y)) : make_uint2(0, 0);
      }
    }
  }

  // ldmatrix row address of this lane: matrix lane / 8 (rows 0-7 | 8-15 × columns 0-7 | 8-15),
  // its row lane % 8.
  const int lrow = lane % 8 + 8 * ((lane / 8) % 2);
  const uint32_t lane_off = lrow * C::kRowPitch + (lane / 16) * 16;
  int cslot = 0;
  uint32_t cphase = 0;
  for (int i = 0;; ++i) {
    const int tile = first + i * grid;
    if (tile >= tiles) break;
    float acc[kMats][2][4];
#pragma unroll
    for (int m = 0; m < kMats; ++m)
#pragma unroll
      for (int h = 0; h < 2; ++h) acc[m][h][0] = acc[m][h][1] = acc[m][h][2] = acc[m][h][3] = 0.0f;
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      mbar_wait(bar0 + 8 * cslot, cphase);
      const uint32_t st = ring_s + cslot * C::kStageBytes + lane_off;
#pragma unroll
      for (int ss = 0; ss < C::kStepsPerStage; ++ss) {
        const uint2 b = xr[j * C::kStepsPerStage + ss];
#pragma unroll
        for (int m = 0; m < kMats; ++m) {
          uint4 a;
          ldmatrix_x4(st + m * kTileRows * C::kRowPitch + ss * 32, a.x, a.y, a.z, a.w);
          // Chains by the slice's k-step parity, not the stage's: the same order whatever the stage
          // width (gate/up and a lone product of one k may differ: 80 and 160 columns at 2560).
          mma_bf16(acc[m][(j * C::kStepsPerStage + ss) % 2], a.x, a.y, a.z, a.w, b.x, b.y);
        }
      }
      __syncwarp();  // every lane's reads of the stage done: refill it
      issue();
      if (++cslot == kStages) cslot = 0, cphase ^= 1;
    }
    // The warp's partial tile (m16n8 layout: lane (g, c) holds rows g, g + 8 × columns 2c, 2c + 1).
    float* mine = red + ((i % 2) * kWarps + warp) * kMats * 128;
#pragma unroll
    for (int m = 0; m < kMats; ++m)
#pragma unroll
      for (int e = 0; e < 4; ++e) mine[m * 128 + lane * 4 + e] = acc[m][0][e] + acc[m][1][e];
    __syncthreads();  // (the other buffer is the next tile's: one barrier per tile)
    if constexpr (kParts > 1) {
      if (threadIdx.x < 128) split_store_partial(p, red + (i % 2) * kWarps * 128, tile, part);
      continue;
    }
    if (threadIdx.x < 128) {
      const int t = static_cast<int>(threadIdx.x), l = t / 4, e = t % 4;
      const int row = l / 4 + 8 * (e / 2), act = 2 * (l % 4) + e % 2;
      if (act < rows) {
        const float* all = red + (i % 2) * kWarps * kMats * 128;
        float sum[kMats];
#pragma unroll
        for (int m = 0; m < kMats; ++m) {
          sum[m] = 0.0f;
#pragma unroll
          for (int w = 0; w < kWarps; ++w) sum[m] += all[(w * kMats + m) * 128 + t];
        }
        const TileRows tr = tile_rows<kEpi>(p, tile, kLd);
        const int64_t at = static_cast<int64_t>(act) * tr.n + tr.row + row;
        if constexpr (kEpi == GemvEpilogue::kSwiGlu) {
          const float g = sum[0];
          tr.out[at] = g / (1.0f + expf(-g)) * sum[kMats - 1];
        } else {
          float y = sum[0];
          if (tr.bias != nullptr) y += tr.bias[tr.row + row];
          if (p.residual != nullptr) y = p.residual[at] + y;
          tr.out[at] = y;
        }
      }
    }
  }
  if constexpr (kParts > 1) split_finish<kParts>(p, first, grid, tiles, rows, last_part);
}


template <int kSliceSteps, GemvEpilogue kEpi, int kParts = 1>
void launch(const GemvParams& p, cudaStream_t stream) {
  using C = Cfg<kSliceSteps, kEpi, kParts>;
  static_assert(kParts == 1 || gemv_split_k(C::kLd), "a split shape");
  auto* kernel = &gemv_tiles_kernel<kSliceSteps, kEpi, kParts>;
  static std::once_flag raised;  // one per instantiation
  std::call_once(raised, [&] {
    NIBBLE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, C::kSmemBytes));
  });
  const int per_part = std::max(1, std::min(tile_count(p), multiprocessors() / kParts));
  launch_kernel(kernel,
                {.grid = dim3(static_cast<unsigned>(per_part * kParts)), .block = dim3(kThreads),
                 .smem_bytes = static_cast<size_t>(C::kSmemBytes)},
                stream, p.programmatic_launch, p);
}

}  // namespace

// Every shape's instance, by k: (k / 16 / warps) k-steps per warp, or with the split (kGemvSplitKs)
// k / 16 / warps / parts; `fn` gets the instance's Cfg as a tag.
template <int64_t kTileK, typename Fn>
bool with_cfg_k(const GemvParams& p, Fn&& fn) {
  if (p.k != kTileK) return false;
  constexpr bool kSplit = gemv_split_k(kTileK);
  constexpr int kParts = kSplit ? kGemvKParts : 1;
  constexpr int kSteps = static_cast<int>(kTileK / (16 * kWarps * kParts));
  static_assert(kSteps * 16 * kWarps * kParts == kTileK, "whole k-steps per warp");
  if constexpr (!kSplit) {
    if (p.epilogue == GemvEpilogue::kSwiGlu) {
      fn(Cfg<kSteps, GemvEpilogue::kSwiGlu, kParts>{});
      return true;
    }
  }
  fn(Cfg<kSteps, GemvEpilogue::kStore, kParts>{});
  return true;
}
template <typename Fn>
bool with_cfg(const GemvParams& p, Fn&& fn) {
  return with_cfg_k<2048>(p, fn) || with_cfg_k<2560>(p, fn) || with_cfg_k<3072>(p, fn) ||
         with_cfg_k<3584>(p, fn) || with_cfg_k<4096>(p, fn) || with_cfg_k<5120>(p, fn) ||
         with_cfg_k<8192>(p, fn) || with_cfg_k<12288>(p, fn) || with_cfg_k<14336>(p, fn);
}

bool gemv_tiles_supports(const GemvParams& p) {
  if (p.rows < kGemvTileMinRows || p.rows > kGemvMaxRows || !gemv_tile_shape(p)) return false;
  const bool split = gemv_split_k(p.k);
  if (split && (p.split.partials == nullptr || p.split.counters == nullptr || p.segments[0].n > p.split.max_n)) {
    return false;
  }
  int64_t smem = -1;
  with_cfg(p, [&](auto cfg) { smem = decltype(cfg)::kSmemBytes; });
  return smem > 0 && smem <= gemv_max_smem_bytes() && tile_count(p) < (1 << 24);
}

void launch_gemv_tiles(const GemvParams& p, cudaStream_t stream) {
  const bool launched = with_cfg(p, [&](auto cfg) {
    using C = decltype(cfg);
    launch<C::kStepsPerWarp, C::kEpilogue, C::kSplitParts>(p, stream);
  });
  if (!launched) throw_unsupported("gemv tile build", "k", "one of kGemvTileKs or kGemvSplitKs", p.k);
}

}  // namespace nibble::cuda::detail
