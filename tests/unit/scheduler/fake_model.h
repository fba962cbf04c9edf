#pragma once
// A fake model and runner for scheduler tests. The "model" samples a deterministic function of the
// whole sequence. The runner keeps a simulated KV pool — every page slot records which token at which
// position was written there — and computes each sampled token from what it READS BACK from the
// plan's page table, never from the scheduler's own bookkeeping. So a wrong page table, a page
// reused while still needed, or a cached page that was overwritten changes the output or trips an
// assertion, and "every request gets exactly the tokens it would get alone" checks the page
// handling end to end.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <vector>

#include "cache/page_allocator.h"
#include "cache/radix_cache.h"
#include "scheduler/scheduler.h"
#include "scheduler/step_plan.h"

namespace nibble::scheduler::testing {

constexpr TokenId kVocab = 40;

// FNV-1a over the tokens, folded into the vocabulary.
inline TokenId fake_next_token(const std::vector<TokenId>& sequence) {
  uint64_t h = 1469598103934665603ull;
  for (TokenId t : sequence) {
    h ^= static_cast<uint64_t>(t) + 0x9e37u;
    h *= 1099511628211ull;
  }
  return static_cast<TokenId>((h >> 17) % kVocab);
}

// What the request produces run alone, with no scheduler: the oracle.
inline std::vector<TokenId> generate_alone(const Request& request) {
  std::vector<TokenId> sequence = request.prompt;
  std::vector<TokenId> out;
  while (static_cast<int64_t>(out.size()) < request.max_tokens) {
    const TokenId t = fake_next_token(sequence);
    out.push_back(t);
    sequence.push_back(t);
    if (std::find(request.stop_ids.begin(), request.stop_ids.end(), t) != request.stop_ids.end()) break;
  }
  return out;
}

class FakeRunner {
 public:
  FakeRunner(int64_t num_pages, int64_t page_size, const cache::RadixCache& cache)
      : page_size_(page_size), cache_(cache), slots_(num_pages * page_size) {}

  // Runs one plan: all writes first (as one batched forward pass), then the reads. Returns one
  // sampled token per sequence with `samples`, in plan order. `fed`: the previous plan's draws, the
  // input of every sequence with a fed_row (a plan made by step_ahead()).
  std::vector<TokenId> run(const StepPlan& plan, const std::vector<TokenId>& fed = {}) {
    std::set<PageId> written_pages;
    for (const ScheduledSequence& s : plan.sequences) {
      EXPECT_EQ(static_cast<int64_t>(s.page_table.size()), (s.context_tokens + page_size_ - 1) / page_size_);
      EXPECT_EQ(static_cast<int64_t>(s.input_tokens.size()), s.num_new_tokens);
      if (s.fed_row >= 0) {
        EXPECT_EQ(s.num_new_tokens, 1);
        EXPECT_EQ(s.input_tokens[0], kProvisionalToken);
        EXPECT_LT(s.fed_row, static_cast<int32_t>(fed.size()));
      }
      for (int64_t j = 0; j < s.num_new_tokens; ++j) {
        const int64_t pos = s.first_position + j;
        const PageId page = s.page_table[pos / page_size_];
        // The prefix cache's pages are shared and read-only; a step writes only its own pages.
        EXPECT_FALSE(cache_.holds_page(page)) << "request " << s.request_id << " writes cached page " << page;
        const TokenId token = s.fed_row >= 0 && s.fed_row < static_cast<int32_t>(fed.size())
                                  ? fed[static_cast<size_t>(s.fed_row)]
                                  : s.input_tokens[j];
        slots_[page * page_size_ + pos % page_size_] = {token, pos, s.request_id};
        written_pages.insert(page);
      }
    }
    std::vector<TokenId> sampled;
    for (const ScheduledSequence& s : plan.sequences) {
      if (!s.samples) continue;
      std::vector<TokenId> sequence;
      for (int64_t pos = 0; pos < s.context_tokens; ++pos) {
        const Slot& slot = slots_[s.page_table[pos / page_size_] * page_size_ + pos % page_size_];
        EXPECT_EQ(slot.position, pos) << "request " << s.request_id << " reads a slot holding another position";
        sequence.push_back(slot.token);
      }
      sampled.push_back(fake_next_token(sequence));
    }
    return sampled;
  }

