#include "eval/retrieval_summary.h"

#include <cmath>

#include "common/error.h"

namespace nibble::eval {

RetrievalSummary summarize_retrieval(const std::vector<RetrievalItemKey>& items, const std::vector<std::string>& names,
                                     const std::vector<std::vector<bool>>& passes, const std::string& task,
                                     const stats::DetectOptions& detect) {
  NIBBLE_CHECK(!names.empty() && names.size() == passes.size(), "{} summary: {} names for {} outcome lists", task,
               names.size(), passes.size());
  NIBBLE_CHECK(!items.empty(), "{} summary: no items", task);
  RetrievalSummary out{.reference = names[0]};
  const std::vector<bool>& ref = passes[0];
  for (size_t c = 0; c < names.size(); ++c) {
    const std::vector<bool>& o = passes[c];
    NIBBLE_CHECK(o.size() == items.size(), "{} summary: {} has {} outcomes for {} items", task, names[c], o.size(),
                 items.size());
    ConfigRetrievalSummary s{.name = names[c], .items = static_cast<int64_t>(items.size())};
    stats::PairedCounts table;
    for (size_t i = 0; i < items.size(); ++i) {
      s.passed += o[i] ? 1 : 0;
      if (s.cells.empty() || s.cells.back().length != items[i].length || s.cells.back().depth != items[i].depth) {
        s.cells.push_back({.length = items[i].length, .depth = items[i].depth});
      }
      s.cells.back().items += 1;
      s.cells.back().passed += o[i] ? 1 : 0;
      const bool a = ref[i], b = o[i];
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
