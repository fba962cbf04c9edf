#pragma once
// Passkey accuracy per configuration: the task-independent retrieval summary
// (eval/retrieval_summary.h) over the passkey items.
#include <string>
#include <vector>

#include "eval/passkey.h"
#include "eval/retrieval_summary.h"

namespace nibble::eval {

using PasskeyCell = RetrievalCell;
using ConfigPasskeySummary = ConfigRetrievalSummary;
using PasskeySummary = RetrievalSummary;

// outcomes[i]: configuration i's outcomes, item by item (same order as `items`); names[0] is the
// reference.
PasskeySummary summarize_passkey(const std::vector<PasskeyItem>& items, const std::vector<std::string>& names,
                                 const std::vector<std::vector<PasskeyOutcome>>& outcomes,
                                 const stats::DetectOptions& detect = {});

}  // namespace nibble::eval
