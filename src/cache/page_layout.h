#pragma once
// The byte layout of one KV page, for every format. docs/kv_layout.md states the same in prose.
//
// A page holds page_size consecutive token slots of one request for every full-attention layer,
// keys and values, quantized data and block scales together, so a page can be shared (prefix
// cache), moved or evicted as one unit. The pool is pages × page_bytes, page p at p·page_bytes.
//
//   page  = [layer 0: K part | V part] [layer 1: K part | V part] ... (full-attention layers only)
//   part  = data   [kv_heads][page_size][data_bytes(fmt, head_dim)]      padded to 16 bytes
//           scales [kv_heads][page_size][head_dim / 16]  (nvfp4 only)    padded to 16 bytes
//
// "HND" order inside a part: one KV head's tokens are contiguous, so a decode kernel working on one
// KV head (shared by its GQA group of query heads) streams one run of data and one run of scales.
// Every part and every section starts at a 16-byte boundary (16-byte vector loads). The per-layer
// float32 global scales g live beside the pool (KvGlobalScales), not in pages.
//
// Page tables (every backend, every attention path): token position t of a sequence lives in page
// page_table[t / page_size] of that sequence, at slot t % page_size. A batch passes its page tables
// as one int32 array [num_seqs][max_pages_per_seq] built once per step on the host.
#include <cstdint>
#include <vector>

#include "quant/kv_format.h"
#include "quant/hd.h"

namespace nibble::cache {

inline constexpr int64_t kPageAlignment = 16;

NIBBLE_HD constexpr int64_t align_up(int64_t n, int64_t a) { return (n + a - 1) / a * a; }

// Offsets of one part (the K or the V of one layer) inside a page. Plain data: usable in kernels.
struct KvPartLayout {
  quant::ElemFormat format;
  int64_t head_dim;
  int64_t page_size;
  int64_t kv_heads;
  int64_t data_row_bytes;   // data_bytes(format, head_dim): one token of one head
  int64_t scale_row_bytes;  // scale_bytes(format, head_dim): 0 unless nvfp4
  int64_t data_offset;      // from the start of the page
  int64_t scale_offset;     // from the start of the page (== data_offset + data section if nvfp4)
  int64_t bytes;            // data section + scale section, both padded

  // Byte offset (from the page start) of token slot `slot` of head `head`.
  NIBBLE_HD int64_t data_at(int64_t head, int64_t slot) const {
    return data_offset + (head * page_size + slot) * data_row_bytes;
  }
  NIBBLE_HD int64_t scales_at(int64_t head, int64_t slot) const {
    return scale_offset + (head * page_size + slot) * scale_row_bytes;
  }
};

struct KvGeometry {
  int64_t num_layers = 0;  // full-attention layers: the only ones with a per-token cache
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
};

// The layout of a whole page: one K and one V part per full-attention layer.
class PageLayout {
 public:
  // Throws nibble::Error when the geometry does not suit the dtype (see quant::validate_head_dim)
  // or page_size is not positive.
  PageLayout(KvGeometry geometry, quant::KvDtype dtype, int64_t page_size);

  const KvGeometry& geometry() const { return geometry_; }
  quant::KvDtype dtype() const { return dtype_; }
  int64_t page_size() const { return page_size_; }
  int64_t page_bytes() const { return page_bytes_; }

  // layer: index among the full-attention layers, 0 .. num_layers-1.
  const KvPartLayout& k(int64_t layer) const { return parts_[2 * layer]; }
  const KvPartLayout& v(int64_t layer) const { return parts_[2 * layer + 1]; }

  // Exact cache bytes one token costs in one layer (K and V, all heads, scales included,
  // no padding): the figure `nibble plan` reports. nvfp4 = 9/16 of fp8.
  int64_t bytes_per_token_per_layer() const;
  int64_t bytes_per_token() const { return bytes_per_token_per_layer() * geometry_.num_layers; }

 private:
  KvGeometry geometry_;
  quant::KvDtype dtype_;
  int64_t page_size_;
  int64_t page_bytes_ = 0;
  std::vector<KvPartLayout> parts_;  // [layer][K, V]
};

// Per-layer float32 global multipliers g for K and V (1.0 = SGLang's recipe). Beside the pool.
struct KvGlobalScales {
  std::vector<float> k;  // [num_layers]
  std::vector<float> v;  // [num_layers]
  static KvGlobalScales ones(int64_t num_layers) {
    return {std::vector<float>(num_layers, 1.0f), std::vector<float>(num_layers, 1.0f)};
  }
};

}  // namespace nibble::cache
