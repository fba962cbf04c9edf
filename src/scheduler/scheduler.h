#pragma once
// Scheduler: continuous batching over KV page ids. The request lifecycle:
//   1. submit()  — validated (a request that cannot fit the pool even alone is rejected at once),
//                  queued FIFO.
//   2. step()    — running requests first, oldest first (a decode takes 1 token, a prefill chunk
//                  what the budget leaves after the decodes behind it), then admissions from the
//                  queue front while the token budget, the running cap and the free pages (after
//                  evicting the prefix cache) allow. A prefix-cache hit skips the matched tokens.
//                  When a running request needs a page and none can be freed, the newest running
//                  request is preempted (possibly itself): its computed whole pages go to the
//                  prefix cache, the rest is released, and it returns to the queue in arrival order
//                  (its tokens so far are recomputed later).
//   3. the runner computes the StepPlan and samples one token per sequence with `samples`.
//   4. update()  — appends the tokens, finishes requests on a stop id or max_tokens, and offers the
//                  newly prefilled pages to the prefix cache.
//   cancel() / finish() at any time (between step() and update() too): everything the request
//   holds is released (finish() first caches its computed prefix).
//
// Planning one step ahead (the engine's overlap of host work with the device): while one plan
// awaits its update(), step_ahead() may plan the next one, in the steady state where every running
// request sampled in that plan: each continues with one decode whose input is the token still being
// drawn (ScheduledSequence::fed_row; a kProvisionalToken stands in its tokens until update() puts
// the drawn one there), plus admissions. A request that then finishes on that token (a stop id, a
// stop string, a cancel) has computed one position too many: that step's draw for it is dropped by
// update(), its pages were released in between (the device queue runs the step before any later
// one that may reuse them). step_ahead() never preempts, never plans a request that is sure to
// stop (max_tokens reached), and leaves a prompt-scoring request at the queue's front to step();
// when it cannot plan it returns an empty plan and changes nothing.
//
// No starvation: admission is strictly FIFO (the queue front blocks those behind it), preemption
// takes the newest, and the oldest running request can always progress by preempting the rest,
// because submit() only accepts requests whose pages fit the whole pool.
//
// Single-threaded: the engine loop owns the scheduler; other threads hand it cancellations.
#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "cache/page_allocator.h"
#include "cache/radix_cache.h"
#include "scheduler/request.h"
#include "scheduler/step_plan.h"

namespace nibble::scheduler {

struct SchedulerConfig {
  int64_t max_batch_tokens = 0;     // token budget per step (each decode 1, each chunk its size), >= 1
  int64_t max_running = 0;          // requests admitted at once, >= 1
  bool cache_after_prefill = true;  // offer prefill pages to the prefix cache as chunks complete
  // Admission's reserve for the requests' growth, in [0, 1]. With r > 0 a request is admitted only
  // while the pool (free pages and the prefix cache's evictable ones) also holds, for it and for every
  // running request, the rest of its known tokens (a prompt in chunks, a preempted request's
  // recompute) and r of the KV its remaining max_tokens will add. 0 admits on the first chunk's pages
  // alone and preempts the newest request when the pool runs out (the default); 1 admits only what
  // can run to max_tokens together, so nothing is preempted. (SGLang's schedule_conservativeness
  // plays this part.)
  double decode_reserve = 0.0;
};

struct SchedulerStats {
  int64_t steps = 0;
  int64_t admissions = 0;         // re-admissions after preemption included
  int64_t preemptions = 0;
  int64_t prefix_hit_tokens = 0;  // tokens skipped thanks to the prefix cache, over all admissions
  int64_t computed_tokens = 0;    // tokens scheduled for computation (prefill + decode + recompute)
  int64_t generated_tokens = 0;
  int64_t finished = 0;           // by stop id, max_tokens or finish()
  int64_t cancelled = 0;
  int64_t rejected = 0;           // submit() refusals
};

// Why the last step planned left the queue's front waiting.
enum class QueueBlock {
  kNone,         // nothing waits
  kTokenBudget,  // the step's max_batch_tokens went to the requests ahead (compute)
  kPages,        // its first chunk's pages (or the decode reserve) could not be had, or the step preempted
  kRunningCap,   // max_running requests are running
};

class Scheduler {
 public:
  // The allocator and the cache (built on that allocator, same page size) must outlive the
  // scheduler. Throws nibble::Error on a bad config.
  Scheduler(cache::PageAllocator& allocator, cache::RadixCache& cache, SchedulerConfig config);
  ~Scheduler();  // releases every page and lock the live requests hold
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Throws nibble::Error (and queues nothing) on an empty prompt, max_tokens < 0, an id already
  // live, or a request whose prompt + max_tokens needs more pages than the whole pool.
  void submit(Request request);

