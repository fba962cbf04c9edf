#include "scheduler/scheduler.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "common/error.h"

namespace nibble::scheduler {

const char* finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::kNone: return "none";
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kCancelled: return "cancelled";
  }
  return "unknown";
}

// A live request. Invariant while running: page_table holds ceil(num_computed / page_size) pages;
// page_table[0, num_tree_pages) belong to the prefix cache and are locked through `lock`; the rest
// are this request's own (one allocator reference each). While waiting it holds nothing.
struct Scheduler::Sequence {
  Request request;
  uint64_t arrival = 0;          // submission order; preempted requests keep theirs
  std::vector<TokenId> tokens;   // prompt + generated
  std::vector<TokenId> output;   // generated only
  int64_t num_computed = 0;      // positions whose KV is in page_table
  std::vector<PageId> page_table;
  int64_t num_tree_pages = 0;
  cache::RadixHandle lock;
  int64_t cached_prompt_tokens = -1;  // set at first admission
  bool running = false;
  bool scheduled = false;    // in the plan being built
  bool provisional = false;  // tokens.back() is kProvisionalToken: the oldest awaiting plan's draw
};

Scheduler::Scheduler(cache::PageAllocator& allocator, cache::RadixCache& cache, SchedulerConfig config)
    : allocator_(allocator), cache_(cache), config_(config), page_size_(cache.page_size()) {
  NIBBLE_CHECK(config.max_batch_tokens >= 1, "scheduler max_batch_tokens must be >= 1, got {}",
               config.max_batch_tokens);
  NIBBLE_CHECK(config.max_running >= 1, "scheduler max_running must be >= 1, got {}", config.max_running);
  NIBBLE_CHECK(config.decode_reserve >= 0.0 && config.decode_reserve <= 1.0,
               "scheduler decode_reserve must be in [0, 1], got {}", config.decode_reserve);
}

Scheduler::~Scheduler() {
  try {
    for (Sequence* seq : std::vector<Sequence*>(running_)) release_pages(*seq, /*cache_prefix=*/false);
  } catch (...) {
    // A destructor must not throw; the pool is being torn down anyway.
  }
}

void Scheduler::submit(Request request) {
  try {
    validate(request);
  } catch (const Error&) {
    ++stats_.rejected;
    throw;
  }
  auto seq = std::make_unique<Sequence>();
  seq->arrival = next_arrival_++;
  seq->tokens = request.prompt;
  seq->request = std::move(request);
  Sequence* raw = seq.get();
  sequences_.emplace(raw->request.id, std::move(seq));
  waiting_.push_back(raw);
}

void Scheduler::validate(const Request& request) const {
  NIBBLE_CHECK(!request.prompt.empty(), "request {}: the prompt is empty", request.id);
  NIBBLE_CHECK(request.max_tokens >= 0, "request {}: max_tokens must be >= 0, got {}", request.id,
               request.max_tokens);
  NIBBLE_CHECK(!sequences_.count(request.id), "request {}: the id is already in use", request.id);
  // The last generated token is never fed back, so its KV is never stored.
  const int64_t prompt_tokens = static_cast<int64_t>(request.prompt.size());
  const int64_t kv_tokens = prompt_tokens + std::max<int64_t>(request.max_tokens - 1, 0);
  const int64_t pages = (kv_tokens + page_size_ - 1) / page_size_;
  NIBBLE_CHECK(pages <= allocator_.num_pages(),
               "request {} cannot fit the KV pool even alone: {} prompt + {} max_tokens tokens need {} pages of {} "
               "tokens, the pool has {} pages ({} tokens)",
               request.id, prompt_tokens, request.max_tokens, pages, page_size_, allocator_.num_pages(),
               allocator_.num_pages() * page_size_);
}

int64_t Scheduler::remaining(const Sequence& seq) const {
  return static_cast<int64_t>(seq.tokens.size()) - seq.num_computed;
}

