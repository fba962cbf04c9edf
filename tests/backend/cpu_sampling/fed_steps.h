#pragma once
// What the fed-token tests of both backends share (fed_tokens_test.cpp, and
// tests/backend/cuda_ops/test_cuda_sampling.cpp): logits whose greedy draws are known, and a step
// whose tokens are fed from them.
#include <cstdint>
#include <vector>

#include "backend/step_plan.h"

namespace nibble::backend::test {

// Logits rows whose greedy draws are `ids` (row r peaks at ids[r]).
inline std::vector<float> peaked_rows(const std::vector<int32_t>& ids, int64_t vocab) {
  std::vector<float> logits(ids.size() * static_cast<size_t>(vocab), 0.0f);
  for (size_t r = 0; r < ids.size(); ++r) logits[r * static_cast<size_t>(vocab) + static_cast<size_t>(ids[r])] = 5.0f;
  return logits;
}

// A step of three one-token sequences at position 3 (one page each): the first two fed from
// sample rows `fed_a` and `fed_b`, the third an explicit token 11.
inline StepPlan fed_plan(int32_t fed_a, int32_t fed_b) {
  static const int32_t placeholder = -1, explicit_token = 11;
  static const int32_t pages[3] = {0, 1, 2};
  const std::vector<SequenceStep> steps = {
      {.first_position = 3, .tokens = {&placeholder, 1}, .pages = {&pages[0], 1}, .fed_row = fed_a},
      {.first_position = 3, .tokens = {&placeholder, 1}, .pages = {&pages[1], 1}, .fed_row = fed_b},
      {.first_position = 3, .tokens = {&explicit_token, 1}, .pages = {&pages[2], 1}}};
  return make_step_plan(steps, 16, 3);
}

}  // namespace nibble::backend::test
