#pragma once
// Small-batch matrix products with bf16 weights (decode): out [rows, n] = bf16(x) [rows, k] · W^T,
// W [n, k] bf16 bits (quant/bf16.h), 1..kGemvMaxRows activation rows. Memory-bound: each weight
// byte is read once, so the kernel (gemv.cu) is built to stream W at the device's read bandwidth.
//
// Numerics (every variant): x f32 (optionally RMS-normalized first, below) is rounded to bf16
// (quant::bf16_from_f32, as the cuBLAS path rounds it); products and sums on the tensor cores
// (bf16 in, f32 accumulators), in a fixed order: deterministic, another order than cuBLAS and the CPU.
//
// Variants, one launch each:
//   plain      up to kGemvMaxSegments products that share x (q/k/v): segment s writes
//              out_s [rows, n_s] = x · W_s^T (+ bias_s); with `residual` (one segment only):
//              out = residual + (x · W^T (+ bias)), out may alias residual (the residual add of o and
//              down projections);
//   swiglu     two segments of equal n (gate, up): out [rows, n] = silu(x · Wg^T) · (x · Wu^T),
//              silu(g) = g / (1 + expf(-g)) as elementwise.h's silu_mul computes it. Only
//              segment 0's out is written.
//
// Kernel shape (gemv.cu; from kGemvTileMinRows rows the tile build of gemv_tiles.cu where it
// applies, described there): a persistent grid (as many blocks as fit on the device at once, never
// more than the work needs), 16 warps per block; bf16(x) staged once per block in shared memory
// (rows·k·2 bytes, rows above 1 rounded up to even, k to whole batches; from 2 rows on laid out
// as the MMAs' A registers); each warp takes whole rows of W (rows g, g + G, ...
// of the segments laid end to end, G warps in all; from 6 activation rows on, pairs of consecutive
// rows, which share each read of x), its lanes split the k axis in 16-byte loads, the
// next batch of loads issued before the current one is used (also across rows), each load feeding
// two m16n8k16 MMAs whose diagonal holds the row's partial sums, then a warp butterfly per output.
// With programmatic_launch, the first batch of weights is loaded before waiting on the previous
// kernel.
// Weight loads skip L1 and are marked evict-first in L2 (activations and KV pages stay there).
//
// No entry allocates or synchronizes: safe inside CUDA-graph capture.
#include <cuda_runtime.h>

#include <cstdint>