  // The next batch. Empty when nothing can run. Throws nibble::Error if the previous plan was not
  // answered with update(). When idle (nothing running or waiting) it runs check_integrity().
  StepPlan step();

  // With exactly one plan awaiting update(): the next plan, made before that update (file comment).
  // Empty when the state is not the steady one, no page can be had without preempting, or nothing
  // would run. Throws nibble::Error when not exactly one plan awaits its update.
  StepPlan step_ahead();

  // One sampled token per sequence of the oldest plan still awaiting update() with `samples`, in
  // plan order (plan.num_sampled of them). Returns one event per sampled sequence still live.
  std::vector<TokenEvent> update(std::span<const TokenId> sampled_tokens);

  // Forgets the plans awaiting update() (their steps failed). Throws nibble::Error unless every
  // request has been cancelled first (idle()), so nothing holds a provisional token.
  void drop_plans();
  int64_t plans_awaiting_update() const { return static_cast<int64_t>(outstanding_.size()); }

  // Both return false for an unknown (or already finished) id.
  bool cancel(RequestId id);                                     // releases everything, caches nothing
  bool finish(RequestId id, FinishReason reason = FinishReason::kStop);  // caches the computed prefix

  bool idle() const { return running_.empty() && waiting_.empty(); }
  int64_t num_running() const { return static_cast<int64_t>(running_.size()); }
  int64_t num_waiting() const { return static_cast<int64_t>(waiting_.size()); }
  QueueBlock queue_block() const { return queue_block_; }
  bool is_live(RequestId id) const { return sequences_.count(id) != 0; }
  const Request& request(RequestId id) const;                 // throws nibble::Error if not live
  const std::vector<TokenId>& generated(RequestId id) const;  // tokens so far (prompt excluded)
  const SchedulerStats& stats() const { return stats_; }
  int64_t page_size() const { return page_size_; }

  // Throws nibble::Error unless the allocator and cache are consistent, every running request's
  // page table covers exactly its computed tokens with its shared prefix in the cache, waiting
  // requests hold nothing, and free + cached + private pages == total.
  void check_integrity() const;

 private:
  struct Sequence;

  void validate(const Request& request) const;
  int64_t remaining(const Sequence& seq) const;
  int64_t pages_for(const Sequence& seq, int64_t new_tokens) const;  // pages to add for new_tokens
  int64_t reserved_pages(const Sequence& seq) const;  // its pages to come under decode_reserve
  bool make_free(int64_t pages);                                     // evicts the cache as needed
  int64_t fit(const Sequence& seq, int64_t want);                    // tokens whose pages can be had
  void schedule(Sequence& seq, int64_t n, StepPlan& plan);
  bool try_admit(Sequence& seq, int64_t budget, StepPlan& plan);
  void preempt(Sequence& seq);
  void cache_prefix(Sequence& seq);
  void release_pages(Sequence& seq, bool cache_prefix);
  void remove(Sequence& seq);
  void enqueue_waiting(Sequence& seq);

  cache::PageAllocator& allocator_;
  cache::RadixCache& cache_;
  SchedulerConfig config_;
  int64_t page_size_ = 0;
  uint64_t next_arrival_ = 0;
  std::unordered_map<RequestId, std::unique_ptr<Sequence>> sequences_;  // every live request
  std::deque<Sequence*> waiting_;   // by arrival; front admitted first
  std::vector<Sequence*> running_;  // by arrival; back is the newest (preempted first)
  // A plan's sequences, kept for update(): id, whether it samples, whether it was prefill.
  struct Pending {
    RequestId id;
    bool samples;
    bool prefill;
  };
  std::vector<Pending> pending_;                  // of the plan being built
  std::deque<std::vector<Pending>> outstanding_;  // plans awaiting update(), oldest first (at most 2)
  SchedulerStats stats_;
  QueueBlock queue_block_ = QueueBlock::kNone;  // of the last plan built

  // Why an admission loop left waiting_'s front there; short_of_pages: it failed for pages or the
  // step preempted.
  QueueBlock block_after_admissions(bool short_of_pages) const;
};

}  // namespace nibble::scheduler
