#pragma once
// RadixCache: the prefix cache. A radix tree over token ids whose nodes own KV pages, so requests
// that share a prompt prefix share its pages instead of recomputing them.
//
// Granularity is one page: a node's token run is a whole number of pages, a match only counts
// whole pages whose page_size tokens all agree, and insert() only takes whole pages. A request's
// partly filled last page therefore always stays its own, and nothing ever writes into a cached page.
//
// Ownership contract (what check_integrity() verifies):
//   - the tree holds exactly one PageAllocator reference on every page in it (it adopts the
//     caller's reference on insert and releases it on evict);
//   - a request that matched a prefix does NOT hold references on the matched pages: it holds a
//     lock on the matched path instead (reference counts on the nodes), and locked nodes are never
//     evicted;
//   - so at any time: free pages + cached pages + pages held privately by requests == total pages.
//
// Contracts callers can rely on:
//   - evict(0) is always safe and frees nothing; evict(n) frees min(n, evictable_pages()) pages.
//   - A handle returned by match_prefix() is locked; a handle returned by insert() is not (lock it
//     before the next evict() if the caller keeps using those pages). An unlocked handle may dangle
//     after evict(); a locked one stays valid until unlocked.
//   - When disabled, match_prefix() matches nothing and insert() adopts nothing: every page passed
//     to insert() comes back in pages_to_release.
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <vector>

#include "cache/page_allocator.h"

namespace nibble::cache {

using TokenId = int32_t;

struct RadixCacheConfig {
  int64_t page_size = 0;  // tokens per KV page, >= 1
  bool enabled = true;    // false: --no-prefix-cache
};

// One node of the tree: a run of whole pages and the tokens they hold.
struct RadixNode {
  RadixNode* parent = nullptr;
  std::vector<TokenId> tokens;  // [pages.size() * page_size], the tokens stored in `pages`
  std::vector<PageId> pages;    // [tokens.size() / page_size]
  // Keyed by the child's first page of tokens (page_size ids): two children never share a first page.
  std::map<std::vector<TokenId>, std::unique_ptr<RadixNode>> children;
  int64_t lock_count = 0;    // requests whose locked path passes through this node
  uint64_t last_access = 0;  // logical clock of the latest match/insert through this node
};

// A position in the tree: the end of a matched or inserted path. Empty (nullptr) or the root means
// "nothing matched"; lock/unlock of those are no-ops.
struct RadixHandle {
  RadixNode* node = nullptr;
};

struct RadixMatch {
  int64_t matched_tokens = 0;  // a multiple of page_size
  std::vector<PageId> pages;   // [matched_tokens / page_size], the tree's pages for tokens[0, matched)
  RadixHandle handle;          // locked; unlock() when the request lets go of these pages
};

struct RadixInsert {
  int64_t cached_tokens = 0;             // whole pages of the inserted tokens now in the tree (0 if disabled)
  std::vector<PageId> tree_pages;        // [cached_tokens / page_size]: the tree's pages for those tokens
  std::vector<PageId> pages_to_release;  // caller's pages the tree did not adopt: the caller releases them
  RadixHandle handle;                    // end of the inserted path, NOT locked
};

class RadixCache {
 public:
  // The allocator must outlive the cache. Throws nibble::Error if page_size < 1.
  RadixCache(PageAllocator& allocator, RadixCacheConfig config);
  ~RadixCache();  // releases every page the tree holds
  RadixCache(const RadixCache&) = delete;
  RadixCache& operator=(const RadixCache&) = delete;

  bool enabled() const { return config_.enabled; }
  int64_t page_size() const { return config_.page_size; }

  // The longest run of whole pages of `tokens` present in the tree; locks that path.
  RadixMatch match_prefix(std::span<const TokenId> tokens);

  // Offers the first floor(tokens.size() / page_size) pages of `pages` (page i holds
  // tokens[i*page_size, (i+1)*page_size)); pages beyond that are not looked at. For each offered
  // page: a position the tree lacks adopts the caller's reference; a position the tree already
  // holds with the same page id (the caller's matched prefix) is left as it is; a position the tree
  // holds with another page is a duplicate, returned in pages_to_release. Throws nibble::Error if
  // fewer pages than whole pages of tokens are given, or if an adopted page is already in the tree
  // elsewhere or is free in the allocator (then the cached contents are unchanged).
  RadixInsert insert(std::span<const TokenId> tokens, std::span<const PageId> pages);

  void lock(RadixHandle handle);
  // Throws nibble::Error if the path is not locked.
  void unlock(RadixHandle handle);

  // Frees up to n pages, least recently used unlocked leaves first (a leaf larger than needed loses
  // only its last pages). Returns the number of pages freed: min(n, evictable_pages()).
  // Throws nibble::Error if n < 0.
  int64_t evict(int64_t n);

  int64_t cached_pages() const { return cached_pages_; }        // every page the tree holds
  int64_t evictable_pages() const { return evictable_pages_; }  // pages in unlocked nodes
  bool holds_page(PageId page) const;                           // whether the tree owns `page`

  // Throws nibble::Error unless: no page appears twice in the tree, every tree page is in use in the
  // allocator, node shapes are whole pages, lock counts are consistent along paths, the cached and
  // evictable counts match a recount, and
  //   allocator.num_free() + cached_pages() + request_pages.size() == allocator.num_pages()
  // where request_pages are the pages requests hold privately (outside the tree); those must be in
  // use, distinct, and not in the tree. With no requests running, pass nothing.
  void check_integrity(std::span<const PageId> request_pages = {}) const;

 private:
  void touch(RadixNode* node);
  // Splits `node` after its first `keep_pages` pages; returns the new upper node.
  RadixNode* split(RadixNode* node, int64_t keep_pages);
  std::vector<TokenId> first_page(std::span<const TokenId> tokens) const;
  void set_holds(std::span<const PageId> pages, bool value);

  PageAllocator& allocator_;
  RadixCacheConfig config_;
  std::unique_ptr<RadixNode> root_;
  std::vector<bool> in_tree_;  // [allocator.num_pages()]: page owned by the tree
  int64_t cached_pages_ = 0;
  int64_t evictable_pages_ = 0;
  uint64_t clock_ = 0;
};

}  // namespace nibble::cache
