// nibble eval: several KV-cache configurations scored on the same items in one run — perplexity,
// KL(reference || config) and top-1 agreement on a text corpus; passkey retrieval by length and
// depth, and multi-needle retrieval (N key-value needles, one asked) — with paired statistics (bootstrap CIs, McNemar's exact test, the run's resolving power).
// Writes report.json, report.md, per-token .npy, per-item JSONL and SVG plots into --out
// (src/eval/report.h lists them); prints the Markdown report, or report.json with --json.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <memory>
#include <sstream>

#include "common/error.h"
#include "eval/eval_run.h"
#include "eval/report.h"
#include "kv_scale_flags.h"

namespace {

struct EvalArgs {
  nibble::eval::EvalOptions options;
  std::string tasks = "perplexity,passkey";
  std::string lengths = "256,512";
  std::string depths = "0,0.25,0.5,0.75,1";
  std::string out = "eval_out";
  bool json = false;
  nibble::cli::KvScaleFlags kv_scale_flags;
};

std::vector<std::string> split(const std::string& list) {
  std::vector<std::string> parts;
  std::stringstream in(list);
  for (std::string item; std::getline(in, item, ',');) {
    if (!item.empty()) parts.push_back(item);
  }
  return parts;
}

template <typename T>
std::vector<T> parse_numbers(const std::string& flag, const std::string& list) {
  std::vector<T> values;
  for (const std::string& item : split(list)) {
    size_t used = 0;
    T v{};
    try {
      if constexpr (std::is_integral_v<T>) v = std::stoll(item, &used); else v = std::stod(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    NIBBLE_CHECK(used == item.size() && used > 0, "{}: '{}' is not a number", flag, item);
    values.push_back(v);
  }
  NIBBLE_CHECK(!values.empty(), "{}: give at least one value", flag);
  return values;
}

void run_eval_command(EvalArgs& args) {
  args.options.tasks = split(args.tasks);
  args.options.kv_scales = args.kv_scale_flags.kv_scales;
  args.options.nvfp4_scale_rule = nibble::cli::parse_nvfp4_scale_rule(args.kv_scale_flags.nvfp4_scale_rule);
  args.options.passkey_lengths = parse_numbers<int64_t>("--passkey-lengths", args.lengths);
  args.options.passkey_depths = parse_numbers<double>("--passkey-depths", args.depths);
  const nibble::eval::EvalReport report = nibble::eval::run_eval(args.options);
  const auto written = nibble::eval::write_report_files(args.out, report);
  if (args.json) {
    fmt::print("{}\n", nibble::eval::report_json(report).dump());
    return;
  }
  fmt::print("{}", nibble::eval::report_markdown(report));
  fmt::print("wrote {} files into {}\n", written.size(), args.out);
}

}  // namespace

void add_eval_command(CLI::App& app) {
  auto args = std::make_shared<EvalArgs>();
  nibble::eval::EvalOptions& o = args->options;
  CLI::App* cmd = app.add_subcommand("eval", "Accuracy of KV-cache configurations on the same items, with paired statistics");
  cmd->add_option("--model", o.model_dir, "Hugging Face model directory")->required();
  cmd->add_option("--configs", o.configs, "KV configurations, dtype[+hadamard], comma-separated")->capture_default_str();
  cmd->add_option("--reference", o.reference, "Reference configuration (f32 or bf16)")->capture_default_str();
  cmd->add_option("--tasks", args->tasks, "Any of perplexity,passkey,multineedle")->capture_default_str();
  cmd->add_option("--corpus", o.corpus, "Text file for the perplexity task (passages split at blank lines)");
  cmd->add_option("--context", o.context, "Tokens per perplexity document")->capture_default_str();
  cmd->add_option("--docs", o.documents, "Perplexity documents (0 = all complete windows)")->capture_default_str();
  cmd->add_option("--chunk", o.chunk,
                  "Prefill tokens per step; later chunks attend the quantized cached prefix (1 = every position)")
      ->capture_default_str();
  cmd->add_option("--page-size", o.page_size, "Tokens per KV page")->capture_default_str();
  cmd->add_option("--passkey-lengths", args->lengths, "Passkey and multineedle prompt lengths in tokens")->capture_default_str();
  cmd->add_option("--passkey-depths", args->depths, "Needle depths in [0, 1] (multineedle: the asked needle's)")->capture_default_str();
  cmd->add_option("--samples", o.samples, "Passkey / multineedle items per length x depth")->capture_default_str();
  cmd->add_option("--needles", o.needles, "Needles per multineedle item (1..16)")->capture_default_str();
  cmd->add_option("--max-new-tokens", o.max_new_tokens, "Greedy tokens decoded per retrieval item")->capture_default_str();
  cmd->add_option("--bootstrap", o.bootstrap_resamples, "Bootstrap resamples")->capture_default_str();
  cmd->add_option("--seed", o.seed, "Seed for retrieval items and the bootstrap")->capture_default_str();
  cmd->add_option("--device", o.device, "cpu | cuda")->capture_default_str();
  cmd->add_option("--threads", o.threads, "CPU threads (0 = one per core)")->capture_default_str();
  cmd->add_option("--weights", o.weights, "Weight matrices: bf16 | f32 (default: bf16 on cuda; cpu is f32 only)");
  nibble::cli::add_kv_scale_flags(cmd, args->kv_scale_flags);
  cmd->add_option("--out", args->out, "Output directory for the reports")->capture_default_str();
  cmd->add_flag("--json", args->json, "Print report.json on stdout instead of the Markdown report");
  cmd->callback([args] { run_eval_command(*args); });
}
