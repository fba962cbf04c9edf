#pragma once
// The plan of one forward step, built once on the host and reused by every layer ("plan once, run
// many"): which sequences take part, where their new tokens sit in the activation rows, their
// positions, page tables and which rows produce logits. A backend copies what it needs once per step
// (Backend::plan); the ops of every layer then read the planned copy.
//
// Activations of a step are [total_tokens, features]: sequence s owns rows
// [token_begin[s], token_begin[s + 1]), its new tokens in order.
#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

namespace nibble::backend {

// How a sequence's new tokens attend in this step (DESIGN.md, "the three attention paths").
enum class AttentionPath {
  kPrefill,  // no cached prefix: attention over the chunk's own full-precision K/V only
  kDecode,   // one new token after a cached prefix: every key/value read from the quantized pages
             // (the new token's own K/V too, written just before)
  kExtend,   // a chunk after a cached prefix: the prefix from the quantized pages, the chunk's own
             // K/V at full precision, causal inside the chunk
};

struct SequencePlan {
  int64_t first_position = 0;  // position of the first new token == tokens already in the cache
  int64_t num_new_tokens = 0;  // >= 1
  int64_t context_after = 0;   // first_position + num_new_tokens: cached tokens after the step
  bool all_logits = false;     // logits for every new token (scoring), else only for the last one

  AttentionPath path() const {
    if (first_position == 0) return AttentionPath::kPrefill;
    return num_new_tokens == 1 ? AttentionPath::kDecode : AttentionPath::kExtend;
  }
};

// What the caller knows about one sequence in a step: its new tokens and its pages.
struct SequenceStep {
  int64_t first_position = 0;        // tokens already cached for this sequence
  std::span<const int32_t> tokens;   // [num_new_tokens] ids of the new tokens
  std::span<const int32_t> pages;    // the sequence's page ids, covering first_position + tokens
  bool all_logits = false;
  // >= 0: the sequence's one new token is the id the backend's last Backend::sample_launch() drew
  // for logits row fed_row (tokens[0] is a placeholder and not read). The backend reads it where
  // the draw left it (on the device for CUDA), so the step can be launched before that draw is
  // back on the host (the engine's overlap of host work with the device).
  int32_t fed_row = -1;
};

struct StepPlan {
  int64_t page_size = 0;
  int64_t max_pages_per_seq = 0;
  int64_t total_tokens = 0;
  std::vector<SequencePlan> seqs;      // [num_seqs]
  std::vector<int32_t> page_tables;    // [num_seqs][max_pages_per_seq]; token t of sequence s lives in
                                       // page page_tables[s * max_pages_per_seq + t / page_size],
                                       // slot t % page_size; unused entries -1
  std::vector<int64_t> token_begin;    // [num_seqs + 1] first activation row of each sequence
  std::vector<int32_t> token_ids;      // [total_tokens]; a fed token's entry is its placeholder
  std::vector<int32_t> fed_rows;       // [total_tokens] SequenceStep::fed_row of each row's token, or
                                       // -1 (every entry -1 when no token is fed; see has_fed_tokens)
  std::vector<int32_t> positions;      // [total_tokens] position of each row in its sequence
  std::vector<int32_t> row_sequence;   // [total_tokens] the sequence each row belongs to
  std::vector<int32_t> logit_rows;     // [num_logit_rows] activation rows whose logits are returned,
                                       // in sequence order
  std::vector<int64_t> logit_begin;    // [num_seqs + 1] each sequence's first entry in logit_rows
  // The largest page id in page_tables (-1: none), set by make_step_plan, so that the ops check the
  // plan against the pool in constant time; kMaxPageUnknown in a plan built by hand, whose page ids
  // validate_cache then checks one by one.
  static constexpr int32_t kMaxPageUnknown = INT32_MIN;
  int32_t max_page_id = kMaxPageUnknown;

  int64_t num_seqs() const { return static_cast<int64_t>(seqs.size()); }
  int64_t num_logit_rows() const { return static_cast<int64_t>(logit_rows.size()); }
  // Every activation row is a logit row, in order (decode steps, prompts scored whole): gathering
  // the logit rows is then a copy of all of them.
  bool logit_rows_are_all_rows() const {
    if (num_logit_rows() != total_tokens) return false;
    for (int64_t i = 0; i < total_tokens; ++i) {
      if (logit_rows[static_cast<size_t>(i)] != i) return false;
    }
    return true;
  }
  bool has_fed_tokens() const {
    return std::any_of(fed_rows.begin(), fed_rows.end(), [](int32_t r) { return r >= 0; });
  }
  const int32_t* page_table(int64_t seq) const { return page_tables.data() + seq * max_pages_per_seq; }
  // The page holding position `pos` of sequence `seq`.
  int32_t page_of(int64_t seq, int64_t pos) const { return page_table(seq)[pos / page_size]; }
};

// Builds and validates a plan. Throws nibble::Error when a sequence has no new tokens, a negative
// first position, a fed token (fed_row >= 0) with more than one new token, or too few pages for first_position + num_new_tokens tokens, or when page_size
// is not positive. num_pages (> 0) bounds every page id.
StepPlan make_step_plan(std::span<const SequenceStep> seqs, int64_t page_size, int64_t num_pages);

}  // namespace nibble::backend