 private:
  struct Slot {
    TokenId token = -1;
    int64_t position = -1;
    RequestId writer = 0;
  };
  int64_t page_size_;
  const cache::RadixCache& cache_;
  std::vector<Slot> slots_;  // [num_pages * page_size]: slot p*page_size + s is page p, token slot s
};

// A pool, a prefix cache, a scheduler and the fake runner, stepped together with integrity checks
// after every step() and update().
struct Harness {
  Harness(int64_t num_pages, int64_t page_size, SchedulerConfig config, bool prefix_cache = true)
      : allocator(num_pages),
        cache(allocator, {.page_size = page_size, .enabled = prefix_cache}),
        scheduler(allocator, cache, config),
        runner(num_pages, page_size, cache) {}

  StepPlan step() {
    StepPlan plan = scheduler.step();
    scheduler.check_integrity();
    const std::vector<TokenId> sampled = runner.run(plan);
    EXPECT_EQ(static_cast<int64_t>(sampled.size()), plan.num_sampled);
    if (!plan.empty()) record(scheduler.update(sampled));
    scheduler.check_integrity();
    return plan;
  }
  // Steps as the engine's overlap does: after a step(), while its draws are "in flight", the next
  // plan comes from step_ahead() and runs (fed those draws) before update() answers the first;
  // then step_ahead() again, until it returns an empty plan. Returns the plans made ahead.
  int64_t run_overlapped() {
    StepPlan plan = scheduler.step();
    scheduler.check_integrity();
    if (plan.empty()) return 0;
    std::vector<TokenId> sampled = runner.run(plan);
    on_plan(plan);
    int64_t ahead_plans = 0;
    while (true) {
      StepPlan ahead = scheduler.step_ahead();
      std::vector<TokenId> sampled_ahead;
      if (!ahead.empty()) {
        ++ahead_plans;
        sampled_ahead = runner.run(ahead, sampled);
        EXPECT_EQ(static_cast<int64_t>(sampled_ahead.size()), ahead.num_sampled);
        on_plan(ahead);
      }
      record(scheduler.update(sampled));
      scheduler.check_integrity();
      if (ahead.empty()) return ahead_plans;
      sampled = std::move(sampled_ahead);
    }
  }
  // Called with each plan of run_overlapped() once it ran, before update() answers the plan before
  // it: while "its draws are in flight" (tests submit, cancel or finish requests there).
  std::function<void(const StepPlan&)> on_plan = [](const StepPlan&) {};

  void record(const std::vector<TokenEvent>& events) {
    for (const TokenEvent& e : events) {
      if (e.token >= 0) outputs[e.id].push_back(e.token);
      EXPECT_EQ(e.generated_tokens, static_cast<int64_t>(outputs[e.id].size()));
      if (e.finish != FinishReason::kNone) {
        EXPECT_FALSE(finished.count(e.id)) << "request " << e.id << " finished twice";
        finished[e.id] = e.finish;
        cached_prompt_tokens[e.id] = e.cached_prompt_tokens;
      }
    }
  }
  // Every page is free or cached: nothing leaked by requests.
  void expect_no_request_pages() const {
    EXPECT_EQ(allocator.num_free() + cache.cached_pages(), allocator.num_pages());
    cache.check_integrity();
  }

  cache::PageAllocator allocator;
  cache::RadixCache cache;
  Scheduler scheduler;
  FakeRunner runner;
  std::map<RequestId, std::vector<TokenId>> outputs;
  std::map<RequestId, FinishReason> finished;
  std::map<RequestId, int64_t> cached_prompt_tokens;
};

}  // namespace nibble::scheduler::testing
