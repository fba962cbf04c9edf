#pragma once
// KvPool: the paged KV cache of one model. It owns
//   - the bytes: storage [num_pages][page_bytes], page p at p·page_bytes (layout: page_layout.h),
//   - which pages are free or shared (PageAllocator),
//   - the per-layer float32 global scales g for K and V (KvGlobalScales, beside the pages).
// It hands out addresses; it never reads or writes cache contents itself, so the same pool works
// with host or device storage.
#include <cstdint>
#include <memory>

#include "cache/kv_storage.h"
#include "cache/page_allocator.h"
#include "cache/page_layout.h"

namespace nibble::cache {

enum class KvSide : uint8_t { kK, kV };

class KvPool {
 public:
  // storage == nullptr: zeroed host memory of num_pages × page_bytes. Otherwise storage must hold at
  // least that many bytes, aligned to kPageAlignment; throws nibble::Error if not.
  KvPool(PageLayout layout, int64_t num_pages, std::unique_ptr<KvStorage> storage = nullptr);

  const PageLayout& layout() const { return layout_; }
  int64_t num_pages() const { return allocator_.num_pages(); }
  PageAllocator& allocator() { return allocator_; }
  const PageAllocator& allocator() const { return allocator_; }
  KvGlobalScales& global_scales() { return global_scales_; }
  const KvGlobalScales& global_scales() const { return global_scales_; }
  KvStorage& storage() { return *storage_; }
  const KvStorage& storage() const { return *storage_; }

  const KvPartLayout& part(int64_t layer, KvSide side) const;

  // Byte addresses inside the storage (device addresses when the storage is on a device). Throw
  // nibble::Error on a page, layer, head or slot out of range.
  uint8_t* page_address(PageId page);
  uint8_t* part_address(PageId page, int64_t layer, KvSide side);
  // Token slot `slot` of KV head `head`: its data_row_bytes of codes, and (nvfp4) its block scales.
  uint8_t* data_address(PageId page, int64_t layer, KvSide side, int64_t head, int64_t slot);
  uint8_t* scales_address(PageId page, int64_t layer, KvSide side, int64_t head, int64_t slot);

  // The allocator's check, plus: the global scales cover every layer and are finite and positive.
  void check_integrity() const;

 private:
  void check_page(PageId page) const;
  void check_slot(const KvPartLayout& part, int64_t head, int64_t slot) const;

  PageLayout layout_;
  PageAllocator allocator_;
  std::unique_ptr<KvStorage> storage_;
  KvGlobalScales global_scales_;
};

}  // namespace nibble::cache
