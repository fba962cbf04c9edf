// Fed tokens (backend/step_plan.h, SequenceStep::fed_row) on the CPU backend: the split sampling
// (Backend::sample_launch / sample_wait) and plan() reading the launched draws, as the engine's
// overlapped steps use them; the checks of misuse. (The CUDA backend's side:
// tests/backend/cuda_ops/test_cuda_sampling.cpp, FedTokensReadTheDrawsOnTheDevice.)
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "backend/backend.h"
#include "backend/step_plan.h"
#include "common/error.h"

namespace nibble::backend {
namespace {

// Logits rows whose greedy draws are `ids` (row r peaks at ids[r]).
std::vector<float> peaked_rows(const std::vector<int32_t>& ids, int64_t vocab) {
  std::vector<float> logits(ids.size() * static_cast<size_t>(vocab), 0.0f);
  for (size_t r = 0; r < ids.size(); ++r) logits[r * static_cast<size_t>(vocab) + static_cast<size_t>(ids[r])] = 5.0f;
  return logits;
}

// A step of three one-token sequences at position 3 (one page each): the first two fed from
// sample rows `fed_a` and `fed_b`, the third an explicit token 11.
StepPlan fed_plan(int32_t fed_a, int32_t fed_b) {
  static const int32_t placeholder = -1, explicit_token = 11;
  static const int32_t pages[3] = {0, 1, 2};
  const std::vector<SequenceStep> steps = {
      {.first_position = 3, .tokens = {&placeholder, 1}, .pages = {&pages[0], 1}, .fed_row = fed_a},
      {.first_position = 3, .tokens = {&placeholder, 1}, .pages = {&pages[1], 1}, .fed_row = fed_b},
      {.first_position = 3, .tokens = {&explicit_token, 1}, .pages = {&pages[2], 1}}};
  return make_step_plan(steps, 16, 3);
}

// Fed tokens (SequenceStep::fed_row) on the CPU backend: plan() reads the last sample_launch's draws;
// sample_wait() returns them; misuse is rejected.
TEST(FedTokens, PlanReadsTheLastLaunchedDraws) {
  const std::unique_ptr<Backend> cpu = make_backend({.device = "cpu", .num_threads = 1});
  std::vector<SampledToken> none(1);
  EXPECT_THROW(cpu->sample_wait(none), nibble::Error);  // nothing launched
  EXPECT_THROW(cpu->plan(fed_plan(0, 1)), nibble::Error);
  std::vector<float> logits = peaked_rows({7, 3}, 16);
  cpu->sample_launch({logits.data(), 2, 16}, std::vector<SampleRequest>(2));
  const std::unique_ptr<PlannedStep> step = cpu->plan(fed_plan(1, 0));
  EXPECT_EQ(step->host().token_ids, (std::vector<int32_t>{3, 7, 11}));
  EXPECT_THROW(cpu->plan(fed_plan(2, 0)), nibble::Error);  // row 2 was not drawn
  std::vector<SampledToken> drawn(2);
  cpu->sample_wait(drawn);
  EXPECT_EQ(drawn[0].id, 7);
  EXPECT_EQ(drawn[1].id, 3);
  std::vector<SampledToken> wrong(3);
  EXPECT_THROW(cpu->sample_wait(wrong), nibble::Error);
  // A fed token must be its sequence's only new token.
  const int32_t two[2] = {1, 2}, page = 0;
  const SequenceStep bad{.first_position = 3, .tokens = {two, 2}, .pages = {&page, 1}, .fed_row = 0};
  EXPECT_THROW(make_step_plan({&bad, 1}, 16, 1), nibble::Error);
}

}  // namespace
}  // namespace nibble::backend
