#include "eval/passkey_summary.h"

#include <cmath>

#include "common/error.h"

namespace nibble::eval {

PasskeySummary summarize_passkey(const std::vector<PasskeyItem>& items, const std::vector<std::string>& names,
                                 const std::vector<std::vector<PasskeyOutcome>>& outcomes,
                                 const stats::DetectOptions& detect) {
  NIBBLE_CHECK(!names.empty() && names.size() == outcomes.size(), "passkey summary: {} names for {} outcome lists",
               names.size(), outcomes.size());
  NIBBLE_CHECK(!items.empty(), "passkey summary: no items");
  PasskeySummary out{.reference = names[0]};
  const std::vector<PasskeyOutcome>& ref = outcomes[0];
  for (size_t c = 0; c < names.size(); ++c) {
    const std::vector<PasskeyOutcome>& o = outcomes[c];
    NIBBLE_CHECK(o.size() == items.size(), "passkey summary: {} has {} outcomes for {} items", names[c], o.size(),
                 items.size());
    ConfigPasskeySummary s{.name = names[c], .items = static_cast<int64_t>(items.size())};
    stats::PairedCounts table;
    for (size_t i = 0; i < items.size(); ++i) {
      s.passed += o[i].pass ? 1 : 0;
      if (s.cells.empty() || s.cells.back().length != items[i].length || s.cells.back().depth != items[i].depth) {
        s.cells.push_back({.length = items[i].length, .depth = items[i].depth});
      }
      s.cells.back().items += 1;
      s.cells.back().passed += o[i].pass ? 1 : 0;
      const bool a = ref[i].pass, b = o[i].pass;
      (a && b ? table.both_pass : a ? table.only_a : b ? table.only_b : table.both_fail) += 1;
    }
    s.accuracy = stats::wilson_interval(s.passed, s.items);
    if (c > 0) {
      s.vs_reference = table;
      s.mcnemar_p = stats::mcnemar_exact_p(table.only_a, table.only_b);
      s.mcnemar_mid_p = stats::mcnemar_mid_p(table.only_a, table.only_b);
      const double diff = static_cast<double>(table.only_b - table.only_a) / static_cast<double>(table.n());
      // With no discordant item observed the plug-in sigma would be 0 ("resolves anything"); use the
      // rule of three instead (95% upper bound of 3/n on the discordance rate), so sigma = sqrt(3)/n.
      stats::PairedCounts for_sigma = table;
      if (for_sigma.discordant() == 0) for_sigma.only_a = 3;
      const double sigma = std::sqrt(static_cast<double>(for_sigma.discordant())) / static_cast<double>(table.n());
      s.resolution = stats::resolve(diff, sigma, detect);
    }
    out.configs.push_back(std::move(s));
  }
  return out;
}

}  // namespace nibble::eval
