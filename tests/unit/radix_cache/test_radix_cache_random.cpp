// RadixCache under a long seeded random run of the operations a scheduler performs (match, compute
// into own pages, insert mid-request or at the end, abort, evict), checked after every operation
// against an independent oracle — a plain map from "the first k whole pages of tokens" to the page
// that holds them — and with check_integrity() given the pages the simulated requests hold.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <vector>

#include "cache/page_allocator.h"
#include "cache/radix_cache.h"

namespace nibble::cache {
namespace {

constexpr int64_t kRandomPageSize = 2;
constexpr int64_t kPoolPages = 48;

using Prefix = std::vector<TokenId>;  // k * kRandomPageSize tokens

struct Client {
  std::vector<TokenId> tokens;
  std::vector<PageId> pages;  // [ceil(tokens / page)]: [0, shared) the tree's, the rest own
  int64_t shared = 0;
  RadixHandle handle;
};

class Oracle {
 public:
  // Longest k such that every prefix of 1..k whole pages is cached; their pages.
  std::vector<PageId> match(const std::vector<TokenId>& tokens) const {
    std::vector<PageId> pages;
    for (int64_t k = 1; k * kRandomPageSize <= static_cast<int64_t>(tokens.size()); ++k) {
      auto it = cached_.find(Prefix(tokens.begin(), tokens.begin() + k * kRandomPageSize));
      if (it == cached_.end()) break;
      pages.push_back(it->second);
    }
    return pages;
  }
  // Expected pages_to_release of an insert, then records the adopted pages.
  std::vector<PageId> insert(const std::vector<TokenId>& tokens, const std::vector<PageId>& pages) {
    std::vector<PageId> dups;
    for (int64_t k = 1; k * kRandomPageSize <= static_cast<int64_t>(tokens.size()); ++k) {
      Prefix p(tokens.begin(), tokens.begin() + k * kRandomPageSize);
      auto [it, added] = cached_.emplace(p, pages[k - 1]);
      if (!added && it->second != pages[k - 1]) dups.push_back(pages[k - 1]);
    }
    return dups;
  }
  // Drops what the cache no longer holds; returns how many entries went.
  int64_t sync_after_evict(const RadixCache& cache) {
    int64_t gone = 0;
    for (auto it = cached_.begin(); it != cached_.end();) {
      if (!cache.holds_page(it->second)) {
        it = cached_.erase(it);
        ++gone;
      } else {
        ++it;
      }
    }
    return gone;
  }
  // Every cached prefix's shorter prefixes are cached too (eviction takes leaves only).
  bool prefix_closed() const {
    for (const auto& [prefix, page] : cached_) {
      if (prefix.size() > static_cast<size_t>(kRandomPageSize) &&
          !cached_.count(Prefix(prefix.begin(), prefix.end() - kRandomPageSize))) {
        return false;
      }
    }
    return true;
  }
  int64_t size() const { return static_cast<int64_t>(cached_.size()); }