int64_t Scheduler::pages_for(const Sequence& seq, int64_t new_tokens) const {
  const int64_t needed = (seq.num_computed + new_tokens + page_size_ - 1) / page_size_;
  return std::max<int64_t>(needed - static_cast<int64_t>(seq.page_table.size()), 0);
}

// The pages seq will still add: the rest of its known tokens (prompt chunks, a recompute) and
// decode_reserve of the KV its remaining max_tokens will write (the last token's is never stored).
int64_t Scheduler::reserved_pages(const Sequence& seq) const {
  const int64_t known = static_cast<int64_t>(seq.tokens.size());
  const int64_t kv_target =
      static_cast<int64_t>(seq.request.prompt.size()) + std::max<int64_t>(seq.request.max_tokens - 1, 0);
  const int64_t decode_left = std::max<int64_t>(kv_target - std::max(known, seq.num_computed), 0);
  const auto reserve = static_cast<int64_t>(std::ceil(config_.decode_reserve * static_cast<double>(decode_left)));
  return pages_for(seq, remaining(seq) + reserve);
}

bool Scheduler::make_free(int64_t pages) {
  if (allocator_.num_free() < pages) cache_.evict(pages - allocator_.num_free());
  return allocator_.num_free() >= pages;
}

int64_t Scheduler::fit(const Sequence& seq, int64_t want) {
  make_free(pages_for(seq, want));
  const int64_t slack = static_cast<int64_t>(seq.page_table.size()) * page_size_ - seq.num_computed;
  return std::min(want, slack + allocator_.num_free() * page_size_);
}

void Scheduler::schedule(Sequence& seq, int64_t n, StepPlan& plan) {
  NIBBLE_ASSERT(n >= 1 && n <= remaining(seq));
  auto pages = allocator_.allocate(pages_for(seq, n));
  NIBBLE_ASSERT(pages.has_value());
  seq.page_table.insert(seq.page_table.end(), pages->begin(), pages->end());

  ScheduledSequence out;
  out.request_id = seq.request.id;
  out.first_position = seq.num_computed;
  out.num_new_tokens = n;
  out.context_tokens = seq.num_computed + n;
  out.samples = out.context_tokens == static_cast<int64_t>(seq.tokens.size());
  out.input_tokens.assign(seq.tokens.begin() + seq.num_computed, seq.tokens.begin() + out.context_tokens);
  out.page_table = seq.page_table;
  const bool prefill = seq.num_computed < static_cast<int64_t>(seq.request.prompt.size());
  seq.num_computed = out.context_tokens;
  seq.scheduled = true;

  pending_.push_back({.id = seq.request.id, .samples = out.samples, .prefill = prefill});
  plan.num_tokens += n;
  plan.num_sampled += out.samples ? 1 : 0;
  plan.sequences.push_back(std::move(out));
  stats_.computed_tokens += n;
}

QueueBlock Scheduler::block_after_admissions(bool short_of_pages) const {
  if (waiting_.empty()) return QueueBlock::kNone;
  if (short_of_pages) return QueueBlock::kPages;
  if (static_cast<int64_t>(running_.size()) >= config_.max_running) return QueueBlock::kRunningCap;
  return QueueBlock::kTokenBudget;  // the loops' last condition: the budget went to the requests ahead
}

