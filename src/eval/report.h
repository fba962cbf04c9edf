#pragma once
// Everything one `nibble eval` run measured, and its reports:
//   <out>/report.json             the summary (schema below, "nibble-eval/1")
//   <out>/report.md               the same as Markdown tables, every difference with its CI or p-value
//                                 and whether the run could have resolved it
//   <out>/tokens_<config>.npy     float32 [documents, positions, 3]: log p(next), KL(ref||config), top-1 agree
//   <out>/passkey_items.jsonl     one line per item x configuration: length, depth, key, output, pass
//   <out>/kl_by_position.svg      mean KL per context-position bucket, one line per configuration
//   <out>/passkey_by_depth.svg    retrieval accuracy per needle depth (all lengths), one line per configuration
//   <out>/multineedle_items.jsonl one line per item x configuration: length, depth, needles, asked, output,
//                                 pass, confused
//   <out>/multineedle_by_depth.svg accuracy per depth of the asked needle, one line per configuration
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "eval/multi_needle.h"
#include "eval/passkey_summary.h"
#include "eval/perplexity.h"
#include "eval/perplexity_summary.h"

namespace nibble::eval {

struct SkippedConfig {
  std::string name{};
  std::string reason{};
};

struct EvalReport {
  std::string model{};                   // the model directory as given
  std::string reference{};               // reference configuration name
  std::vector<std::string> configs{};    // configurations that ran, in order
  std::vector<SkippedConfig> skipped{};  // configurations that could not run on this model, with why
  nlohmann::json settings{};           // the options of the run (context, chunk, seed, ...)
  std::vector<std::string> notes{};      // e.g. a task or a passkey length that was skipped, and why
  std::optional<PerplexityRun> perplexity_run{};
  std::optional<PerplexitySummary> perplexity{};
  std::vector<PasskeyItem> passkey_items{};
  std::vector<std::vector<PasskeyOutcome>> passkey_outcomes{};  // [configs incl. reference first][items]
  std::optional<PasskeySummary> passkey{};
  std::vector<MultiNeedleItem> multi_needle_items{};
  std::vector<std::vector<MultiNeedleOutcome>> multi_needle_outcomes{};  // [configs incl. reference first][items]
  std::optional<MultiNeedleSummary> multi_needle{};
};

nlohmann::json report_json(const EvalReport& report);
std::string report_markdown(const EvalReport& report);
// The plots (empty string when the task did not run).
std::string kl_by_position_svg(const EvalReport& report);
std::string passkey_by_depth_svg(const EvalReport& report);
std::string multi_needle_by_depth_svg(const EvalReport& report);
// Accuracy per depth (cells of every length pooled), one line per configuration; any retrieval task.
std::string retrieval_by_depth_svg(const RetrievalSummary& summary, const std::string& title, const std::string& x_label);

// Writes every file listed above into `dir` (created if missing); returns the paths written.
// Throws nibble::Error naming a path that cannot be written.
std::vector<std::filesystem::path> write_report_files(const std::filesystem::path& dir, const EvalReport& report);

}  // namespace nibble::eval
