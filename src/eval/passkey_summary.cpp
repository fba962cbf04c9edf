#include "eval/passkey_summary.h"

namespace nibble::eval {

PasskeySummary summarize_passkey(const std::vector<PasskeyItem>& items, const std::vector<std::string>& names,
                                 const std::vector<std::vector<PasskeyOutcome>>& outcomes,
                                 const stats::DetectOptions& detect) {
  std::vector<RetrievalItemKey> keys;
  for (const PasskeyItem& item : items) keys.push_back({.length = item.length, .depth = item.depth});
  std::vector<std::vector<bool>> passes;
  for (const auto& list : outcomes) {
    std::vector<bool>& p = passes.emplace_back();
    for (const PasskeyOutcome& o : list) p.push_back(o.pass);
  }
  return summarize_retrieval(keys, names, passes, "passkey", detect);
}

}  // namespace nibble::eval
