// PageAllocator: edge cases, then a long random run checked step by step against a plain model of
// reference counts (a map from page to owners), with check_integrity() after every step.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "cache/page_allocator.h"
#include "common/error.h"

namespace nibble::cache {

// Reaches into the allocator to corrupt it, so the tests can see check_integrity() catch it.
struct PageAllocatorTestAccess {
  static std::vector<int32_t>& ref_counts(PageAllocator& a) { return a.ref_counts_; }
  static std::vector<PageId>& free_list(PageAllocator& a) { return a.free_; }
};

namespace {

TEST(PageAllocator, FreshAllocatorHandsOutAscendingIds) {
  PageAllocator a(5);
  EXPECT_EQ(a.num_pages(), 5);
  EXPECT_EQ(a.num_free(), 5);
  EXPECT_EQ(a.num_used(), 0);
  const auto ids = a.allocate(3);
  ASSERT_TRUE(ids.has_value());
  EXPECT_EQ(*ids, (std::vector<PageId>{0, 1, 2}));
  EXPECT_EQ(a.num_free(), 2);
  EXPECT_EQ(a.num_used(), 3);
  for (PageId id : *ids) EXPECT_EQ(a.ref_count(id), 1);
  EXPECT_EQ(a.ref_count(3), 0);
  a.check_integrity();
}

TEST(PageAllocator, AllOrNothing) {
  PageAllocator a(4);
  EXPECT_TRUE(a.can_allocate(4));
  EXPECT_FALSE(a.can_allocate(5));
  EXPECT_FALSE(a.allocate(5).has_value());
  EXPECT_EQ(a.num_free(), 4);  // a refused allocation changes nothing
  const auto all = a.allocate(4);
  ASSERT_TRUE(all.has_value());
  EXPECT_EQ(all->size(), 4u);
  EXPECT_FALSE(a.can_allocate(1));
  EXPECT_FALSE(a.allocate(1).has_value());
  EXPECT_TRUE(a.can_allocate(0));
  const auto none = a.allocate(0);
  ASSERT_TRUE(none.has_value());
  EXPECT_TRUE(none->empty());
  EXPECT_FALSE(a.can_allocate(-1));
  EXPECT_THROW(a.allocate(-1), nibble::Error);
  a.check_integrity();
}

TEST(PageAllocator, ZeroPages) {
  PageAllocator a(0);
  EXPECT_EQ(a.num_free(), 0);
  EXPECT_FALSE(a.allocate(1).has_value());
  EXPECT_TRUE(a.allocate(0).has_value());
  a.check_integrity();
  EXPECT_THROW(PageAllocator(-1), nibble::Error);
}

TEST(PageAllocator, SharedPageReturnsWhenLastOwnerReleases) {
  PageAllocator a(3);
  const std::vector<PageId> ids = *a.allocate(2);  // {0, 1}
  a.retain(std::vector<PageId>{0});
  a.retain(std::vector<PageId>{0});  // page 0: 3 owners
  EXPECT_EQ(a.ref_count(0), 3);
  a.release(ids);  // page 0: 2 owners; page 1: free
  EXPECT_EQ(a.ref_count(0), 2);
  EXPECT_EQ(a.ref_count(1), 0);
  EXPECT_EQ(a.num_free(), 2);
  a.release(std::vector<PageId>{0, 0});  // one call, two owners gone
  EXPECT_EQ(a.ref_count(0), 0);
  EXPECT_EQ(a.num_free(), 3);
  a.check_integrity();
  // Released pages are handed out again, most recently freed first.
  EXPECT_EQ(*a.allocate(1), std::vector<PageId>{0});
}

TEST(PageAllocator, BadCallsThrowAndChangeNothing) {
  PageAllocator a(4);
  const std::vector<PageId> ids = *a.allocate(2);  // {0, 1}
  EXPECT_THROW(a.release(std::vector<PageId>{2}), nibble::Error);      // free page
  EXPECT_THROW(a.retain(std::vector<PageId>{3}), nibble::Error);       // free page
  EXPECT_THROW(a.release(std::vector<PageId>{4}), nibble::Error);      // out of range
  EXPECT_THROW(a.retain(std::vector<PageId>{-1}), nibble::Error);      // out of range
  EXPECT_THROW(a.release(std::vector<PageId>{0, 1, 1}), nibble::Error);  // page 1 has one owner
  EXPECT_EQ(a.ref_count(0), 1);  // the failed release did not touch page 0 either
  EXPECT_EQ(a.ref_count(1), 1);
  EXPECT_THROW(a.retain(std::vector<PageId>{0, 2}), nibble::Error);
  EXPECT_EQ(a.ref_count(0), 1);
  EXPECT_THROW(a.ref_count(9), nibble::Error);
  EXPECT_EQ(a.num_used(), 2);
  a.check_integrity();
  a.release(ids);
  EXPECT_THROW(a.release(ids), nibble::Error);  // double release
  a.check_integrity();
}

TEST(PageAllocator, CheckIntegrityCatchesCorruption) {
  {
    PageAllocator a(4);
    a.allocate(2);
    PageAllocatorTestAccess::free_list(a).push_back(0);  // page 0 free and used
    EXPECT_THROW(a.check_integrity(), nibble::Error);
  }
  {
    PageAllocator a(4);
    auto& free_list = PageAllocatorTestAccess::free_list(a);
    free_list[0] = free_list[1];  // one page listed twice, another lost
    EXPECT_THROW(a.check_integrity(), nibble::Error);
  }
  {
    PageAllocator a(4);
    a.allocate(1);
    PageAllocatorTestAccess::ref_counts(a)[0] = 0;  // used page lost its owners but is not free
    EXPECT_THROW(a.check_integrity(), nibble::Error);
  }
  {
    PageAllocator a(4);
    PageAllocatorTestAccess::ref_counts(a)[3] = -1;
    EXPECT_THROW(a.check_integrity(), nibble::Error);
  }
  {
    PageAllocator a(4);
    PageAllocatorTestAccess::free_list(a).push_back(7);  // id out of range
    EXPECT_THROW(a.check_integrity(), nibble::Error);
  }
}

TEST(PageAllocator, RandomRunAgainstAModel) {
  constexpr int64_t kPages = 97;
  PageAllocator a(kPages);
  std::map<PageId, int32_t> owners;  // the model: used pages and their owner counts
  std::mt19937_64 rng(20240611);
  auto pick = [&](int64_t n) { return std::uniform_int_distribution<int64_t>(0, n)(rng); };
  auto random_used = [&](int64_t n) {
    std::vector<PageId> out;
    std::vector<PageId> used;
    for (const auto& [id, count] : owners) used.push_back(id);
    for (int64_t i = 0; i < n && !used.empty(); ++i) out.push_back(used[pick(used.size() - 1)]);
    return out;
  };
  for (int step = 0; step < 20000; ++step) {
    const int op = static_cast<int>(pick(9));
    if (op <= 3) {  // allocate
      const int64_t n = pick(12);
      const auto ids = a.allocate(n);
      const int64_t free_in_model = kPages - static_cast<int64_t>(owners.size());
      ASSERT_EQ(ids.has_value(), n <= free_in_model) << step;
      if (ids) {
        ASSERT_EQ(static_cast<int64_t>(ids->size()), n);
        for (PageId id : *ids) {
          ASSERT_TRUE(owners.emplace(id, 1).second) << "page " << id << " handed out while in use";
        }
      }
    } else if (op <= 5) {  // retain some used pages
      const std::vector<PageId> ids = random_used(pick(4));
      a.retain(ids);
      for (PageId id : ids) ++owners[id];
    } else if (op <= 8) {  // release: each listed page at most as often as it has owners
      std::vector<PageId> ids = random_used(pick(6));
      std::map<PageId, int32_t> times;
      std::erase_if(ids, [&](PageId id) { return ++times[id] > owners[id]; });
      a.release(ids);
      for (PageId id : ids) {
        if (--owners[id] == 0) owners.erase(id);
      }
    } else {  // an invalid release of a free page must throw and change nothing
      for (PageId id = 0; id < kPages; ++id) {
        if (!owners.count(id)) {
          EXPECT_THROW(a.release(std::vector<PageId>{id}), nibble::Error);
          break;
        }
      }
    }
    ASSERT_NO_THROW(a.check_integrity()) << step;
    ASSERT_EQ(a.num_used(), static_cast<int64_t>(owners.size())) << step;
    ASSERT_EQ(a.num_free(), kPages - static_cast<int64_t>(owners.size())) << step;
    if (step % 97 == 0) {
      for (PageId id = 0; id < kPages; ++id) {
        const auto it = owners.find(id);
        ASSERT_EQ(a.ref_count(id), it == owners.end() ? 0 : it->second) << step << " page " << id;
      }
    }
  }
}

}  // namespace
}  // namespace nibble::cache
