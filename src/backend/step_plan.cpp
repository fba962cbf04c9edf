#include "backend/step_plan.h"

#include <algorithm>

#include "common/error.h"

namespace nibble::backend {

StepPlan make_step_plan(std::span<const SequenceStep> seqs, int64_t page_size, int64_t num_pages) {
  NIBBLE_CHECK(page_size > 0, "page size must be positive, got {}", page_size);
  NIBBLE_CHECK(!seqs.empty(), "a step needs at least one sequence");
  StepPlan plan;
  plan.page_size = page_size;
  for (const SequenceStep& s : seqs) {
    plan.max_pages_per_seq = std::max<int64_t>(plan.max_pages_per_seq, static_cast<int64_t>(s.pages.size()));
  }
  const int64_t num_seqs = static_cast<int64_t>(seqs.size());
  plan.page_tables.assign(num_seqs * plan.max_pages_per_seq, -1);
  plan.max_page_id = -1;
  plan.token_begin.push_back(0);
  plan.logit_begin.push_back(0);
  for (int64_t i = 0; i < num_seqs; ++i) {
    const SequenceStep& s = seqs[i];
    const int64_t n = static_cast<int64_t>(s.tokens.size());
    NIBBLE_CHECK(n > 0, "sequence {} of the step has no new tokens", i);
    NIBBLE_CHECK(s.first_position >= 0, "sequence {}: negative first position {}", i, s.first_position);
    NIBBLE_CHECK(s.fed_row < 0 || n == 1, "sequence {}: a fed token (sample row {}) must be its only new token, got {}",
                 i, s.fed_row, n);
    const int64_t context_after = s.first_position + n;
    const int64_t pages_needed = (context_after + page_size - 1) / page_size;
    NIBBLE_CHECK(static_cast<int64_t>(s.pages.size()) >= pages_needed,
                 "sequence {}: {} tokens need {} pages of {}, got {}", i, context_after, pages_needed, page_size,
                 s.pages.size());
    for (size_t p = 0; p < s.pages.size(); ++p) {
      NIBBLE_CHECK(s.pages[p] >= 0 && s.pages[p] < num_pages, "sequence {}: page id {} outside the pool of {} pages",
                   i, s.pages[p], num_pages);
      plan.page_tables[i * plan.max_pages_per_seq + static_cast<int64_t>(p)] = s.pages[p];
      plan.max_page_id = std::max(plan.max_page_id, s.pages[p]);
    }
    plan.seqs.push_back({.first_position = s.first_position,
                         .num_new_tokens = n,
                         .context_after = context_after,
                         .all_logits = s.all_logits});
    const int64_t begin = plan.total_tokens;
    for (int64_t t = 0; t < n; ++t) {
      plan.token_ids.push_back(s.tokens[t]);
      plan.fed_rows.push_back(s.fed_row);
      plan.positions.push_back(static_cast<int32_t>(s.first_position + t));
      plan.row_sequence.push_back(static_cast<int32_t>(i));
    }
    plan.total_tokens += n;
    plan.token_begin.push_back(plan.total_tokens);
    for (int64_t t = s.all_logits ? 0 : n - 1; t < n; ++t) plan.logit_rows.push_back(static_cast<int32_t>(begin + t));
    plan.logit_begin.push_back(static_cast<int64_t>(plan.logit_rows.size()));
  }
  return plan;
}

}  // namespace nibble::backend