bool Scheduler::try_admit(Sequence& seq, int64_t budget, StepPlan& plan) {
  // Match all but the last token: its logits are needed, so at least one token is computed.
  const std::span<const TokenId> known(seq.tokens);
  cache::RadixMatch match = cache_.match_prefix(known.first(seq.request.compute_whole_prompt ? 0 : known.size() - 1));
  seq.page_table = std::move(match.pages);
  seq.num_tree_pages = static_cast<int64_t>(seq.page_table.size());
  seq.num_computed = match.matched_tokens;
  seq.lock = match.handle;
  const int64_t n = std::min(remaining(seq), budget);
  // The decode reserve: room for seq's and the running requests' growth, counted on free and
  // evictable pages (seq's matched prefix is locked already). Not when nothing runs: submit() made
  // sure a request fits the pool alone. (seq's share covers its first chunk's pages.)
  bool reserved = true;
  if (config_.decode_reserve > 0.0 && !running_.empty()) {
    int64_t need = reserved_pages(seq);
    for (const Sequence* other : running_) need += reserved_pages(*other);
    reserved = allocator_.num_free() + cache_.evictable_pages() >= need;
  }
  if (!reserved || !make_free(pages_for(seq, n))) {
    cache_.unlock(seq.lock);
    seq.page_table.clear();
    seq.num_tree_pages = 0;
    seq.num_computed = 0;
    seq.lock = {};
    return false;
  }
  ++stats_.admissions;
  stats_.prefix_hit_tokens += match.matched_tokens;
  if (seq.cached_prompt_tokens < 0) {
    seq.cached_prompt_tokens =
        std::min<int64_t>(match.matched_tokens, static_cast<int64_t>(seq.request.prompt.size()));
  }
  seq.running = true;
  // FIFO admission makes this the back; searching keeps the arrival order true regardless.
  running_.insert(std::find_if(running_.begin(), running_.end(),
                               [&](const Sequence* other) { return other->arrival > seq.arrival; }),
                  &seq);
  schedule(seq, n, plan);
  return true;
}

StepPlan Scheduler::step() {
  NIBBLE_CHECK(outstanding_.empty(), "scheduler: step() called again before update() answered the last plan");
  StepPlan plan;
  pending_.clear();
  if (idle()) {
    check_integrity();
    return plan;
  }
  ++stats_.steps;
  int64_t budget = config_.max_batch_tokens;
  bool preempted = false;
  for (Sequence* seq : running_) seq->scheduled = false;

  // Running requests, oldest first, so the oldest always progresses: preemption only ever takes a
  // request newer than the one that needs pages (or that one itself when it is the newest left).
  // A prefill chunk leaves room in the budget for the decodes behind it, so a long prompt never
  // stalls the others' decoding.
  const auto decodes_after = [&](size_t i) {
    return std::count_if(running_.begin() + static_cast<std::ptrdiff_t>(i) + 1, running_.end(),
                         [&](const Sequence* s) { return remaining(*s) == 1; });
  };
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    Sequence& seq = *running_[i];
    const int64_t want = std::min(remaining(seq), remaining(seq) == 1 ? budget : budget - decodes_after(i));
    if (want <= 0) {
      ++i;
      continue;
    }
    int64_t n = fit(seq, want);
    while (n == 0 && running_.back() != &seq) {
      preempt(*running_.back());  // the newest; never one already in the plan (all are older than seq)
      preempted = true;
      n = fit(seq, want);
    }
    if (n == 0) {  // seq is the newest left and still cannot get a page
      preempt(seq);
      preempted = true;
      break;
    }
    schedule(seq, n, plan);
    budget -= n;
    ++i;
  }

  // Admissions, strictly FIFO. Not in a step that preempted: the pool is short, and admitting now
  // would only preempt again.
  bool short_of_pages = preempted;
  while (!preempted && !waiting_.empty() && budget > 0 &&
         static_cast<int64_t>(running_.size()) < config_.max_running) {
    Sequence& seq = *waiting_.front();
    if (!try_admit(seq, budget, plan)) {
      short_of_pages = true;
      break;
    }
    waiting_.pop_front();
    budget -= plan.sequences.back().num_new_tokens;
  }
  queue_block_ = block_after_admissions(short_of_pages);
  if (!plan.empty()) outstanding_.push_back(std::move(pending_));
  pending_.clear();
  return plan;
}

