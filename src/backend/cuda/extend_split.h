#pragma once
// How far extend attention splits each query tile's prefix (host only; the kernel side:
// extend_attention_tc.cuh, the merge: extend_merge.cuh).
//
// The extend grid has one block per (query tile, group of query heads). A chunk of C new tokens
// gives ceil(C / rows) tiles per head group: 8 blocks for a 64-token turn of a 32-head GQA-4 model
// at head_dim 128 (rows = 64), on a GPU that holds 132 of them at once, each block walking the
// whole prefix. Splitting the prefix into S parts makes S × as many blocks, each with 1/S of the
// prefix tiles, at the price of a partial (O, m, l) per block written and merged once.
#include <cstdint>

namespace nibble::cuda {

// A split part holds at least this many 64-key tiles: ~4 us of a block's work against the ~3-5 us
// it adds (its own prologue, the partial's write, its share of the merge).
inline constexpr int64_t kExtendMinSplitTiles = 4;
inline constexpr int kExtendMaxSplits = 64;

struct ExtendSplitInputs {
  int64_t work_blocks = 0;       // blocks of the unsplit grid with work (a bound: head groups × query tiles)
  int64_t max_prefix_tiles = 0;  // key tiles of the longest prefix
  int64_t slots = 0;             // blocks resident at once (SMs × blocks per SM)
  int64_t records = 0;           // partial records the workspace holds
};

// S >= 1: the most parts that still fit the unsplit grid's blocks into one wave of `slots`, give
// every part kExtendMinSplitTiles of the longest prefix, and fit the workspace; 1 where the grid
// already fills the GPU or the prefix is short.
int extend_prefix_splits(const ExtendSplitInputs& in);

}  // namespace nibble::cuda
