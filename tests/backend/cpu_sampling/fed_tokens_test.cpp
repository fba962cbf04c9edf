// Fed tokens (backend/step_plan.h, SequenceStep::fed_row) on the CPU backend: the split sampling
// (Backend::sample_launch / sample_wait) and plan() reading the launched draws, as the engine's
// overlapped steps use them; the checks of misuse. (The CUDA backend's side:
// tests/backend/cuda_ops/test_cuda_sampling.cpp, FedTokensReadTheDrawsOnTheDevice.)
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "backend/backend.h"
#include "backend/step_plan.h"
#include "backend/cpu_sampling/fed_steps.h"
#include "common/error.h"

namespace nibble::backend {
namespace {

using test::fed_plan;
using test::peaked_rows;

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