StepPlan Scheduler::step_ahead() {
  NIBBLE_CHECK(outstanding_.size() == 1, "scheduler: step_ahead() needs exactly one plan awaiting update(), {} do",
               outstanding_.size());
  StepPlan plan;
  // The awaiting plan's sampling rows, by request: the order its draws come back in.
  std::unordered_map<RequestId, int32_t> sample_row;
  int32_t rows = 0;
  for (const Pending& p : outstanding_.front()) {
    if (p.samples) sample_row.emplace(p.id, rows++);
  }
  // A request at the queue's front that scores its prompt is admitted by step() (its step returns
  // logits to the host, which a step planned ahead does not): planning ahead now would keep it
  // waiting behind the decodes.
  if (!waiting_.empty() && waiting_.front()->request.compute_whole_prompt) return plan;
  // The steady state only: every running request sampled in that plan, so each continues with
  // exactly the token being drawn (a prompt still in chunks, or a request the budget left out,
  // waits for update()). One sure to stop on that draw (max_tokens) is not continued.
  std::vector<Sequence*> continuing;
  for (Sequence* seq : running_) {
    if (!sample_row.count(seq->request.id)) return plan;
    if (seq->request.max_tokens > 0 && static_cast<int64_t>(seq->output.size()) + 1 < seq->request.max_tokens) {
      continuing.push_back(seq);
    }
  }
  int64_t pages = 0;
  for (const Sequence* seq : continuing) pages += pages_for(*seq, 1);
  if (!make_free(pages)) return plan;  // would need a preemption: not ahead of the draws

  pending_.clear();
  for (Sequence* seq : running_) seq->scheduled = false;
  int64_t budget = config_.max_batch_tokens;
  for (Sequence* seq : continuing) {
    if (budget == 0) break;
    seq->tokens.push_back(kProvisionalToken);
    seq->provisional = true;
    schedule(*seq, 1, plan);
    plan.sequences.back().fed_row = sample_row.at(seq->request.id);
    --budget;
  }
  // Admissions, FIFO as in step(); one that scores its prompt ends them (above: step() admits it,
  // so it waits for the next step, as for the budget).
  bool short_of_pages = false;
  while (!waiting_.empty() && budget > 0 && static_cast<int64_t>(running_.size()) < config_.max_running) {
    Sequence& seq = *waiting_.front();
    if (seq.request.compute_whole_prompt) break;
    if (!try_admit(seq, budget, plan)) {
      short_of_pages = true;
      break;
    }
    waiting_.pop_front();
    budget -= plan.sequences.back().num_new_tokens;
  }
  queue_block_ = block_after_admissions(short_of_pages);
  if (!plan.empty()) {
    ++stats_.steps;
    outstanding_.push_back(std::move(pending_));
  }
  pending_.clear();
  return plan;
}

void Scheduler::drop_plans() {
  NIBBLE_CHECK(idle(), "scheduler: drop_plans() with {} requests live; cancel them first", sequences_.size());
  outstanding_.clear();
  pending_.clear();
}

std::vector<TokenEvent> Scheduler::update(std::span<const TokenId> sampled_tokens) {
  NIBBLE_CHECK(!outstanding_.empty(), "scheduler: update() without a plan from step()");
  const std::vector<Pending>& plan = outstanding_.front();
  const int64_t expected = std::count_if(plan.begin(), plan.end(), [](const Pending& p) { return p.samples; });
  NIBBLE_CHECK(static_cast<int64_t>(sampled_tokens.size()) == expected,
               "scheduler: update() needs {} sampled tokens (one per sampling sequence), got {}", expected,
               sampled_tokens.size());
  const std::vector<Pending> answered = std::move(outstanding_.front());
  outstanding_.pop_front();
  std::vector<TokenEvent> events;
  size_t next_token = 0;
  for (const Pending& pending : answered) {
    const TokenId token = pending.samples ? sampled_tokens[next_token++] : -1;
    auto it = sequences_.find(pending.id);
    if (it == sequences_.end() || !it->second->running) continue;  // cancelled or finished meanwhile
    Sequence& seq = *it->second;
    if (pending.samples) {
      TokenEvent event{.id = seq.request.id, .cached_prompt_tokens = seq.cached_prompt_tokens};
      if (seq.request.max_tokens == 0) {
        event.finish = FinishReason::kLength;
      } else {
        event.token = token;
        if (seq.provisional) {  // a plan made ahead already computes this position
          seq.tokens.back() = token;
          seq.provisional = false;
        } else {
          seq.tokens.push_back(token);
        }
        seq.output.push_back(token);
        ++stats_.generated_tokens;
        const auto& stops = seq.request.stop_ids;
        if (std::find(stops.begin(), stops.end(), token) != stops.end()) {
          event.finish = FinishReason::kStop;
        } else if (static_cast<int64_t>(seq.output.size()) >= seq.request.max_tokens) {
          event.finish = FinishReason::kLength;
        }
      }
      event.generated_tokens = static_cast<int64_t>(seq.output.size());
      events.push_back(event);
      if (event.finish != FinishReason::kNone) {
        finish(seq.request.id, event.finish);
        continue;
      }
    }
    if (pending.prefill && config_.cache_after_prefill) cache_prefix(seq);
  }
  return events;
}

