// Scheduler: one behaviour per test, with plans worked out by hand (page size 4 throughout).
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <string>

#include "common/error.h"
#include "fake_model.h"

namespace nibble::scheduler {
namespace {

using testing::generate_alone;
using testing::Harness;

constexpr int64_t kPageSize = 4;

std::vector<TokenId> iota_tokens(int n, TokenId first = 1) {
  std::vector<TokenId> t(n);
  std::iota(t.begin(), t.end(), first);
  return t;
}

Request make_request(RequestId id, std::vector<TokenId> prompt, int64_t max_tokens) {
  return Request{.id = id, .prompt = std::move(prompt), .max_tokens = max_tokens};
}

TEST(Scheduler, ChunkedPrefillThenDecode) {
  Harness h(16, kPageSize, {.max_batch_tokens = 4, .max_running = 4});
  const Request r = make_request(1, iota_tokens(10), 3);
  h.scheduler.submit(r);
  StepPlan p1 = h.step();
  ASSERT_EQ(p1.sequences.size(), 1u);
  EXPECT_EQ(p1.sequences[0].first_position, 0);
  EXPECT_EQ(p1.sequences[0].num_new_tokens, 4);
  EXPECT_EQ(p1.sequences[0].context_tokens, 4);
  EXPECT_FALSE(p1.sequences[0].samples);
  EXPECT_EQ(p1.sequences[0].page_table.size(), 1u);
  EXPECT_EQ(p1.num_sampled, 0);
  StepPlan p2 = h.step();
  EXPECT_EQ(p2.sequences[0].first_position, 4);
  EXPECT_EQ(p2.sequences[0].num_new_tokens, 4);
  StepPlan p3 = h.step();  // the last 2 prompt tokens: the token after them is sampled
  EXPECT_EQ(p3.sequences[0].first_position, 8);
  EXPECT_EQ(p3.sequences[0].num_new_tokens, 2);
  EXPECT_TRUE(p3.sequences[0].samples);
  EXPECT_EQ(p3.sequences[0].page_table.size(), 3u);
  StepPlan p4 = h.step();  // decode: feeds the first generated token at position 10
  EXPECT_EQ(p4.sequences[0].first_position, 10);
  EXPECT_EQ(p4.sequences[0].num_new_tokens, 1);
  EXPECT_EQ(p4.sequences[0].input_tokens, std::vector<TokenId>{h.outputs[1][0]});
  h.step();
  EXPECT_EQ(h.finished.at(1), FinishReason::kLength);
  EXPECT_EQ(h.outputs[1], generate_alone(r));
  EXPECT_TRUE(h.scheduler.idle());
  h.expect_no_request_pages();
  EXPECT_TRUE(h.step().empty());  // idle: runs check_integrity, plans nothing
}

TEST(Scheduler, PrefixHitSkipsMatchedWholePages) {
  Harness h(16, kPageSize, {.max_batch_tokens = 64, .max_running = 4});
  const Request a = make_request(1, iota_tokens(10), 1);
  h.scheduler.submit(a);
  StepPlan pa = h.step();  // computes positions 0..9; 2 whole pages go to the cache
  ASSERT_TRUE(h.finished.count(1));
  EXPECT_EQ(h.cache.cached_pages(), 2);
  h.expect_no_request_pages();

  const Request b = make_request(2, iota_tokens(10), 2);
  h.scheduler.submit(b);
  StepPlan pb = h.step();
  ASSERT_EQ(pb.sequences.size(), 1u);
  EXPECT_EQ(pb.sequences[0].first_position, 8);
  EXPECT_EQ(pb.sequences[0].num_new_tokens, 2);
  EXPECT_EQ(pb.sequences[0].page_table[0], pa.sequences[0].page_table[0]);
  EXPECT_EQ(pb.sequences[0].page_table[1], pa.sequences[0].page_table[1]);
  EXPECT_EQ(h.scheduler.stats().prefix_hit_tokens, 8);
  h.step();
  EXPECT_EQ(h.outputs[2], generate_alone(b));
  EXPECT_EQ(h.cached_prompt_tokens.at(2), 8);
  EXPECT_EQ(h.cached_prompt_tokens.at(1), 0);
}

TEST(Scheduler, FullyCachedPromptStillComputesItsLastToken) {
  Harness h(16, kPageSize, {.max_batch_tokens = 64, .max_running = 4});
  h.scheduler.submit(make_request(1, iota_tokens(8), 2));  // computes 9 positions: 2 whole pages cached
  h.step();
  h.step();
  ASSERT_TRUE(h.finished.count(1));
  const Request b = make_request(2, iota_tokens(8), 1);
  h.scheduler.submit(b);
  StepPlan p = h.step();
  // The last prompt token's logits are needed, so its page is not taken from the cache: only the
  // first page (tokens 0..3) is matched, and positions 4..7 are recomputed into a private page.
  EXPECT_EQ(p.sequences[0].first_position, 4);
  EXPECT_EQ(p.sequences[0].num_new_tokens, 4);
  EXPECT_TRUE(p.sequences[0].samples);
  EXPECT_EQ(h.outputs[2], generate_alone(b));
}

TEST(Scheduler, DecodesKeepTheirShareOfTheBudgetBesideALongPrefill) {
  Harness h(32, kPageSize, {.max_batch_tokens = 8, .max_running = 4});
  h.scheduler.submit(make_request(1, iota_tokens(3), 20));
  h.step();  // request 1 prefilled; decodes from now on
  h.scheduler.submit(make_request(2, iota_tokens(40, 100), 2));
  StepPlan p = h.step();
  ASSERT_EQ(p.sequences.size(), 2u);
  EXPECT_EQ(p.sequences[0].request_id, 1u);
  EXPECT_EQ(p.sequences[0].num_new_tokens, 1);
  EXPECT_EQ(p.sequences[1].request_id, 2u);
  EXPECT_EQ(p.sequences[1].num_new_tokens, 7);  // the budget of 8 minus request 1's decode
  EXPECT_EQ(p.num_tokens, 8);
  // Oldest first: request 1's decode, then request 2's chunk, which leaves it its one token.
  StepPlan q = h.step();
  EXPECT_EQ(q.sequences[0].request_id, 1u);
  EXPECT_EQ(q.sequences[0].num_new_tokens, 1);
  EXPECT_EQ(q.sequences[1].num_new_tokens, 7);
}

TEST(Scheduler, MaxRunningCapsAdmissions) {
  Harness h(64, kPageSize, {.max_batch_tokens = 64, .max_running = 2});
  for (RequestId id = 1; id <= 3; ++id) h.scheduler.submit(make_request(id, iota_tokens(4, 10 * id), 5));
  StepPlan p = h.step();
  EXPECT_EQ(p.sequences.size(), 2u);
  EXPECT_EQ(h.scheduler.num_running(), 2);
  EXPECT_EQ(h.scheduler.num_waiting(), 1);
}

// queue_block(): why the last plan left the queue's front waiting, each cause alone.
TEST(Scheduler, QueueBlockNamesWhyTheFrontWaits) {
  {  // the token budget: request 1's 12-token prompt takes the step's 8 tokens; 16 pages are free
    Harness h(16, kPageSize, {.max_batch_tokens = 8, .max_running = 4});
    EXPECT_EQ(h.scheduler.queue_block(), QueueBlock::kNone);
    h.scheduler.submit(make_request(1, iota_tokens(12), 4));
    h.scheduler.submit(make_request(2, iota_tokens(4, 50), 4));
    h.step();
    EXPECT_EQ(h.scheduler.num_waiting(), 1);
    EXPECT_EQ(h.scheduler.queue_block(), QueueBlock::kTokenBudget);
    h.step();  // request 1's last 4 prompt tokens leave 4 for request 2: admitted
    EXPECT_EQ(h.scheduler.num_waiting(), 0);
    EXPECT_EQ(h.scheduler.queue_block(), QueueBlock::kNone);
  }
  {  // the running cap
    Harness h(64, kPageSize, {.max_batch_tokens = 64, .max_running = 1});
    h.scheduler.submit(make_request(1, iota_tokens(4), 4));
    h.scheduler.submit(make_request(2, iota_tokens(4, 50), 4));
    h.step();
    EXPECT_EQ(h.scheduler.queue_block(), QueueBlock::kRunningCap);
  }
  {  // pages: 3 pages, request 1 (8 + 4 tokens) holds 2 of them after its prompt and the third from
     // its first decode on; request 2's first chunk needs one more
    Harness h(3, kPageSize, {.max_batch_tokens = 64, .max_running = 4}, /*prefix_cache=*/false);
    h.scheduler.submit(make_request(1, iota_tokens(8), 4));
    h.step();
    h.step();  // request 1's first decode: its third page
    h.scheduler.submit(make_request(2, iota_tokens(4, 50), 4));
    h.step();
    EXPECT_EQ(h.scheduler.num_waiting(), 1);
    EXPECT_EQ(h.scheduler.queue_block(), QueueBlock::kPages);
  }
}

TEST(Scheduler, StopIdFinishesAndIsReported) {
  Harness h(16, kPageSize, {.max_batch_tokens = 64, .max_running = 4});
  Request r = make_request(1, iota_tokens(5), 10);
  const std::vector<TokenId> free_run = generate_alone(r);
  r.stop_ids = {free_run[2]};  // the third generated token is an EOS id
  const std::vector<TokenId> expected = generate_alone(r);
  ASSERT_LE(expected.size(), 3u);
  h.scheduler.submit(r);
  while (!h.finished.count(1)) h.step();
  EXPECT_EQ(h.finished.at(1), FinishReason::kStop);
  EXPECT_EQ(h.outputs[1], expected);
  h.expect_no_request_pages();
}

TEST(Scheduler, MaxTokensZeroPrefillsAndFinishes) {
  Harness h(16, kPageSize, {.max_batch_tokens = 64, .max_running = 4});
  h.scheduler.submit(make_request(1, iota_tokens(6), 0));
  StepPlan p = h.step();
  ASSERT_EQ(p.sequences.size(), 1u);
  EXPECT_EQ(p.sequences[0].num_new_tokens, 6);
  EXPECT_TRUE(p.sequences[0].samples);  // the runner computes the logits (prompt scoring)
  EXPECT_EQ(h.finished.at(1), FinishReason::kLength);
  EXPECT_TRUE(h.outputs[1].empty());
  h.expect_no_request_pages();
}

TEST(Scheduler, FinishHookEndsARequestAndCachesItsPrefix) {
  Harness h(16, kPageSize, {.max_batch_tokens = 64, .max_running = 4});
  h.scheduler.submit(make_request(1, iota_tokens(9), 50));
  h.step();
  h.step();  // 10 positions computed
  EXPECT_TRUE(h.scheduler.finish(1));  // e.g. a stop string matched on the text
  EXPECT_FALSE(h.scheduler.is_live(1));
  EXPECT_FALSE(h.scheduler.finish(1));
  EXPECT_EQ(h.cache.cached_pages(), 2);
  h.scheduler.check_integrity();
  h.expect_no_request_pages();
}

TEST(Scheduler, CancellationFreesEverything) {
  Harness h(16, kPageSize, {.max_batch_tokens = 64, .max_running = 4}, /*prefix_cache=*/false);
  h.scheduler.submit(make_request(1, iota_tokens(9), 50));
  h.scheduler.submit(make_request(2, iota_tokens(9, 50), 50));
  h.step();
  h.step();
  EXPECT_EQ(h.allocator.num_free(), 16 - 3 - 3);
  EXPECT_TRUE(h.scheduler.cancel(1));
  EXPECT_EQ(h.allocator.num_free(), 16 - 3);
  h.scheduler.check_integrity();

  // Between step() and update(): the sampled token of a cancelled request is dropped.
  StepPlan p = h.scheduler.step();
  ASSERT_EQ(p.sequences.size(), 1u);
  EXPECT_TRUE(h.scheduler.cancel(2));
  EXPECT_EQ(h.allocator.num_free(), 16);
  const std::vector<TokenEvent> events = h.scheduler.update(h.runner.run(p));
  EXPECT_TRUE(events.empty());
  EXPECT_FALSE(h.scheduler.cancel(2));
  EXPECT_EQ(h.scheduler.stats().cancelled, 2);
  EXPECT_TRUE(h.scheduler.idle());
  h.scheduler.check_integrity();

  h.scheduler.submit(make_request(3, iota_tokens(4), 5));  // a waiting request can be cancelled too
  EXPECT_TRUE(h.scheduler.cancel(3));
  EXPECT_TRUE(h.scheduler.idle());
}

TEST(Scheduler, RejectsARequestThatCannotFitAlone) {
  Harness h(8, kPageSize, {.max_batch_tokens = 64, .max_running = 4});  // 32 token slots
  try {
    h.scheduler.submit(make_request(1, iota_tokens(30), 4));  // 30 + 3 stored = 33 > 32
    FAIL() << "expected a rejection";
  } catch (const nibble::Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot fit the KV pool"), std::string::npos) << e.what();
  }
  EXPECT_EQ(h.scheduler.stats().rejected, 1);
  EXPECT_TRUE(h.scheduler.idle());
  // Exactly the pool: 30 prompt + 2 fed-back tokens = 32 slots. It runs to the end.
  const Request fits = make_request(2, iota_tokens(30), 3);
  h.scheduler.submit(fits);
  for (int i = 0; i < 10 && !h.finished.count(2); ++i) h.step();
  EXPECT_EQ(h.outputs[2], generate_alone(fits));
  h.expect_no_request_pages();
}

TEST(Scheduler, RejectsMalformedRequestsAndMisuse) {
  Harness h(8, kPageSize, {.max_batch_tokens = 64, .max_running = 4});
  EXPECT_THROW(h.scheduler.submit(make_request(1, {}, 4)), nibble::Error);
  EXPECT_THROW(h.scheduler.submit(make_request(1, iota_tokens(3), -1)), nibble::Error);
  h.scheduler.submit(make_request(1, iota_tokens(3), 4));
  EXPECT_THROW(h.scheduler.submit(make_request(1, iota_tokens(3), 4)), nibble::Error);  // duplicate id
  EXPECT_EQ(h.scheduler.stats().rejected, 3);
  EXPECT_THROW(h.scheduler.update({}), nibble::Error);  // no plan yet
  StepPlan p = h.scheduler.step();
  EXPECT_THROW(h.scheduler.step(), nibble::Error);                           // unanswered plan
  EXPECT_THROW(h.scheduler.update(std::vector<TokenId>{1, 2}), nibble::Error);  // one token expected
  h.scheduler.update(h.runner.run(p));
  h.scheduler.check_integrity();
  EXPECT_THROW(h.scheduler.request(99), nibble::Error);
  EXPECT_THROW(h.scheduler.finish(1, FinishReason::kCancelled), nibble::Error);
  EXPECT_THROW(Scheduler(h.allocator, h.cache, {.max_batch_tokens = 0, .max_running = 1}), nibble::Error);
  EXPECT_THROW(Scheduler(h.allocator, h.cache, {.max_batch_tokens = 1, .max_running = 0}), nibble::Error);
  for (const double reserve : {-0.1, 1.5, std::nan("")}) {
    EXPECT_THROW(Scheduler(h.allocator, h.cache, {.max_batch_tokens = 1, .max_running = 1, .decode_reserve = reserve}),
                 nibble::Error)
        << reserve;
  }
}

TEST(Scheduler, PreemptsTheNewestAndRecomputesIt) {
  // 6 pages = 24 slots. Two requests of 8 prompt tokens, each growing to 8 + 15 = 23 stored tokens:
  // together they need 12 pages, so the newer one must be preempted and resumed later.
  Harness h(6, kPageSize, {.max_batch_tokens = 64, .max_running = 4}, /*prefix_cache=*/false);
  const Request a = make_request(1, iota_tokens(8), 16);
  const Request b = make_request(2, iota_tokens(8, 40), 16);
  h.scheduler.submit(a);
  h.scheduler.submit(b);
  bool saw_b_preempted_while_a_runs = false;
  for (int i = 0; i < 200 && h.finished.size() < 2; ++i) {
    h.step();
    if (h.scheduler.stats().preemptions > 0 && !h.finished.count(1)) {
      saw_b_preempted_while_a_runs |= h.scheduler.num_waiting() == 1 && h.scheduler.is_live(2);
    }
  }
  EXPECT_TRUE(saw_b_preempted_while_a_runs);
  EXPECT_GE(h.scheduler.stats().preemptions, 1);
  EXPECT_EQ(h.outputs[1], generate_alone(a));
  EXPECT_EQ(h.outputs[2], generate_alone(b));
  h.expect_no_request_pages();
  EXPECT_EQ(h.allocator.num_free(), 6);
}

// The two requests above with their growth reserved: after a's prefill (2 of the 6 pages), b's
// first chunk would fit (2 pages) but b needs its prompt and 15 KV tokens to come (6 pages), and a
// its 15 (4 more). Half reserved, 8 each: 4 + 2 pages against 4 free. Either way b waits for a to
// finish instead of being admitted and preempted, and the outputs are the solo runs'.
TEST(Scheduler, DecodeReserveAdmitsOnlyWhatCanGrow) {
  for (const double reserve : {1.0, 0.5}) {
    SCOPED_TRACE(::testing::Message() << "reserve " << reserve);
    Harness h(6, kPageSize, {.max_batch_tokens = 64, .max_running = 4, .decode_reserve = reserve},
              /*prefix_cache=*/false);
    const Request a = make_request(1, iota_tokens(8), 16);
    const Request b = make_request(2, iota_tokens(8, 40), 16);
    h.scheduler.submit(a);
    h.scheduler.submit(b);
    h.step();  // a's prefill; b is held back by the reserve, not by its first chunk's 2 pages
    EXPECT_EQ(h.scheduler.num_running(), 1);
    EXPECT_EQ(h.scheduler.num_waiting(), 1);
    EXPECT_EQ(h.scheduler.queue_block(), QueueBlock::kPages);
    EXPECT_EQ(h.allocator.num_free(), 4);  // a holds 2 pages: b's 2 would have fitted without the reserve
    for (int i = 0; i < 200 && h.finished.size() < 2; ++i) h.step();
    EXPECT_EQ(h.scheduler.stats().preemptions, 0);
    EXPECT_EQ(h.outputs[1], generate_alone(a));
    EXPECT_EQ(h.outputs[2], generate_alone(b));
    h.expect_no_request_pages();
    EXPECT_EQ(h.allocator.num_free(), 6);
  }
}

// step_ahead(), by hand: only with one plan awaiting its update, only in the steady state (every
// running request sampled), never for a request that stops on the draw in flight (max_tokens),
// never at the price of a preemption; the plan it makes feeds each decode from the draw's row.
TEST(Scheduler, StepAheadPlansOnlyTheSteadyState) {
  Harness h(3, kPageSize, {.max_batch_tokens = 4, .max_running = 4}, /*prefix_cache=*/false);
  EXPECT_THROW(h.scheduler.step_ahead(), nibble::Error);  // no plan awaits its update
  const Request a = make_request(1, iota_tokens(6), 3);
  h.scheduler.submit(a);
  StepPlan p1 = h.scheduler.step();  // 4 of 6 prompt tokens: no draw
  EXPECT_TRUE(h.scheduler.step_ahead().empty());
  h.record(h.scheduler.update(h.runner.run(p1)));
  StepPlan p2 = h.scheduler.step();  // the last 2 prompt tokens, and the first draw
  ASSERT_TRUE(p2.sequences[0].samples);
  const std::vector<TokenId> d2 = h.runner.run(p2);
  StepPlan p3 = h.scheduler.step_ahead();  // position 6, fed from row 0 of p2's draws
  ASSERT_EQ(p3.sequences.size(), 1u);
  EXPECT_EQ(p3.sequences[0].first_position, 6);
  EXPECT_EQ(p3.sequences[0].fed_row, 0);
  EXPECT_EQ(p3.sequences[0].input_tokens, std::vector<TokenId>{kProvisionalToken});
  EXPECT_EQ(p3.sequences[0].page_table.size(), 2u);
  EXPECT_EQ(h.scheduler.plans_awaiting_update(), 2);
  EXPECT_THROW(h.scheduler.step_ahead(), nibble::Error);  // two await their update
  EXPECT_THROW(h.scheduler.step(), nibble::Error);
  const std::vector<TokenId> d3 = h.runner.run(p3, d2);
  h.record(h.scheduler.update(d2));
  h.scheduler.check_integrity();
  // The draw of p3 is a's 2nd and max_tokens is 3, so p4 is still planned; after it none would be.
  StepPlan p4 = h.scheduler.step_ahead();
  ASSERT_EQ(p4.sequences.size(), 1u);
  EXPECT_EQ(p4.sequences[0].first_position, 7);
  const std::vector<TokenId> d4 = h.runner.run(p4, d3);
  h.record(h.scheduler.update(d3));
  EXPECT_TRUE(h.scheduler.step_ahead().empty());  // a stops on p4's draw: nothing to plan
  h.record(h.scheduler.update(d4));
  EXPECT_EQ(h.finished.at(1), FinishReason::kLength);
  EXPECT_EQ(h.outputs[1], generate_alone(a));
  h.expect_no_request_pages();

  // A full pool: b continues into its second page's free slot, then needs a third page, which c
  // frees when it finishes on the draw that was in flight.
  Harness full(3, kPageSize, {.max_batch_tokens = 16, .max_running = 4}, /*prefix_cache=*/false);
  const Request b = make_request(2, iota_tokens(7, 20), 4), c = make_request(3, iota_tokens(4, 30), 1);
  full.scheduler.submit(b);
  full.scheduler.submit(c);
  StepPlan p5 = full.scheduler.step();  // b's prompt (2 pages), c's (1 page): the pool is full
  ASSERT_EQ(p5.sequences.size(), 2u);
  const std::vector<TokenId> d5 = full.runner.run(p5);
  StepPlan p6 = full.scheduler.step_ahead();  // b continues at position 7 (its 2nd page has room)
  ASSERT_EQ(p6.sequences.size(), 1u);
  const std::vector<TokenId> d6 = full.runner.run(p6, d5);
  full.record(full.scheduler.update(d5));  // c finishes (max_tokens 1) and frees its page
  StepPlan p7 = full.scheduler.step_ahead();  // position 8: a new page, c's
  ASSERT_EQ(p7.sequences.size(), 1u);
  EXPECT_EQ(p7.sequences[0].page_table.size(), 3u);
  full.record(full.scheduler.update(d6));
  full.record(full.scheduler.update(full.runner.run(p7, d6)));
  while (!full.scheduler.idle()) full.step();
  EXPECT_EQ(full.outputs[2], generate_alone(b));
  EXPECT_EQ(full.outputs[3], generate_alone(c));

  // drop_plans() only once every request has ended.
  h.scheduler.submit(make_request(4, iota_tokens(3), 2));
  h.scheduler.step();
  EXPECT_THROW(h.scheduler.drop_plans(), nibble::Error);
  EXPECT_TRUE(h.scheduler.cancel(4));
  h.scheduler.drop_plans();
  EXPECT_EQ(h.scheduler.plans_awaiting_update(), 0);
  EXPECT_TRUE(h.scheduler.step().empty());
  h.expect_no_request_pages();
}

// A prompt-scoring request (compute_whole_prompt) waiting at the queue's front: its step returns
// host logits, so step_ahead() leaves it to step() instead of planning the decodes ahead of it.
TEST(Scheduler, StepAheadLeavesAPromptScoringRequestToStep) {
  Harness h(16, kPageSize, {.max_batch_tokens = 16, .max_running = 4});
  h.scheduler.submit(make_request(1, iota_tokens(3), 8));
  h.step();  // the prompt, and a draw
  StepPlan p = h.scheduler.step();  // a decode
  Request scoring = make_request(2, iota_tokens(5, 10), 1);
  scoring.compute_whole_prompt = true;
  h.scheduler.submit(scoring);
  EXPECT_TRUE(h.scheduler.step_ahead().empty());
  h.record(h.scheduler.update(h.runner.run(p)));
  StepPlan next = h.scheduler.step();  // admits it beside the decode
  ASSERT_EQ(next.sequences.size(), 2u);
  EXPECT_EQ(next.sequences[1].request_id, 2);
  EXPECT_EQ(next.sequences[1].first_position, 0);  // the whole prompt is computed
  h.record(h.scheduler.update(h.runner.run(next)));
  while (!h.scheduler.idle()) h.step();
  EXPECT_EQ(h.outputs[2], generate_alone(scoring));
}

// A full pool and a decode needing a page: step_ahead() returns nothing rather than preempt.
TEST(Scheduler, StepAheadNeverPreempts) {
  Harness h(2, kPageSize, {.max_batch_tokens = 16, .max_running = 4}, /*prefix_cache=*/false);
  const Request a = make_request(1, iota_tokens(4), 3), b = make_request(2, iota_tokens(4, 20), 3);
  h.scheduler.submit(a);
  h.scheduler.submit(b);
  StepPlan p1 = h.scheduler.step();  // both prompts fill their page: the next positions need pages
  ASSERT_EQ(p1.sequences.size(), 2u);
  const std::vector<TokenId> d1 = h.runner.run(p1);
  EXPECT_TRUE(h.scheduler.step_ahead().empty());
  EXPECT_EQ(h.scheduler.stats().preemptions, 0);
  EXPECT_EQ(h.scheduler.plans_awaiting_update(), 1);
  h.record(h.scheduler.update(d1));
  h.scheduler.check_integrity();
  while (!h.scheduler.idle()) h.step();  // sequential steps preempt and finish both
  EXPECT_EQ(h.outputs[1], generate_alone(a));
  EXPECT_EQ(h.outputs[2], generate_alone(b));
  h.expect_no_request_pages();
}

}  // namespace
}  // namespace nibble::scheduler
