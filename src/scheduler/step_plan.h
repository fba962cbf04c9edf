#pragma once
// StepPlan: what one engine step computes, as plain data. The scheduler builds it once per step;
// the runner turns it into page tables and a backend call, runs the model, samples one token for
// every sequence with `samples`, and hands those back through Scheduler::update().
#include <cstdint>
#include <vector>

#include "scheduler/request.h"

namespace nibble::scheduler {

// The stand-in for a token still being drawn (ScheduledSequence::fed_row), never a real id.
inline constexpr TokenId kProvisionalToken = -1;

struct ScheduledSequence {
  RequestId request_id = 0;
  int64_t first_position = 0;   // position of input_tokens[0]; KV of [0, first_position) is in the pages
  int64_t num_new_tokens = 0;   // >= 1: 1 for a decode, a chunk for a prefill
  int64_t context_tokens = 0;   // first_position + num_new_tokens: KV positions valid after this step
  bool samples = false;         // the last new position's logits are sampled (the sequence caught up)
  std::vector<TokenId> input_tokens;  // [num_new_tokens], token ids at positions first_position...
  // >= 0 in a plan made by Scheduler::step_ahead(): the one input token is the one being drawn for
  // the previous plan's sampling row fed_row (input_tokens holds kProvisionalToken); the runner has
  // the backend read it where it was drawn (backend::SequenceStep::fed_row).
  int32_t fed_row = -1;
  // [ceil(context_tokens / page_size)]: the page-table row; position p lives in page_table[p / page_size]
  // at slot p % page_size. Pages before first_position / page_size may be shared (prefix cache) and
  // are only read; the step writes positions [first_position, context_tokens).
  std::vector<PageId> page_table;
};

struct StepPlan {
  std::vector<ScheduledSequence> sequences;  // running requests oldest first, then admissions
  int64_t num_tokens = 0;                    // sum of num_new_tokens, <= max_batch_tokens
  int64_t num_sampled = 0;                   // sequences with samples: the size update() expects
  bool empty() const { return sequences.empty(); }
};

}  // namespace nibble::scheduler
