#include "cache/page_layout.h"

#include "cache/kv_accounting.h"
#include "common/error.h"

namespace nibble::cache {

namespace {

// One part (K or V of one layer) starting at `offset` bytes into the page:
//   data   [kv_heads][page_size][data_row_bytes]   padded to kPageAlignment
//   scales [kv_heads][page_size][scale_row_bytes]  padded to kPageAlignment (nvfp4 only; else empty)
KvPartLayout make_part(quant::ElemFormat format, const KvGeometry& g, int64_t page_size, int64_t offset) {
  KvPartLayout part{};
  part.format = format;
  part.head_dim = g.head_dim;
  part.page_size = page_size;
  part.kv_heads = g.kv_heads;
  part.data_row_bytes = quant::data_bytes(format, g.head_dim);
  part.scale_row_bytes = quant::scale_bytes(format, g.head_dim);
  const int64_t rows = g.kv_heads * page_size;
  const int64_t data_section = align_up(rows * part.data_row_bytes, kPageAlignment);
  const int64_t scale_section = align_up(rows * part.scale_row_bytes, kPageAlignment);
  part.data_offset = offset;
  part.scale_offset = offset + data_section;
  part.bytes = data_section + scale_section;
  return part;
}

}  // namespace

PageLayout::PageLayout(KvGeometry geometry, quant::KvDtype dtype, int64_t page_size)
    : geometry_(geometry), dtype_(dtype), page_size_(page_size) {
  NIBBLE_CHECK(geometry.num_layers > 0, "a KV page layout needs at least one full-attention layer, got {}",
               geometry.num_layers);
  NIBBLE_CHECK(geometry.kv_heads > 0, "a KV page layout needs kv_heads > 0, got {}", geometry.kv_heads);
  NIBBLE_CHECK(page_size > 0, "page size must be a positive number of tokens, got {}", page_size);
  quant::validate_head_dim(dtype, quant::Rotation::kNone, geometry.head_dim);

  const quant::KvFormat fmt = quant::kv_format(dtype);
  parts_.reserve(2 * geometry.num_layers);
  int64_t offset = 0;
  for (int64_t layer = 0; layer < geometry.num_layers; ++layer) {
    for (quant::ElemFormat f : {fmt.k, fmt.v}) {
      parts_.push_back(make_part(f, geometry, page_size, offset));
      offset += parts_.back().bytes;
    }
  }
  page_bytes_ = offset;
}

int64_t PageLayout::bytes_per_token_per_layer() const {
  return kv_bytes_per_token_per_layer(dtype_, geometry_.kv_heads, geometry_.head_dim);
}

}  // namespace nibble::cache
