#include "cache/page_allocator.h"

#include <algorithm>
#include <limits>
#include <unordered_map>

#include "common/error.h"

namespace nibble::cache {

PageAllocator::PageAllocator(int64_t num_pages) {
  NIBBLE_CHECK(num_pages >= 0 && num_pages <= std::numeric_limits<PageId>::max(),
               "page count must be in 0..{}, got {}", std::numeric_limits<PageId>::max(), num_pages);
  ref_counts_.assign(num_pages, 0);
  free_.reserve(num_pages);
  for (int64_t id = num_pages - 1; id >= 0; --id) free_.push_back(static_cast<PageId>(id));  // 0 on top
}

std::optional<std::vector<PageId>> PageAllocator::allocate(int64_t n) {
  NIBBLE_CHECK(n >= 0, "cannot allocate a negative number of pages ({})", n);
  if (!can_allocate(n)) return std::nullopt;
  std::vector<PageId> ids(free_.end() - n, free_.end());
  std::reverse(ids.begin(), ids.end());  // the stack's top first
  free_.resize(free_.size() - n);
  for (PageId id : ids) ref_counts_[id] = 1;
  return ids;
}

void PageAllocator::check_ids(std::span<const PageId> ids, const char* verb) const {
  for (PageId id : ids) {
    NIBBLE_CHECK(id >= 0 && id < num_pages(), "cannot {} page {}: ids are 0..{}", verb, id, num_pages() - 1);
  }
}

void PageAllocator::retain(std::span<const PageId> ids) {
  check_ids(ids, "retain");
  for (PageId id : ids) {
    NIBBLE_CHECK(ref_counts_[id] > 0, "cannot retain page {}: it is free", id);
    NIBBLE_CHECK(ref_counts_[id] < std::numeric_limits<int32_t>::max(), "page {} has too many owners", id);
  }
  for (PageId id : ids) ++ref_counts_[id];
}

void PageAllocator::release(std::span<const PageId> ids) {
  check_ids(ids, "release");
  // Validate the whole call first (a page may be listed several times) so a bad call changes nothing.
  std::unordered_map<PageId, int64_t> times;
  for (PageId id : ids) ++times[id];
  for (const auto& [id, n] : times) {
    NIBBLE_CHECK(ref_counts_[id] >= n, "cannot release page {} {} time(s): it has {} owner(s)", id, n,
                 ref_counts_[id]);
  }
  for (PageId id : ids) {
    if (--ref_counts_[id] == 0) free_.push_back(id);
  }
}

int32_t PageAllocator::ref_count(PageId id) const {
  NIBBLE_CHECK(id >= 0 && id < num_pages(), "page {} out of range 0..{}", id, num_pages() - 1);
  return ref_counts_[id];
}

void PageAllocator::check_integrity() const {
  std::vector<bool> on_free_list(ref_counts_.size(), false);
  for (PageId id : free_) {
    NIBBLE_CHECK(id >= 0 && id < num_pages(), "page allocator corrupt: free list holds id {} (0..{})", id,
                 num_pages() - 1);
    NIBBLE_CHECK(!on_free_list[id], "page allocator corrupt: page {} is on the free list twice", id);
    NIBBLE_CHECK(ref_counts_[id] == 0, "page allocator corrupt: page {} is free and used ({} owners)", id,
                 ref_counts_[id]);
    on_free_list[id] = true;
  }
  int64_t used = 0;
  for (int64_t id = 0; id < num_pages(); ++id) {
    NIBBLE_CHECK(ref_counts_[id] >= 0, "page allocator corrupt: page {} has {} owners", id, ref_counts_[id]);
    if (ref_counts_[id] > 0) ++used;
    NIBBLE_CHECK(ref_counts_[id] > 0 || on_free_list[id], "page allocator corrupt: page {} is neither free nor used",
                 id);
  }
  NIBBLE_CHECK(used + num_free() == num_pages(), "page allocator corrupt: {} used + {} free != {} pages", used,
               num_free(), num_pages());
}

}  // namespace nibble::cache