 private:
  std::map<Prefix, PageId> cached_;
};

std::vector<PageId> private_pages(const std::vector<Client>& clients) {
  std::vector<PageId> pages;
  for (const Client& c : clients) pages.insert(pages.end(), c.pages.begin() + c.shared, c.pages.end());
  return pages;
}

void run_random_operations(uint32_t seed, int steps) {
  std::mt19937 rng(seed);
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  PageAllocator allocator(kPoolPages);
  RadixCache cache(allocator, {.page_size = kRandomPageSize});
  Oracle oracle;
  std::vector<Client> clients;
  // A few prompt stems so requests share prefixes; a 3-letter alphabet makes pages collide often.
  std::vector<std::vector<TokenId>> stems;
  for (int s = 0; s < 4; ++s) {
    std::vector<TokenId> stem(uniform(2, 12));
    for (TokenId& t : stem) t = uniform(0, 2);
    stems.push_back(stem);
  }
  int64_t evicted_total = 0;
  int64_t hits = 0;

  for (int step = 0; step < steps; ++step) {
    SCOPED_TRACE(::testing::Message() << "seed " << seed << " step " << step);
    const int op = uniform(0, 9);
    if (op <= 3 && clients.size() < 8) {  // a new request: match, then compute the rest into own pages
      Client c;
      c.tokens = stems[uniform(0, 3)];
      for (int n = uniform(0, 10); n > 0; --n) c.tokens.push_back(uniform(0, 2));
      if (c.tokens.empty()) c.tokens.push_back(0);
      const std::vector<PageId> expected = oracle.match(c.tokens);
      RadixMatch m = cache.match_prefix(c.tokens);
      ASSERT_EQ(m.pages, expected);
      ASSERT_EQ(m.matched_tokens, static_cast<int64_t>(expected.size()) * kRandomPageSize);
      hits += m.matched_tokens;
      c.pages = m.pages;
      c.shared = static_cast<int64_t>(m.pages.size());
      c.handle = m.handle;
      const int64_t need = (static_cast<int64_t>(c.tokens.size()) + kRandomPageSize - 1) / kRandomPageSize - c.shared;
      if (allocator.num_free() < need) {
        const int64_t want = need - allocator.num_free();
        const int64_t evictable = cache.evictable_pages();
        const int64_t freed = cache.evict(want);
        ASSERT_EQ(freed, std::min(want, evictable));
        ASSERT_EQ(oracle.sync_after_evict(cache), freed);
        evicted_total += freed;
      }
      auto own = allocator.allocate(need);
      if (!own) {
        cache.unlock(c.handle);
      } else {
        c.pages.insert(c.pages.end(), own->begin(), own->end());
        clients.push_back(std::move(c));
      }
    } else if (op <= 5 && !clients.empty()) {  // a request finishes (or caches mid-way and goes on)
      const size_t i = uniform(0, static_cast<int>(clients.size()) - 1);
      Client& c = clients[i];
      const bool mid_request = uniform(0, 2) == 0;
      const std::vector<PageId> expected_dups = oracle.insert(c.tokens, c.pages);
      RadixInsert r = cache.insert(c.tokens, c.pages);
      ASSERT_EQ(r.pages_to_release, expected_dups);
      const int64_t whole = static_cast<int64_t>(c.tokens.size()) / kRandomPageSize;
      ASSERT_EQ(static_cast<int64_t>(r.tree_pages.size()), whole);
      allocator.release(r.pages_to_release);
      if (mid_request) {  // the scheduler's cache_prefix(): the request now shares all whole pages
        std::copy(r.tree_pages.begin(), r.tree_pages.end(), c.pages.begin());
        cache.lock(r.handle);
        cache.unlock(c.handle);
        c.handle = r.handle;
        c.shared = whole;
      } else {
        allocator.release(std::span<const PageId>(c.pages).subspan(whole));
        cache.unlock(c.handle);
        clients.erase(clients.begin() + static_cast<std::ptrdiff_t>(i));
      }
    } else if (op == 6 && !clients.empty()) {  // a request is cancelled: nothing cached
      const size_t i = uniform(0, static_cast<int>(clients.size()) - 1);
      allocator.release(std::span<const PageId>(clients[i].pages).subspan(clients[i].shared));
      cache.unlock(clients[i].handle);
      clients.erase(clients.begin() + static_cast<std::ptrdiff_t>(i));
    } else {  // memory pressure
      const int64_t want = uniform(0, 6);
      const int64_t evictable = cache.evictable_pages();
      const int64_t free_before = allocator.num_free();
      const int64_t freed = cache.evict(want);
      ASSERT_EQ(freed, std::min(want, evictable));
      ASSERT_EQ(allocator.num_free(), free_before + freed);
      ASSERT_EQ(oracle.sync_after_evict(cache), freed);
      evicted_total += freed;
    }
    ASSERT_TRUE(oracle.prefix_closed());
    ASSERT_EQ(oracle.size(), cache.cached_pages());
    for (const Client& c : clients) {  // locked pages survive every eviction
      for (int64_t p = 0; p < c.shared; ++p) ASSERT_TRUE(cache.holds_page(c.pages[p]));
    }
    cache.check_integrity(private_pages(clients));
  }
  // The run must have exercised what it claims to.
  EXPECT_GT(evicted_total, 0);
  EXPECT_GT(hits, 0);
  for (const Client& c : clients) {
    allocator.release(std::span<const PageId>(c.pages).subspan(c.shared));
    cache.unlock(c.handle);
  }
  cache.check_integrity();
  const int64_t cached = oracle.size();
  EXPECT_EQ(cache.evictable_pages(), cached);  // nothing locked any more
  EXPECT_EQ(cache.evict(kPoolPages), cached);
  EXPECT_EQ(allocator.num_free(), kPoolPages);
}

TEST(RadixCacheRandom, ThousandsOfOperationsAgreeWithTheOracle) {
  for (uint32_t seed : {1u, 2u, 3u, 4u, 5u, 6u, 7u, 8u}) run_random_operations(seed, 3000);
}

}  // namespace
}  // namespace nibble::cache
