#pragma once
// KV-cache accounting: what one token costs (exact, the figure formats are compared by) and how many
// pages and tokens a byte budget holds (with the page layout's padding, the figure a pool gets).
//
//   bytes per token per layer = kv_heads × (head_vector_bytes(K format) + head_vector_bytes(V format))
//     f32 8·H·d   bf16 4·H·d   fp8 2·H·d   nvfp4 2·H·(d/2 + d/16) = 9/16 of fp8   k8v4 H·(d + d/2 + d/16)
//   page bytes = PageLayout::page_bytes() (every section padded to 16 bytes)
//   pages = floor(budget / page bytes), tokens = pages × page_size
#include <cstdint>

#include "cache/page_layout.h"
#include "quant/kv_format.h"

namespace nibble::cache {

// Exact bytes (data + block scales, no padding) one token costs in one full-attention layer, K and V.
int64_t kv_bytes_per_token_per_layer(quant::KvDtype dtype, int64_t kv_heads, int64_t head_dim);

struct KvCapacity {
  int64_t pages = 0;
  int64_t tokens = 0;  // pages × page_size
};

// How many whole pages of `layout` fit in budget_bytes (>= 0; throws nibble::Error if negative).
KvCapacity kv_capacity(const PageLayout& layout, int64_t budget_bytes);

}  // namespace nibble::cache
