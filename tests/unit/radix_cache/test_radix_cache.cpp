// RadixCache: one behaviour per test, on hand-built cases whose answers are worked out by hand.
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "cache/page_allocator.h"
#include "cache/radix_cache.h"
#include "common/error.h"

namespace nibble::cache {
namespace {

constexpr int64_t kPageSize = 4;

std::vector<TokenId> iota_tokens(int n, TokenId first = 0) {
  std::vector<TokenId> t(n);
  std::iota(t.begin(), t.end(), first);
  return t;
}

std::vector<PageId> take(PageAllocator& a, int64_t n) {
  auto pages = a.allocate(n);
  EXPECT_TRUE(pages.has_value());
  return pages.value_or(std::vector<PageId>{});
}

// A request that computed `tokens` into fresh pages and hands them to the cache when done.
std::vector<PageId> finish_request(RadixCache& cache, PageAllocator& a, const std::vector<TokenId>& tokens) {
  const int64_t pages_needed = (static_cast<int64_t>(tokens.size()) + kPageSize - 1) / kPageSize;
  std::vector<PageId> pages = take(a, pages_needed);
  RadixInsert r = cache.insert(tokens, pages);
  a.release(r.pages_to_release);
  a.release(std::span<const PageId>(pages).subspan(tokens.size() / kPageSize));  // partial tail page
  return pages;
}

TEST(RadixCache, EmptyCacheMatchesNothing) {
  PageAllocator a(8);
  RadixCache cache(a, {.page_size = kPageSize});
  RadixMatch m = cache.match_prefix(iota_tokens(10));
  EXPECT_EQ(m.matched_tokens, 0);
  EXPECT_TRUE(m.pages.empty());
  cache.unlock(m.handle);  // no-op on the root
  EXPECT_EQ(cache.cached_pages(), 0);
  cache.check_integrity();
}

TEST(RadixCache, MatchesWholePagesOnly) {
  PageAllocator a(8);
  RadixCache cache(a, {.page_size = kPageSize});
  const std::vector<PageId> pages = finish_request(cache, a, iota_tokens(10));  // 2 whole pages + 2 tokens
  EXPECT_EQ(cache.cached_pages(), 2);
  EXPECT_EQ(a.num_free(), 6);  // the partial third page went back
  cache.check_integrity();

  RadixMatch full = cache.match_prefix(iota_tokens(10));
  EXPECT_EQ(full.matched_tokens, 8);
  EXPECT_EQ(full.pages, (std::vector<PageId>{pages[0], pages[1]}));
  cache.unlock(full.handle);

  RadixMatch seven = cache.match_prefix(iota_tokens(7));  // the second page is incomplete: not matched
  EXPECT_EQ(seven.matched_tokens, 4);
  EXPECT_EQ(seven.pages, (std::vector<PageId>{pages[0]}));
  cache.unlock(seven.handle);

  std::vector<TokenId> differs_in_page2 = iota_tokens(10);
  differs_in_page2[6] = 99;
  RadixMatch partial = cache.match_prefix(differs_in_page2);
  EXPECT_EQ(partial.matched_tokens, 4);  // 3 of page 2's 4 tokens agree: the page is not reused
  cache.unlock(partial.handle);

  std::vector<TokenId> differs_in_page1 = iota_tokens(10);
  differs_in_page1[0] = 99;
  RadixMatch none = cache.match_prefix(differs_in_page1);
  EXPECT_EQ(none.matched_tokens, 0);
  cache.unlock(none.handle);
  cache.check_integrity();
}

TEST(RadixCache, InsertDeduplicatesAgainstPagesAlreadyCached) {
  PageAllocator a(8);
  RadixCache cache(a, {.page_size = kPageSize});
  const std::vector<TokenId> tokens = iota_tokens(8);
  const std::vector<PageId> first = take(a, 2);
  const std::vector<PageId> second = take(a, 2);  // another request computed the same prefix
  RadixInsert r1 = cache.insert(tokens, first);
  EXPECT_TRUE(r1.pages_to_release.empty());
  EXPECT_EQ(r1.tree_pages, first);
  EXPECT_EQ(r1.cached_tokens, 8);
  RadixInsert r2 = cache.insert(tokens, second);
  EXPECT_EQ(r2.pages_to_release, second);  // duplicates, for the caller to release
  EXPECT_EQ(r2.tree_pages, first);         // the tree keeps the first copy
  EXPECT_EQ(cache.cached_pages(), 2);
  cache.check_integrity(second);  // still held by the second request until released
  a.release(r2.pages_to_release);
  cache.check_integrity();
  EXPECT_EQ(a.num_free(), 6);
}

TEST(RadixCache, ReinsertingAMatchedPrefixAdoptsOnlyTheNewPages) {
  PageAllocator a(8);
  RadixCache cache(a, {.page_size = kPageSize});
  finish_request(cache, a, iota_tokens(8));
  RadixMatch m = cache.match_prefix(iota_tokens(12));
  ASSERT_EQ(m.matched_tokens, 8);
  std::vector<PageId> row = m.pages;  // the request's page-table row: 2 shared pages + 1 own
  const std::vector<PageId> own = take(a, 1);
  row.push_back(own[0]);
  cache.check_integrity(own);
  RadixInsert r = cache.insert(iota_tokens(12), row);
  EXPECT_TRUE(r.pages_to_release.empty());  // the shared pages are the tree's own, the third is adopted
  EXPECT_EQ(r.tree_pages, row);
  EXPECT_EQ(cache.cached_pages(), 3);
  cache.unlock(m.handle);
  cache.check_integrity();
}

TEST(RadixCache, DivergingInsertSplitsANode) {
  PageAllocator a(16);
  RadixCache cache(a, {.page_size = kPageSize});
  const std::vector<PageId> p1 = finish_request(cache, a, iota_tokens(16));  // pages A B C D
  std::vector<TokenId> other = iota_tokens(16);
  other[9] = 500;  // same A, B; differs from page C on
  RadixMatch m = cache.match_prefix(other);
  EXPECT_EQ(m.matched_tokens, 8);
  EXPECT_EQ(m.pages, (std::vector<PageId>{p1[0], p1[1]}));
  std::vector<PageId> row = m.pages;
  const std::vector<PageId> own = take(a, 2);
  row.insert(row.end(), own.begin(), own.end());
  RadixInsert r = cache.insert(other, row);
  EXPECT_TRUE(r.pages_to_release.empty());
  cache.unlock(m.handle);
  EXPECT_EQ(cache.cached_pages(), 6);
  cache.check_integrity();

  RadixMatch back1 = cache.match_prefix(iota_tokens(16));
  EXPECT_EQ(back1.pages, p1);
  cache.unlock(back1.handle);
  RadixMatch back2 = cache.match_prefix(other);
  EXPECT_EQ(back2.pages, row);
  cache.unlock(back2.handle);
  cache.check_integrity();
}

TEST(RadixCache, EvictsLeastRecentlyUsedLeavesFirst) {
  PageAllocator a(16);
  RadixCache cache(a, {.page_size = kPageSize});
  const auto s1 = finish_request(cache, a, iota_tokens(8, 100));
  const auto s2 = finish_request(cache, a, iota_tokens(8, 200));
  const auto s3 = finish_request(cache, a, iota_tokens(8, 300));
  cache.unlock(cache.match_prefix(iota_tokens(8, 100)).handle);  // s1 is now the most recent
  ASSERT_EQ(cache.evictable_pages(), 6);

  EXPECT_EQ(cache.evict(2), 2);  // s2, the least recently used
  EXPECT_FALSE(cache.holds_page(s2[0]));
  EXPECT_FALSE(cache.holds_page(s2[1]));
  EXPECT_EQ(a.ref_count(s2[0]), 0);
  EXPECT_TRUE(cache.holds_page(s1[0]) && cache.holds_page(s3[0]));
  cache.check_integrity();

  EXPECT_EQ(cache.evict(1), 1);  // only the last page of s3 (next oldest): a leaf loses its tail
  EXPECT_TRUE(cache.holds_page(s3[0]));
  EXPECT_FALSE(cache.holds_page(s3[1]));
  RadixMatch m = cache.match_prefix(iota_tokens(8, 300));
  EXPECT_EQ(m.matched_tokens, 4);
  cache.unlock(m.handle);
  cache.check_integrity();
  EXPECT_EQ(a.num_free(), 16 - 3);
}

TEST(RadixCache, EvictsChildrenBeforeTheirSharedPrefix) {
  PageAllocator a(16);
  RadixCache cache(a, {.page_size = kPageSize});
  const auto shared = finish_request(cache, a, iota_tokens(8));
  std::vector<TokenId> longer = iota_tokens(16);
  RadixMatch m = cache.match_prefix(longer);
  std::vector<PageId> row = m.pages;
  const auto own = take(a, 2);
  row.insert(row.end(), own.begin(), own.end());
  a.release(cache.insert(longer, row).pages_to_release);
  cache.unlock(m.handle);
  // The shared prefix was touched last (by the match), yet only the leaf is a candidate.
  EXPECT_EQ(cache.evict(2), 2);
  EXPECT_FALSE(cache.holds_page(own[0]));
  EXPECT_FALSE(cache.holds_page(own[1]));
  EXPECT_TRUE(cache.holds_page(shared[0]) && cache.holds_page(shared[1]));
  cache.check_integrity();
}

TEST(RadixCache, LockedPathsAreNeverEvicted) {
  PageAllocator a(16);
  RadixCache cache(a, {.page_size = kPageSize});
  const auto s1 = finish_request(cache, a, iota_tokens(8, 100));
  const auto s2 = finish_request(cache, a, iota_tokens(12, 200));
  RadixMatch locked = cache.match_prefix(iota_tokens(8, 100));
  EXPECT_EQ(cache.cached_pages(), 5);
  EXPECT_EQ(cache.evictable_pages(), 3);
  EXPECT_EQ(cache.evict(100), 3);  // everything unlocked, nothing more
  EXPECT_TRUE(cache.holds_page(s1[0]) && cache.holds_page(s1[1]));
  EXPECT_EQ(cache.evictable_pages(), 0);
  EXPECT_EQ(cache.evict(1), 0);
  cache.check_integrity();

  RadixMatch again = cache.match_prefix(iota_tokens(4, 100));  // a second lock on part of the path
  cache.unlock(locked.handle);
  EXPECT_EQ(cache.evictable_pages(), 1);  // the second page; the first is still locked
  EXPECT_EQ(cache.evict(2), 1);
  EXPECT_TRUE(cache.holds_page(s1[0]));
  cache.unlock(again.handle);
  EXPECT_EQ(cache.evict(2), 1);
  EXPECT_EQ(cache.cached_pages(), 0);
  EXPECT_EQ(a.num_free(), 16);
  EXPECT_NO_THROW(cache.unlock(RadixHandle{}));  // an empty handle is a no-op
}

TEST(RadixCache, EvictZeroIsAlwaysSafe) {
  PageAllocator a(8);
  RadixCache cache(a, {.page_size = kPageSize});
  EXPECT_EQ(cache.evict(0), 0);
  finish_request(cache, a, iota_tokens(8));
  EXPECT_EQ(cache.evict(0), 0);
  EXPECT_EQ(cache.cached_pages(), 2);
  EXPECT_THROW(cache.evict(-1), nibble::Error);
  cache.check_integrity();
}

TEST(RadixCache, DisabledCacheMatchesNothingAndAdoptsNothing) {
  PageAllocator a(8);
  RadixCache cache(a, {.page_size = kPageSize, .enabled = false});
  const auto pages = take(a, 3);
  RadixInsert r = cache.insert(iota_tokens(10), pages);
  EXPECT_EQ(r.cached_tokens, 0);
  EXPECT_EQ(r.pages_to_release, (std::vector<PageId>{pages[0], pages[1]}));  // the whole pages offered
  a.release(r.pages_to_release);
  a.release(std::span<const PageId>(pages).subspan(2));
  RadixMatch m = cache.match_prefix(iota_tokens(10));
  EXPECT_EQ(m.matched_tokens, 0);
  EXPECT_EQ(cache.cached_pages(), 0);
  EXPECT_EQ(a.num_free(), 8);
  cache.check_integrity();
}

TEST(RadixCache, RejectsBadInserts) {
  PageAllocator a(8);
  RadixCache cache(a, {.page_size = kPageSize});
  const auto pages = take(a, 2);
  EXPECT_THROW(cache.insert(iota_tokens(8), std::span<const PageId>(pages).first(1)), nibble::Error);  // too few
  EXPECT_THROW(cache.insert(iota_tokens(8), std::vector<PageId>{pages[0], pages[0]}), nibble::Error);  // twice
  EXPECT_THROW(cache.insert(iota_tokens(8), std::vector<PageId>{pages[0], 7}), nibble::Error);  // page 7 is free
  EXPECT_THROW(cache.insert(iota_tokens(8), std::vector<PageId>{pages[0], 8}), nibble::Error);  // out of range
  EXPECT_EQ(cache.cached_pages(), 0);
  cache.insert(iota_tokens(8), pages);
  // Offering a cached page at another position is a caller bug.
  const auto more = take(a, 1);
  EXPECT_THROW(cache.insert(iota_tokens(8, 50), std::vector<PageId>{more[0], pages[0]}), nibble::Error);
  EXPECT_EQ(cache.cached_pages(), 2);
  cache.check_integrity(more);
  EXPECT_THROW(RadixCache(a, {.page_size = 0}), nibble::Error);
}

TEST(RadixCache, UnlockingAnUnlockedPathThrows) {
  PageAllocator a(8);
  RadixCache cache(a, {.page_size = kPageSize});
  finish_request(cache, a, iota_tokens(8));
  RadixMatch m = cache.match_prefix(iota_tokens(8));
  cache.unlock(m.handle);
  EXPECT_THROW(cache.unlock(m.handle), nibble::Error);
  cache.check_integrity();
}

TEST(RadixCache, IntegrityCatchesBrokenAccounting) {
  PageAllocator a(8);
  RadixCache cache(a, {.page_size = kPageSize});
  const auto cached = finish_request(cache, a, iota_tokens(8));
  const auto own = take(a, 1);
  EXPECT_THROW(cache.check_integrity(), nibble::Error);  // a page in use that nobody reports: a leak
  cache.check_integrity(own);
  EXPECT_THROW(cache.check_integrity(std::vector<PageId>{own[0], own[0]}), nibble::Error);      // held twice
  EXPECT_THROW(cache.check_integrity(std::vector<PageId>{own[0], cached[0]}), nibble::Error);  // also cached
  a.release(own);
  EXPECT_THROW(cache.check_integrity(own), nibble::Error);  // reported held but free
}

TEST(RadixCache, DestructionReturnsEveryPage) {
  PageAllocator a(8);
  {
    RadixCache cache(a, {.page_size = kPageSize});
    finish_request(cache, a, iota_tokens(16));
    finish_request(cache, a, iota_tokens(8, 40));
    EXPECT_EQ(a.num_free(), 2);
  }
  EXPECT_EQ(a.num_free(), 8);
  a.check_integrity();
}

}  // namespace
}  // namespace nibble::cache
