#include "cache/kv_pool.h"

#include <cmath>
#include <utility>

#include "common/error.h"

namespace nibble::cache {

KvPool::KvPool(PageLayout layout, int64_t num_pages, std::unique_ptr<KvStorage> storage)
    : layout_(std::move(layout)),
      allocator_(num_pages),
      storage_(std::move(storage)),
      global_scales_(KvGlobalScales::ones(layout_.geometry().num_layers)) {
  NIBBLE_CHECK(num_pages <= INT64_MAX / layout_.page_bytes(), "{} pages of {} bytes overflow", num_pages,
               layout_.page_bytes());
  const int64_t needed = num_pages * layout_.page_bytes();
  if (storage_ == nullptr) storage_ = std::make_unique<HostKvStorage>(needed);
  NIBBLE_CHECK(storage_->bytes() >= needed, "KV storage holds {} bytes but {} pages × {} bytes need {}",
               storage_->bytes(), num_pages, layout_.page_bytes(), needed);
  NIBBLE_CHECK(reinterpret_cast<uintptr_t>(storage_->data()) % kPageAlignment == 0,
               "KV storage must be aligned to {} bytes", kPageAlignment);
}

const KvPartLayout& KvPool::part(int64_t layer, KvSide side) const {
  NIBBLE_CHECK(layer >= 0 && layer < layout_.geometry().num_layers, "KV layer {} out of range 0..{}", layer,
               layout_.geometry().num_layers - 1);
  return side == KvSide::kK ? layout_.k(layer) : layout_.v(layer);
}

void KvPool::check_page(PageId page) const {
  NIBBLE_CHECK(page >= 0 && page < num_pages(), "page {} out of range 0..{}", page, num_pages() - 1);
}

void KvPool::check_slot(const KvPartLayout& p, int64_t head, int64_t slot) const {
  NIBBLE_CHECK(head >= 0 && head < p.kv_heads, "KV head {} out of range 0..{}", head, p.kv_heads - 1);
  NIBBLE_CHECK(slot >= 0 && slot < p.page_size, "token slot {} out of range 0..{}", slot, p.page_size - 1);
}

uint8_t* KvPool::page_address(PageId page) {
  check_page(page);
  return storage_->data() + static_cast<int64_t>(page) * layout_.page_bytes();
}

uint8_t* KvPool::part_address(PageId page, int64_t layer, KvSide side) {
  const KvPartLayout& p = part(layer, side);
  return page_address(page) + p.data_offset;
}

uint8_t* KvPool::data_address(PageId page, int64_t layer, KvSide side, int64_t head, int64_t slot) {
  const KvPartLayout& p = part(layer, side);
  check_slot(p, head, slot);
  return page_address(page) + p.data_at(head, slot);
}

uint8_t* KvPool::scales_address(PageId page, int64_t layer, KvSide side, int64_t head, int64_t slot) {
  const KvPartLayout& p = part(layer, side);
  NIBBLE_CHECK(p.scale_row_bytes > 0, "{} has no block scales", quant::elem_format_name(p.format));
  check_slot(p, head, slot);
  return page_address(page) + p.scales_at(head, slot);
}

void KvPool::check_integrity() const {
  allocator_.check_integrity();
  const int64_t layers = layout_.geometry().num_layers;
  NIBBLE_CHECK(static_cast<int64_t>(global_scales_.k.size()) == layers &&
                   static_cast<int64_t>(global_scales_.v.size()) == layers,
               "KV global scales cover {} (K) and {} (V) layers, the pool has {}", global_scales_.k.size(),
               global_scales_.v.size(), layers);
  for (int64_t l = 0; l < layers; ++l) {
    for (float g : {global_scales_.k[l], global_scales_.v[l]}) {
      NIBBLE_CHECK(std::isfinite(g) && g > 0, "KV global scale of layer {} is {} (must be finite and positive)", l, g);
    }
  }
}

}  // namespace nibble::cache
