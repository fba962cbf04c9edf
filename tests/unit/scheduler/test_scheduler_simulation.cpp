// Scheduler simulations: many requests with shared prompt prefixes, arriving over time, through a
// pool far too small for all of them, against the fake runner (fake_model.h). The oracle is each
// request run alone (generate_alone). Checked: identical outputs, preemption happening and
// recovering, no page leak (integrity after every step; at the end every page free or cached),
// prefix hits, cancellation, FIFO admission and a bound on waiting.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>

#include "fake_model.h"

namespace nibble::scheduler {
namespace {

using testing::generate_alone;
using testing::Harness;

struct SimulationParams {
  uint32_t seed = 0;
  int64_t num_pages = 0;
  int64_t page_size = 0;
  int64_t max_batch_tokens = 0;
  int64_t max_running = 0;
  int num_requests = 0;
  bool prefix_cache = true;
  bool cancel_some = false;
  bool overlap = false;  // step as the engine overlaps: Harness::run_overlapped (step_ahead)
  double decode_reserve = 0.0;
};

struct SimulationResult {
  SchedulerStats stats;
  int64_t steps = 0;
  int64_t ahead_plans = 0;  // plans made by step_ahead (overlap)
};

SimulationResult simulate(const SimulationParams& p) {
  std::mt19937 rng(p.seed);
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  Harness h(p.num_pages, p.page_size,
            {.max_batch_tokens = p.max_batch_tokens, .max_running = p.max_running, .decode_reserve = p.decode_reserve},
            p.prefix_cache);

  // Three system-prompt stems shared by the requests, then a private suffix.
  std::vector<std::vector<TokenId>> stems;
  for (int s = 0; s < 3; ++s) {
    std::vector<TokenId> stem(uniform(6, 18));
    for (TokenId& t : stem) t = uniform(0, testing::kVocab - 1);
    stems.push_back(stem);
  }
  std::vector<Request> requests;
  for (int i = 0; i < p.num_requests; ++i) {
    Request r{.id = static_cast<RequestId>(100 + i), .prompt = stems[uniform(0, 2)], .max_tokens = uniform(1, 20)};
    for (int n = uniform(0, 10); n > 0; --n) r.prompt.push_back(uniform(0, testing::kVocab - 1));
    if (uniform(0, 2) == 0) r.stop_ids = {0, 1, 2};
    requests.push_back(std::move(r));
  }

  std::map<RequestId, int64_t> submitted_at;
  std::map<RequestId, int64_t> first_scheduled_at;
  std::vector<RequestId> admission_order;
  std::set<RequestId> cancelled;
  size_t next = 0;
  int64_t step = 0;
  int64_t ahead_plans = 0;
  auto clients = [&] {
    for (int n = uniform(0, 2); n > 0 && next < requests.size(); --n) {  // arrivals over time
      submitted_at[requests[next].id] = step;
      h.scheduler.submit(requests[next++]);
    }
    if (p.cancel_some && uniform(0, 9) == 0 && !h.scheduler.idle()) {  // a client goes away
      const RequestId id = requests[uniform(0, static_cast<int>(next) - 1)].id;
      if (h.scheduler.cancel(id)) {
        cancelled.insert(id);
        h.scheduler.check_integrity();
      }
    }
  };
  auto check_plan = [&](const StepPlan& plan) {
    EXPECT_LE(plan.num_tokens, p.max_batch_tokens);
    EXPECT_LE(static_cast<int64_t>(plan.sequences.size()), p.max_running);
    std::set<RequestId> in_plan;
    for (const ScheduledSequence& s : plan.sequences) {
      EXPECT_TRUE(in_plan.insert(s.request_id).second) << "request " << s.request_id << " twice in one plan";
      if (first_scheduled_at.emplace(s.request_id, step).second) admission_order.push_back(s.request_id);
    }
  };
  // Overlapped, the clients act while a plan's draws are in flight (between step_ahead and update).
  h.on_plan = [&](const StepPlan& plan) {
    check_plan(plan);
    ++step;
    clients();
  };
  for (; step < 5000 && (next < requests.size() || !h.scheduler.idle()); ++step) {
    clients();
    if (p.overlap) {
      ahead_plans += h.run_overlapped();
    } else {
      check_plan(h.step());
    }
  }
  EXPECT_TRUE(h.scheduler.idle()) << "the simulation did not drain in " << step << " steps";

  for (const Request& r : requests) {
    if (cancelled.count(r.id)) {
      EXPECT_FALSE(h.finished.count(r.id)) << "request " << r.id;
      continue;
    }
    EXPECT_TRUE(h.finished.count(r.id)) << "request " << r.id << " never finished";
    EXPECT_EQ(h.outputs[r.id], generate_alone(r)) << "request " << r.id << " differs from its solo run";
  }
  // FIFO: requests are first scheduled in submission order (ids were submitted in order).
  for (size_t i = 1; i < admission_order.size(); ++i) {
    EXPECT_LT(admission_order[i - 1], admission_order[i]) << "request admitted ahead of an older one";
  }
  h.expect_no_request_pages();
  const int64_t cached = h.cache.cached_pages();
  EXPECT_EQ(h.cache.evictable_pages(), cached);  // no request holds a lock any more
  EXPECT_EQ(h.cache.evict(p.num_pages), cached);
  EXPECT_EQ(h.allocator.num_free(), p.num_pages);
  return {.stats = h.scheduler.stats(), .steps = step, .ahead_plans = ahead_plans};
}

// Also stepped as the engine overlaps host work with the device (overlap: step_ahead plans the next
// step while the last one's draws are in flight, fed those draws): the same outputs.
// The tiny pool most simulations run: 14 pages of 4 tokens, 24 tokens per step, 6 running.
SimulationParams tiny_pool(uint32_t seed, int num_requests) {
  return {.seed = seed, .num_pages = 14, .page_size = 4, .max_batch_tokens = 24, .max_running = 6,
          .num_requests = num_requests};
}

// Also with the decode reserve: the same outputs, and with all of it reserved nothing is preempted.
TEST(SchedulerSimulation, SharedPrefixesThroughATinyPoolMatchSoloRuns) {
  for (const double reserve : {0.0, 0.5, 1.0}) {
    for (const bool overlap : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "decode reserve " << reserve << ", overlap " << overlap);
      int64_t preemptions = 0, hits = 0, ahead = 0;
      for (uint32_t seed = 1; seed <= 6; ++seed) {
        SCOPED_TRACE(::testing::Message() << "seed " << seed);
        SimulationParams params = tiny_pool(seed, 60);
        params.overlap = overlap;
        params.decode_reserve = reserve;
        const SimulationResult r = simulate(params);
        EXPECT_EQ(r.stats.finished, 60);
        preemptions += r.stats.preemptions;
        hits += r.stats.prefix_hit_tokens;
        ahead += r.ahead_plans;
      }
      if (reserve == 0.0) EXPECT_GT(preemptions, 0) << "the pool was meant to be too small: preemption never happened";
      if (reserve == 1.0) EXPECT_EQ(preemptions, 0) << "admitted requests whose growth did not fit";
      EXPECT_GT(hits, 0) << "shared prompt stems never hit the prefix cache";
      if (overlap) EXPECT_GT(ahead, 100) << "steps were hardly ever planned ahead";
    }
  }
}

TEST(SchedulerSimulation, WithoutThePrefixCacheTheSameOutputs) {
  for (uint32_t seed = 1; seed <= 3; ++seed) {
    SCOPED_TRACE(::testing::Message() << "seed " << seed);
    SimulationParams params = tiny_pool(seed, 40);
    params.prefix_cache = false;
    const SimulationResult r = simulate(params);
    EXPECT_EQ(r.stats.prefix_hit_tokens, 0);
    EXPECT_GT(r.stats.preemptions, 0);
  }
}

TEST(SchedulerSimulation, PageSizeOneAndLargePages) {
  for (const int64_t page_size : {1, 16}) {
    SCOPED_TRACE(::testing::Message() << "page size " << page_size);
    simulate({.seed = 9,
              .num_pages = page_size == 1 ? 64 : 8,  // 64 and 128 token slots; a request needs <= 47
              .page_size = page_size,
              .max_batch_tokens = 16,
              .max_running = 5,
              .num_requests = 30});
  }
}

// Overlapped, the cancellations also come while a plan made ahead is in flight.
TEST(SchedulerSimulation, CancellationsAmidPreemptionLeakNothing) {
  for (const bool overlap : {false, true}) {
    for (uint32_t seed = 11; seed <= 14; ++seed) {
      SCOPED_TRACE(::testing::Message() << "seed " << seed << ", overlap " << overlap);
      SimulationParams params = tiny_pool(seed, 50);
      params.cancel_some = true;
      params.overlap = overlap;
      const SimulationResult r = simulate(params);
      EXPECT_GT(r.stats.cancelled, 0);
    }
  }
}

// A large request behind a never-ending stream of small ones: FIFO admission must get it in
// within a bounded number of steps (the small ones admitted before it drain; none jumps ahead).
TEST(SchedulerSimulation, ALargeRequestIsNotStarvedByAStreamOfSmallOnes) {
  Harness h(12, 4, {.max_batch_tokens = 16, .max_running = 8});
  RequestId next_id = 1;
  auto small = [&] { return Request{.id = next_id++, .prompt = {5, 6, 7}, .max_tokens = 6}; };
  for (int i = 0; i < 4; ++i) h.scheduler.submit(small());
  h.step();
  const Request big{.id = 1000, .prompt = std::vector<TokenId>(40, 9), .max_tokens = 4};  // 11 of 12 pages
  h.scheduler.submit(big);
  int64_t big_first_step = -1;
  int64_t step = 0;
  for (; step < 300 && !h.finished.count(big.id); ++step) {
    h.scheduler.submit(small());  // one new small request every step, forever
    const StepPlan plan = h.step();
    for (const ScheduledSequence& s : plan.sequences) {
      if (s.request_id == big.id && big_first_step < 0) big_first_step = step;
    }
  }
  ASSERT_TRUE(h.finished.count(big.id)) << "the large request starved";
  // The 4 small ones ahead of it need at most 6 decode steps; the big one then prefills (3 steps of
  // 16 tokens) and decodes 3 more, so a handful of steps beyond that is the bound.
  EXPECT_LE(big_first_step, 10);
  EXPECT_LE(step, 30);
  EXPECT_EQ(h.outputs[big.id], generate_alone(big));
}

}  // namespace
}  // namespace nibble::scheduler
