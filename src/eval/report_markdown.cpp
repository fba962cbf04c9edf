// report.md: the run's settings, the skipped configurations, and one table per task. Every
// difference against the reference comes with its interval or p-value and a verdict on whether
// this run could have resolved a difference of that size.
#include <fmt/format.h>

#include "eval/report.h"

namespace nibble::eval {
namespace {

std::string verdict(const std::optional<stats::Resolution>& r) {
  if (!r) return "n/a (needs >= 2 items)";
  if (r->resolvable) return fmt::format("yes: {:.2f} sigma", r->z_score);
  return fmt::format("no: below MDD {:.4g} ({:.2f} sigma)", r->minimum_detectable, std::isfinite(r->z_score) ? r->z_score : 0.0);
}

void perplexity_section(std::string& md, const PerplexitySummary& p) {
  md += fmt::format("## Perplexity, KL and top-1 agreement\n\n{} documents x {} scored positions; reference {} "
                    "(mean NLL {:.5f}, perplexity {:.4f}). Intervals: 95% paired bootstrap over documents. "
                    "MDD: the smallest Δ NLL this run resolves (1.96 x the paired sigma sd(Δ_doc)/sqrt(docs)).\n\n",
                    p.documents, p.positions, p.reference, p.reference_mean_nll, p.reference_perplexity);
  md += "| config | perplexity | Δ NLL vs ref [95% CI] | resolvable? | mean KL [95% CI] | max KL | top-1 agree [95% CI] |\n";
  md += "|---|---|---|---|---|---|---|\n";
  for (const ConfigPerplexitySummary& c : p.configs) {
    md += fmt::format("| {} | {:.4f} | {:+.3e} [{:+.3e}, {:+.3e}] | {} | {:.3e} [{:.3e}, {:.3e}] | {:.3e} | {:.4f} [{:.4f}, {:.4f}] |\n",
                      c.name, c.perplexity, c.delta_nll.estimate, c.delta_nll.lower, c.delta_nll.upper,
                      verdict(c.delta_nll_resolution), c.mean_kl, c.kl.lower, c.kl.upper, c.max_kl, c.top1_agreement,
                      c.top1_agreement_ci.lower, c.top1_agreement_ci.upper);
  }
  if (!p.configs.empty()) {
    md += "\n### Mean KL by context position\n\n| positions |";
    for (const ConfigPerplexitySummary& c : p.configs) md += fmt::format(" {} |", c.name);
    md += "\n|---|";
    for (size_t i = 0; i < p.configs.size(); ++i) md += "---|";
    md += "\n";
    for (size_t b = 0; b < p.configs[0].by_position.size(); ++b) {
      md += fmt::format("| {}-{} |", p.configs[0].by_position[b].begin, p.configs[0].by_position[b].end - 1);
      for (const ConfigPerplexitySummary& c : p.configs) md += fmt::format(" {:.3e} |", c.by_position[b].mean_kl);
      md += "\n";
    }
  }
  md += "\n";
}

// One retrieval task's section. `confusions` (per config, may be empty) adds a column of items
// answered with another needle's value.
void retrieval_section(std::string& md, const std::string& title, const RetrievalSummary& p, size_t items,
                       const std::vector<int64_t>& confusions = {}) {
  md += fmt::format("## {}\n\n{} items per configuration (the same items for each). Accuracy with a "
                    "95% Wilson interval; McNemar's exact test on the discordant items against {}; MDD: the smallest "
                    "accuracy difference this paired run resolves (1.96 x sqrt(b+c)/n).\n\n",
                    title, items, p.reference);
  const bool confusion = !confusions.empty();
  md += fmt::format("| config | passed | accuracy [95% CI] |{} only ref / only config | McNemar p (mid-p) | resolvable? |\n",
                    confusion ? " other needle's value |" : "");
  md += confusion ? "|---|---|---|---|---|---|---|\n" : "|---|---|---|---|---|---|\n";
  for (size_t k = 0; k < p.configs.size(); ++k) {
    const ConfigRetrievalSummary& c = p.configs[k];
    const std::string confused = confusion ? fmt::format(" {} |", confusions.at(k)) : "";
    if (!c.vs_reference) {
      md += fmt::format("| {} (reference) | {}/{} | {:.3f} [{:.3f}, {:.3f}] |{} - | - | - |\n", c.name, c.passed,
                        c.items, c.accuracy.estimate, c.accuracy.lower, c.accuracy.upper, confused);
      continue;
    }
    md += fmt::format("| {} | {}/{} | {:.3f} [{:.3f}, {:.3f}] |{} {} / {} | {:.4g} ({:.4g}) | {} |\n", c.name,
                      c.passed, c.items, c.accuracy.estimate, c.accuracy.lower, c.accuracy.upper, confused,
                      c.vs_reference->only_a, c.vs_reference->only_b, c.mcnemar_p, c.mcnemar_mid_p,
                      verdict(c.resolution));
  }
  if (!p.configs.empty()) {
    md += "\n### Accuracy by length x depth\n\n| length | depth |";
    for (const ConfigRetrievalSummary& c : p.configs) md += fmt::format(" {} |", c.name);
    md += "\n|---|---|";
    for (size_t i = 0; i < p.configs.size(); ++i) md += "---|";
    md += "\n";
    for (size_t k = 0; k < p.configs[0].cells.size(); ++k) {
      md += fmt::format("| {} | {:.2f} |", p.configs[0].cells[k].length, p.configs[0].cells[k].depth);
      for (const ConfigRetrievalSummary& c : p.configs) md += fmt::format(" {}/{} |", c.cells[k].passed, c.cells[k].items);
      md += "\n";
    }
  }
  md += "\n";
}

}  // namespace

std::string report_markdown(const EvalReport& r) {
  std::string md = fmt::format("# nibble eval: {}\n\nReference KV configuration: **{}**. Configurations run: {}.\n\n",
                               r.model, r.reference, fmt::join(r.configs, ", "));
  md += fmt::format("Settings: `{}`\n\n", r.settings.dump());
  if (!r.skipped.empty()) {
    md += "Skipped configurations:\n\n";
    for (const SkippedConfig& s : r.skipped) md += fmt::format("- **{}**: {}\n", s.name, s.reason);
    md += "\n";
  }
  if (!r.notes.empty()) {
    md += "Notes:\n\n";
    for (const std::string& n : r.notes) md += fmt::format("- {}\n", n);
    md += "\n";
  }
  if (r.perplexity) perplexity_section(md, *r.perplexity);
  if (r.passkey) retrieval_section(md, "Passkey retrieval", *r.passkey, r.passkey_items.size());
  if (r.multi_needle) {
    const size_t needles = r.multi_needle_items.empty() ? 0 : r.multi_needle_items[0].needles.size();
    retrieval_section(md, fmt::format("Multi-needle retrieval ({} needles; depth = the asked needle's)", needles),
                      r.multi_needle->retrieval, r.multi_needle_items.size(), r.multi_needle->confusions);
  }
  return md;
}

}  // namespace nibble::eval