namespace nibble::cuda {

inline constexpr int64_t kGemvMaxRows = 8;
inline constexpr int kGemvMaxSegments = 3;
// From this many activation rows on, products whose k is one of kGemvTileKs (or kGemvSplitKs,
// below) and whose segments' n are multiples of 16 run the tile build (gemv_tiles.cu: W in 16-row
// tiles as the MMA's A operand, staged through shared memory); the others, and fewer rows, the
// streaming one (gemv.cu).
inline constexpr int64_t kGemvTileMinRows = 3;
// The hidden sizes the tile build takes whole (one k slice of k / 8 columns per warp): Llama-3.2-1B
// and Qwen3-Next 2048, Qwen3-4B 2560, Llama-3.2-3B 3072, Qwen2.5-7B 3584, Llama-3-8B, Mistral-7B and
// Qwen3-8B 4096, Qwen3-14B 5120.
inline constexpr int64_t kGemvTileKs[] = {2048, 2560, 3072, 3584, 4096, 5120};
// The tile build's k-split shapes (down products: Llama-3-8B's and Mistral-7B's k = 14336, Qwen3-8B's
// 12288, Llama-3.2-1B/3B's 8192): kGemvKParts blocks each sum a quarter of k for the same tile and
// meet in GemvSplitWorkspace (gemv_tiles.cu).
inline constexpr int64_t kGemvSplitKs[] = {8192, 12288, 14336};
inline constexpr int kGemvKParts = 4;
inline constexpr int64_t kGemvSplitMaxN = 16384;  // the widest output the split shapes take
constexpr bool gemv_split_k(int64_t k) {
  for (const int64_t s : kGemvSplitKs) {
    if (k == s) return true;
  }
  return false;
}
constexpr bool gemv_tile_k(int64_t k) {
  for (const int64_t s : kGemvTileKs) {
    if (k == s) return true;
  }
  return false;
}

enum class GemvEpilogue : uint8_t { kStore, kSwiGlu };

struct GemvSegment {
  const uint16_t* w = nullptr;  // [n, k] bf16, 16-byte aligned
  const float* bias = nullptr;  // [n] or null (kStore only)
  float* out = nullptr;         // [rows, n] (kSwiGlu: segment 0's only)
  int64_t n = 0;
};

// Device memory the k-split products need, fixed for graph capture (the CUDA backend owns one):
// each part's partial tile, and per tile a count of the parts done, zero between launches (the last
// part to finish a tile resets it).
struct GemvSplitWorkspace {
  float* partials = nullptr;     // [kGemvKParts][max_n / 16][128] f32
  uint32_t* counters = nullptr;  // [max_n / 16], zeros
  int64_t max_n = 0;             // the most output rows (all segments) a product may have
};
// Bytes of a workspace for products of up to max_n outputs (partials, then counters).
int64_t gemv_split_workspace_bytes(int64_t max_n);

struct GemvParams {
  const float* x = nullptr;  // [rows, k], 16-byte aligned
  int64_t rows = 0;          // 1..kGemvMaxRows
  int64_t k = 0;             // multiple of 8
  GemvSegment segments[kGemvMaxSegments];
  int num_segments = 0;
  GemvEpilogue epilogue = GemvEpilogue::kStore;
  const float* residual = nullptr;  // [rows, n] or null: kStore with one segment
  // Programmatic dependent launch (sm_90): the kernel may start while the previous kernel on the
  // stream finishes; it loads its first two batches of weights (constant during a step), then waits
  // for that kernel's results before it reads x or writes anything. It also lets the next kernel launched
  // this way (the down GEMV after gate/up) start as its own blocks finish.
  bool programmatic_launch = false;
  // RMSNorm fused into the staging of x (kStore and kSwiGlu): the products read
  // bf16(norm_weight[i] · (x[i] · inv_rms)), inv_rms = 1 / sqrtf(mean(x²) + eps) per row, the sum of
  // squares in elementwise.h's rms_norm order (one warp per row up to 1024 columns, 256 threads
  // above), so the result equals rms_norm then gemv bit for bit.
  const float* norm_weight = nullptr;  // [k], 16-byte aligned, or null: no norm
  float norm_eps = 0.0f;
  // For the tile build's k-split shape (gemv_tile_shape); without it such a product streams (gemv.cu).
  GemvSplitWorkspace split = {};
};

// Whether the kernel takes these shapes: rows 1..kGemvMaxRows, k % 8 == 0, bf16(x) fits in one
// block's shared memory (rows·k·2 bytes, rows above 1 rounded up to even, ≤ the device's opt-in
// limit, 227 KiB on sm_90), n > 0,
// pointers 16-byte aligned, the epilogue's segment rules (kSwiGlu: 2 segments of equal n, no bias;
// a residual: 1 segment).
bool gemv_supports(const GemvParams& p);
// Throws nibble::Error when !gemv_supports(p) or a pointer is null.
void gemv_bf16(const GemvParams& p, cudaStream_t stream);

// The most activation rows at which this GEMV outpaces a cuBLAS GEMM of the same product (the fused
// ones against their separate ops). A GEMM streams W at a rate that hardly depends on the rows; this
// kernel's work per weight load grows with them (two MMAs and a read of x per pair of rows), so past
// some rows cuBLAS is the faster path. Measured on the H200 for the products of Llama-3-8B, each
// call alone (bench_model_decode --product-rows 1,2,4,8, L2 flushed; GEMV vs cuBLAS us) and in the
// engine's step (--batch 4 and 8; CUDA graphs run 1, 2, 4 or 8 rows), 2026-12-01:
//   k > 8192 (down + residual, k = 14336): 4. Alone 4 rows 44.8 vs 38.4, 8: 54.4 vs 39.2; in the
//     batch-4 step the GEMV's down was still the faster (4.98 vs 5.05 ms per step with it on cuBLAS:
//     under PDL the GEMVs overlap each other's boundaries). Since the sixteenth session the tile
//     build's k-split takes the k of kGemvSplitKs from 3 rows: 8 for those shapes (below).
//   a fused norm over more than 8k outputs (the LM head): 4. 4 rows 258.6 vs 267.6, 8: 283.7 vs 266.1.
//   everything else (q/k/v, gate/up + SwiGLU, o + residual): 8. 8 rows: 38.4 vs 45.9, 80.3 vs 82.2,
//     22.0 vs 19.2 alone but in the batch-8 step (1K bf16 KV) o and gate/up on cuBLAS 6.060 ms, gate/up
//     on the GEMV 6.009, both 5.906.
// (n: the output rows of all segments together.) With the tile build (fifteenth session, same
// measurement at 4 and 8 rows, L2 flushed): q/k/v 23.7 / 24.4 us vs 46.4 / 46.0, gate/up 66.4 / 67.3
// vs 81.9 / 82.0, o + residual 17.1 / 17.8 vs 19.2 / 19.4; down (not a tile shape) 44.8 / 54.1 vs
// 37.8 / 38.3; the fused norm + LM head 248.8 / 249.1 vs cuBLAS's 256.3 / 257.6 alone. In the step
// (sixteenth session, H200, bench_model_decode --modes 9 --steps 16, two runs each, ms) the LM head
// on the tile build at 5-8 rows did not pay: batch 8 bf16 1K 5.111 -> 5.106, 32K 12.52 -> 12.51,
// nvfp4 1K 5.136 -> 5.201, 32K 7.935 -> 8.015; batch 6 bf16 equal, nvfp4 1K 5.096 -> 5.132, 32K 7.558
// -> 7.637. So it stays on cuBLAS past 4 rows. The down product on the tile build's k-split (same
// session, same measurement): alone 38.3 / 38.7 / 40.7 us at 3 / 4 / 8 rows vs cuBLAS's 39.2 / 39.0 /
// 39.8; in the step batch 8 1.4% (bf16 1K) to 3.9% (nvfp4 1K) faster than with it on cuBLAS, batch 4
// 1.5-4.2% faster than with it on the streaming build (gemv_tiles.cu has the figures).
int gemv_faster_rows(const GemvParams& p);

// The shapes the tile build (gemv_tiles.cu) takes from kGemvTileMinRows rows: k in kGemvTileKs and
// every segment's n a multiple of 16 (its shared memory, checked at launch, fits sm_90's); and k in
// kGemvSplitKs, split over kGemvKParts blocks per tile: one segment of n <= kGemvSplitMaxN, no
// fused norm, no SwiGLU (the down product and its residual add). The split shapes also need
// p.split, for n up to its max_n; without it gemv_bf16 streams the product (gemv.cu).
bool gemv_tile_shape(const GemvParams& p);

}  // namespace nibble::cuda