void Scheduler::cache_prefix(Sequence& seq) {
  if (!cache_.enabled()) return;
  const int64_t whole_pages = seq.num_computed / page_size_;
  if (whole_pages <= seq.num_tree_pages) return;
  cache::RadixInsert inserted = cache_.insert(std::span<const TokenId>(seq.tokens).first(whole_pages * page_size_),
                                              std::span<const PageId>(seq.page_table).first(whole_pages));
  allocator_.release(inserted.pages_to_release);  // duplicates of pages another request cached first
  NIBBLE_ASSERT(static_cast<int64_t>(inserted.tree_pages.size()) == whole_pages);
  std::copy(inserted.tree_pages.begin(), inserted.tree_pages.end(), seq.page_table.begin());
  cache_.lock(inserted.handle);
  cache_.unlock(seq.lock);
  seq.lock = inserted.handle;
  seq.num_tree_pages = whole_pages;
}

void Scheduler::release_pages(Sequence& seq, bool cache_prefix) {
  int64_t first_own = seq.num_tree_pages;
  if (cache_prefix && cache_.enabled()) {
    const int64_t whole_pages = seq.num_computed / page_size_;
    cache::RadixInsert inserted =
        cache_.insert(std::span<const TokenId>(seq.tokens).first(whole_pages * page_size_),
                      std::span<const PageId>(seq.page_table).first(whole_pages));
    allocator_.release(inserted.pages_to_release);
    first_own = std::max(first_own, whole_pages);  // the tree adopted or deduplicated the rest
  }
  allocator_.release(std::span<const PageId>(seq.page_table).subspan(first_own));
  cache_.unlock(seq.lock);
  seq.lock = {};
  seq.page_table.clear();
  seq.num_tree_pages = 0;
  seq.num_computed = 0;
}

void Scheduler::preempt(Sequence& seq) {
  NIBBLE_ASSERT(seq.running && !seq.scheduled);
  release_pages(seq, /*cache_prefix=*/true);  // recomputation will likely hit these pages
  seq.running = false;
  running_.erase(std::find(running_.begin(), running_.end(), &seq));
  enqueue_waiting(seq);
  ++stats_.preemptions;
}

void Scheduler::enqueue_waiting(Sequence& seq) {
  auto pos = std::find_if(waiting_.begin(), waiting_.end(),
                          [&](const Sequence* other) { return other->arrival > seq.arrival; });
  waiting_.insert(pos, &seq);
}

void Scheduler::remove(Sequence& seq) {
  if (seq.running) {
    running_.erase(std::find(running_.begin(), running_.end(), &seq));
  } else {
    waiting_.erase(std::find(waiting_.begin(), waiting_.end(), &seq));
  }
  sequences_.erase(seq.request.id);  // destroys seq
}

bool Scheduler::cancel(RequestId id) {
  auto it = sequences_.find(id);
  if (it == sequences_.end()) return false;
  Sequence& seq = *it->second;
  // Nothing is cached: between step() and update() the last chunk's KV may not be written yet.
  if (seq.running) release_pages(seq, /*cache_prefix=*/false);
  ++stats_.cancelled;
  remove(seq);
  return true;
}

