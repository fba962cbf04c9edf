#pragma once
// PageAllocator: which of a fixed number of KV pages are free, and how many owners each used page
// has. A page has reference count 0 (on the free list) or >= 1 (in use): allocate() hands out pages
// with count 1, retain() adds an owner (a prefix cache sharing the page), release() removes one and
// returns the page to the free list when the last owner lets go. No memory here, only ids; KvPool
// maps ids to bytes.
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace nibble::cache {

using PageId = int32_t;

class PageAllocator {
 public:
  // Throws nibble::Error unless 0 <= num_pages <= INT32_MAX.
  explicit PageAllocator(int64_t num_pages);

  int64_t num_pages() const { return static_cast<int64_t>(ref_counts_.size()); }
  int64_t num_free() const { return static_cast<int64_t>(free_.size()); }
  int64_t num_used() const { return num_pages() - num_free(); }

  bool can_allocate(int64_t n) const { return n >= 0 && n <= num_free(); }
  // n pages, each with reference count 1, or nothing (and no change) when fewer than n are free.
  // Pages come back in ascending id order from a fresh allocator; ids are never handed out twice
  // while in use. Throws nibble::Error if n < 0.
  std::optional<std::vector<PageId>> allocate(int64_t n);

  // One more owner for each listed page (a page listed twice gains two). Every page must be in use;
  // otherwise nibble::Error and no change.
  void retain(std::span<const PageId> ids);
  // One owner fewer for each listed page; a page whose count reaches 0 returns to the free list.
  // Releasing more times than a page has owners, or a free page, throws nibble::Error with no change.
  void release(std::span<const PageId> ids);

  int32_t ref_count(PageId id) const;  // throws nibble::Error on an id out of range

  // Throws nibble::Error if the bookkeeping is inconsistent: a page both free and used, a page on the
  // free list twice, a negative count, or free + used != total.
  void check_integrity() const;

 private:
  friend struct PageAllocatorTestAccess;  // lets tests corrupt the state to prove check_integrity
  void check_ids(std::span<const PageId> ids, const char* verb) const;

  std::vector<int32_t> ref_counts_;  // [num_pages]: 0 = free, >= 1 = owners
  std::vector<PageId> free_;         // stack of free ids; back() is handed out next
};

}  // namespace nibble::cache
