#include "cache/radix_cache.h"

#include <algorithm>
#include <queue>
#include <tuple>
#include <unordered_set>

#include "common/error.h"

namespace nibble::cache {

RadixCache::RadixCache(PageAllocator& allocator, RadixCacheConfig config)
    : allocator_(allocator), config_(config), root_(std::make_unique<RadixNode>()) {
  NIBBLE_CHECK(config.page_size >= 1, "radix cache page_size must be >= 1, got {}", config.page_size);
  in_tree_.assign(static_cast<size_t>(allocator.num_pages()), false);
}

RadixCache::~RadixCache() {
  // Return the tree's references; the allocator outlives the cache by contract.
  std::vector<RadixNode*> stack{root_.get()};
  std::vector<PageId> pages;
  while (!stack.empty()) {
    RadixNode* node = stack.back();
    stack.pop_back();
    pages.insert(pages.end(), node->pages.begin(), node->pages.end());
    for (auto& [key, child] : node->children) stack.push_back(child.get());
  }
  try {
    allocator_.release(pages);
  } catch (...) {
    // A destructor must not throw; a failure here means the allocator was corrupted elsewhere.
  }
}

std::vector<TokenId> RadixCache::first_page(std::span<const TokenId> tokens) const {
  return {tokens.begin(), tokens.begin() + config_.page_size};
}

bool RadixCache::holds_page(PageId page) const {
  return page >= 0 && static_cast<size_t>(page) < in_tree_.size() && in_tree_[page];
}

void RadixCache::set_holds(std::span<const PageId> pages, bool value) {
  for (PageId page : pages) in_tree_[page] = value;
}

void RadixCache::touch(RadixNode* node) {
  ++clock_;
  for (; node != nullptr; node = node->parent) node->last_access = clock_;
}

RadixNode* RadixCache::split(RadixNode* node, int64_t keep_pages) {
  const int64_t ps = config_.page_size;
  NIBBLE_ASSERT(keep_pages >= 1 && keep_pages < static_cast<int64_t>(node->pages.size()));
  RadixNode* parent = node->parent;
  auto it = parent->children.find(first_page(node->tokens));
  NIBBLE_ASSERT(it != parent->children.end() && it->second.get() == node);
  std::unique_ptr<RadixNode> lower = std::move(it->second);

  auto upper = std::make_unique<RadixNode>();
  upper->parent = parent;
  upper->tokens.assign(node->tokens.begin(), node->tokens.begin() + keep_pages * ps);
  upper->pages.assign(node->pages.begin(), node->pages.begin() + keep_pages);
  upper->lock_count = node->lock_count;  // every lock through the lower part passes through here
  upper->last_access = node->last_access;
  node->tokens.erase(node->tokens.begin(), node->tokens.begin() + keep_pages * ps);
  node->pages.erase(node->pages.begin(), node->pages.begin() + keep_pages);
  node->parent = upper.get();
  RadixNode* upper_raw = upper.get();
  upper->children.emplace(first_page(node->tokens), std::move(lower));
  it->second = std::move(upper);  // same key: the upper part starts with the same page
  return upper_raw;
}

RadixMatch RadixCache::match_prefix(std::span<const TokenId> tokens) {
  RadixMatch match;
  match.handle.node = root_.get();
  if (!config_.enabled) return match;
  const int64_t ps = config_.page_size;
  const int64_t num_tokens = static_cast<int64_t>(tokens.size());
  RadixNode* node = root_.get();
  int64_t pos = 0;
  while (pos + ps <= num_tokens) {
    auto it = node->children.find(first_page(tokens.subspan(pos)));
    if (it == node->children.end()) break;
    RadixNode* child = it->second.get();
    const int64_t child_pages = static_cast<int64_t>(child->pages.size());
    int64_t k = 1;  // the key matched the first page
    while (k < child_pages && pos + (k + 1) * ps <= num_tokens &&
           std::equal(child->tokens.begin() + k * ps, child->tokens.begin() + (k + 1) * ps,
                      tokens.begin() + pos + k * ps)) {
      ++k;
    }
    if (k < child_pages) child = split(child, k);
    match.pages.insert(match.pages.end(), child->pages.begin(), child->pages.end());
    pos += k * ps;
    node = child;
    if (k < child_pages) break;
  }
  match.matched_tokens = pos;
  match.handle.node = node;
  touch(node);
  lock(match.handle);
  return match;
}

RadixInsert RadixCache::insert(std::span<const TokenId> tokens, std::span<const PageId> pages) {
  const int64_t ps = config_.page_size;
  const int64_t whole_pages = static_cast<int64_t>(tokens.size()) / ps;
  NIBBLE_CHECK(static_cast<int64_t>(pages.size()) >= whole_pages,
               "radix insert: {} tokens need {} pages of {} tokens, got {} pages", tokens.size(), whole_pages, ps,
               pages.size());
  const std::span<const PageId> offered = pages.first(whole_pages);
  RadixInsert result;
  result.handle.node = root_.get();
  if (!config_.enabled) {
    result.pages_to_release.assign(offered.begin(), offered.end());
    return result;
  }

  // The part already in the tree. match_prefix locks; undo that at once (single-threaded, so
  // nothing can evict in between) — only the split and the walk are wanted.
  RadixMatch existing = match_prefix(tokens.first(whole_pages * ps));
  unlock(existing.handle);
  const int64_t matched = static_cast<int64_t>(existing.pages.size());

  // Validate the whole call before changing anything.
  std::unordered_set<PageId> seen;
  for (int64_t i = 0; i < whole_pages; ++i) {
    const PageId page = offered[i];
    NIBBLE_CHECK(page >= 0 && page < allocator_.num_pages(), "radix insert: page {} out of range 0..{}", page,
                 allocator_.num_pages() - 1);
    NIBBLE_CHECK(seen.insert(page).second, "radix insert: page {} offered twice", page);
    if (i < matched && page == existing.pages[i]) continue;  // the caller's matched prefix: the tree's own
    NIBBLE_CHECK(!in_tree_[page], "radix insert: page {} (position {}) is already cached at another position", page,
                 i);
    NIBBLE_CHECK(allocator_.ref_count(page) > 0, "radix insert: page {} is free in the allocator", page);
  }

  for (int64_t i = 0; i < matched; ++i) {
    if (offered[i] != existing.pages[i]) result.pages_to_release.push_back(offered[i]);
  }
  RadixNode* end = existing.handle.node;
  if (matched < whole_pages) {
    auto node = std::make_unique<RadixNode>();
    node->parent = end;
    node->tokens.assign(tokens.begin() + matched * ps, tokens.begin() + whole_pages * ps);
    node->pages.assign(offered.begin() + matched, offered.end());
    set_holds(node->pages, true);
    cached_pages_ += whole_pages - matched;
    evictable_pages_ += whole_pages - matched;
    RadixNode* raw = node.get();
    auto [it, inserted] = end->children.emplace(first_page(node->tokens), std::move(node));
    NIBBLE_ASSERT(inserted);
    end = raw;
    touch(end);
  }
  result.cached_tokens = whole_pages * ps;
  result.tree_pages = std::move(existing.pages);
  result.tree_pages.insert(result.tree_pages.end(), offered.begin() + matched, offered.end());
  result.handle.node = end;
  return result;
}

void RadixCache::lock(RadixHandle handle) {
  for (RadixNode* node = handle.node; node != nullptr && node != root_.get(); node = node->parent) {
    if (node->lock_count++ == 0) evictable_pages_ -= static_cast<int64_t>(node->pages.size());
  }
}

void RadixCache::unlock(RadixHandle handle) {
  if (handle.node == nullptr || handle.node == root_.get()) return;
  NIBBLE_CHECK(handle.node->lock_count > 0, "radix unlock: the path is not locked");
  for (RadixNode* node = handle.node; node != root_.get(); node = node->parent) {
    NIBBLE_ASSERT(node->lock_count > 0);
    if (--node->lock_count == 0) evictable_pages_ += static_cast<int64_t>(node->pages.size());
  }
}

int64_t RadixCache::evict(int64_t n) {
  NIBBLE_CHECK(n >= 0, "cannot evict a negative number of pages ({})", n);
  if (n == 0 || evictable_pages_ == 0) return 0;
  // Min-heap of unlocked leaves by (last access, first page id): oldest first, ties broken stably.
  using Entry = std::tuple<uint64_t, PageId, RadixNode*>;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> leaves;
  std::vector<RadixNode*> stack{root_.get()};
  while (!stack.empty()) {
    RadixNode* node = stack.back();
    stack.pop_back();
    for (auto& [key, child] : node->children) stack.push_back(child.get());
    if (node != root_.get() && node->children.empty() && node->lock_count == 0) {
      leaves.emplace(node->last_access, node->pages.front(), node);
    }
  }
  int64_t freed = 0;
  while (freed < n && !leaves.empty()) {
    RadixNode* leaf = std::get<2>(leaves.top());
    leaves.pop();
    const int64_t leaf_pages = static_cast<int64_t>(leaf->pages.size());
    const int64_t take = std::min(leaf_pages, n - freed);
    const std::vector<PageId> gone(leaf->pages.end() - take, leaf->pages.end());
    allocator_.release(gone);
    set_holds(gone, false);
    cached_pages_ -= take;
    evictable_pages_ -= take;
    freed += take;
    if (take < leaf_pages) {  // only the tail of this leaf was needed
      leaf->pages.resize(leaf_pages - take);
      leaf->tokens.resize(leaf->pages.size() * config_.page_size);
      break;
    }
    RadixNode* parent = leaf->parent;
    parent->children.erase(first_page(leaf->tokens));  // destroys leaf
    if (parent != root_.get() && parent->children.empty() && parent->lock_count == 0) {
      leaves.emplace(parent->last_access, parent->pages.front(), parent);
    }
  }
  return freed;
}

void RadixCache::check_integrity(std::span<const PageId> request_pages) const {
  const int64_t ps = config_.page_size;
  std::vector<bool> seen(in_tree_.size(), false);
  int64_t cached = 0;
  int64_t evictable = 0;
  std::vector<const RadixNode*> stack{root_.get()};
  NIBBLE_CHECK(root_->pages.empty() && root_->tokens.empty(), "radix cache corrupt: the root holds pages");
  while (!stack.empty()) {
    const RadixNode* node = stack.back();
    stack.pop_back();
    int64_t child_locks = 0;
    for (const auto& [key, child] : node->children) {
      NIBBLE_CHECK(child->parent == node, "radix cache corrupt: a child's parent pointer is wrong");
      NIBBLE_CHECK(!child->pages.empty(), "radix cache corrupt: a non-root node holds no pages");
      NIBBLE_CHECK(static_cast<int64_t>(child->tokens.size()) == static_cast<int64_t>(child->pages.size()) * ps,
                   "radix cache corrupt: a node holds {} tokens for {} pages of {}", child->tokens.size(),
                   child->pages.size(), ps);
      NIBBLE_CHECK(std::equal(key.begin(), key.end(), child->tokens.begin()) && static_cast<int64_t>(key.size()) == ps,
                   "radix cache corrupt: a child's key is not its first page");
      NIBBLE_CHECK(child->lock_count >= 0, "radix cache corrupt: negative lock count {}", child->lock_count);
      child_locks += child->lock_count;
      stack.push_back(child.get());
    }
    if (node == root_.get()) continue;
    NIBBLE_CHECK(node->lock_count >= child_locks,
                 "radix cache corrupt: a node has {} locks but its children hold {} through it", node->lock_count,
                 child_locks);
    for (PageId page : node->pages) {
      NIBBLE_CHECK(page >= 0 && static_cast<size_t>(page) < seen.size(), "radix cache corrupt: page {} out of range",
                   page);
      NIBBLE_CHECK(!seen[page], "radix cache corrupt: page {} is owned twice by the tree", page);
      seen[page] = true;
      NIBBLE_CHECK(in_tree_[page], "radix cache corrupt: page {} is in the tree but not marked", page);
      NIBBLE_CHECK(allocator_.ref_count(page) >= 1, "radix cache corrupt: cached page {} is free in the allocator",
                   page);
    }
    cached += static_cast<int64_t>(node->pages.size());
    if (node->lock_count == 0) evictable += static_cast<int64_t>(node->pages.size());
  }
  NIBBLE_CHECK(std::count(in_tree_.begin(), in_tree_.end(), true) == cached,
               "radix cache corrupt: {} pages marked cached, {} in the tree",
               std::count(in_tree_.begin(), in_tree_.end(), true), cached);
  NIBBLE_CHECK(cached == cached_pages_, "radix cache corrupt: counted {} cached pages, recount {}", cached_pages_,
               cached);
  NIBBLE_CHECK(evictable == evictable_pages_, "radix cache corrupt: counted {} evictable pages, recount {}",
               evictable_pages_, evictable);

  std::vector<bool> held(in_tree_.size(), false);
  for (PageId page : request_pages) {
    NIBBLE_CHECK(page >= 0 && static_cast<size_t>(page) < held.size(), "request page {} out of range", page);
    NIBBLE_CHECK(!held[page], "page {} is held by requests twice", page);
    held[page] = true;
    NIBBLE_CHECK(!in_tree_[page], "page {} is held by a request and by the radix cache", page);
    NIBBLE_CHECK(allocator_.ref_count(page) >= 1, "page {} is held by a request but free in the allocator", page);
  }
  const int64_t in_requests = static_cast<int64_t>(request_pages.size());
  NIBBLE_CHECK(allocator_.num_free() + cached + in_requests == allocator_.num_pages(),
               "page accounting broken: {} free + {} cached + {} in requests != {} total", allocator_.num_free(),
               cached, in_requests, allocator_.num_pages());
}

}  // namespace nibble::cache