bool Scheduler::finish(RequestId id, FinishReason reason) {
  NIBBLE_CHECK(reason == FinishReason::kStop || reason == FinishReason::kLength,
               "scheduler: finish() takes kStop or kLength, got {}", finish_reason_name(reason));
  auto it = sequences_.find(id);
  if (it == sequences_.end()) return false;
  Sequence& seq = *it->second;
  // The cached pages are only matched by a later step(), which comes after the runner wrote them.
  if (seq.running) release_pages(seq, /*cache_prefix=*/true);
  ++stats_.finished;
  remove(seq);
  return true;
}

const Request& Scheduler::request(RequestId id) const {
  auto it = sequences_.find(id);
  NIBBLE_CHECK(it != sequences_.end(), "scheduler: request {} is not live", id);
  return it->second->request;
}

const std::vector<TokenId>& Scheduler::generated(RequestId id) const {
  auto it = sequences_.find(id);
  NIBBLE_CHECK(it != sequences_.end(), "scheduler: request {} is not live", id);
  return it->second->output;
}

void Scheduler::check_integrity() const {
  allocator_.check_integrity();
  NIBBLE_CHECK(static_cast<int64_t>(running_.size()) <= config_.max_running,
               "scheduler corrupt: {} running, cap {}", running_.size(), config_.max_running);
  NIBBLE_CHECK(running_.size() + waiting_.size() == sequences_.size(),
               "scheduler corrupt: {} running + {} waiting != {} live", running_.size(), waiting_.size(),
               sequences_.size());
  std::vector<PageId> private_pages;
  for (size_t i = 0; i < running_.size(); ++i) {
    const Sequence& seq = *running_[i];
    const RequestId id = seq.request.id;
    NIBBLE_CHECK(seq.running, "scheduler corrupt: request {} in the running list is not running", id);
    NIBBLE_CHECK(i == 0 || running_[i - 1]->arrival < seq.arrival, "scheduler corrupt: running list out of order");
    NIBBLE_CHECK(seq.num_computed >= 0 && seq.num_computed <= static_cast<int64_t>(seq.tokens.size()),
                 "scheduler corrupt: request {} computed {} of {} tokens", id, seq.num_computed, seq.tokens.size());
    const int64_t expected_pages = (seq.num_computed + page_size_ - 1) / page_size_;
    NIBBLE_CHECK(static_cast<int64_t>(seq.page_table.size()) == expected_pages,
                 "scheduler corrupt: request {} holds {} pages for {} computed tokens (expected {})", id,
                 seq.page_table.size(), seq.num_computed, expected_pages);
    NIBBLE_CHECK(seq.num_tree_pages >= 0 && seq.num_tree_pages * page_size_ <= seq.num_computed,
                 "scheduler corrupt: request {} shares {} pages but computed {} tokens", id, seq.num_tree_pages,
                 seq.num_computed);
    for (int64_t p = 0; p < static_cast<int64_t>(seq.page_table.size()); ++p) {
      const PageId page = seq.page_table[p];
      if (p < seq.num_tree_pages) {
        NIBBLE_CHECK(cache_.holds_page(page), "scheduler corrupt: request {} shared page {} is not cached", id,
                     page);
      } else {
        private_pages.push_back(page);
      }
    }
  }
  for (size_t i = 0; i < waiting_.size(); ++i) {
    const Sequence& seq = *waiting_[i];
    NIBBLE_CHECK(!seq.running && seq.page_table.empty() && seq.num_computed == 0 && seq.lock.node == nullptr,
                 "scheduler corrupt: waiting request {} holds pages", seq.request.id);
    NIBBLE_CHECK(i == 0 || waiting_[i - 1]->arrival < seq.arrival, "scheduler corrupt: waiting queue out of order");
  }
  cache_.check_integrity(private_pages);
}

}  // namespace nibble::scheduler
