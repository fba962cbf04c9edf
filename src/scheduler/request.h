#pragma once
// What a client asks the scheduler for, and what it hears back after each step.
#include <any>
#include <cstdint>
#include <vector>

#include "cache/radix_cache.h"

namespace nibble::scheduler {

using cache::PageId;
using cache::TokenId;
using RequestId = uint64_t;

struct Request {
  RequestId id = 0;                // unique among live requests
  std::vector<TokenId> prompt;     // >= 1 token
  int64_t max_tokens = 0;          // tokens to generate, >= 0 (0: prefill only, e.g. prompt scoring)
  std::vector<TokenId> stop_ids;   // EOS ids: sampling one finishes the request (it is reported)
  std::any sampling;               // carried for the runner, never read by the scheduler
  bool compute_whole_prompt = false;  // no prefix-cache match: every prompt position is computed (scoring)
};

enum class FinishReason : uint8_t {
  kNone,       // still running
  kStop,       // a stop id was sampled, or finish() was called (stop string matched by the caller)
  kLength,     // max_tokens generated
  kCancelled,  // cancel(): the client went away
};

const char* finish_reason_name(FinishReason reason);

// One per sampled sequence of the last step, in plan order.
struct TokenEvent {
  RequestId id = 0;
  TokenId token = -1;  // the generated token; -1 when max_tokens == 0 (nothing is generated)
  FinishReason finish = FinishReason::kNone;
  int64_t generated_tokens = 0;      // generated so far, this token included
  int64_t cached_prompt_tokens = 0;  // prompt tokens served by the prefix cache at first admission
};

}  // namespace nibble::scheduler
