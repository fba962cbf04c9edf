// nibble score: the log-probability the model gives each next token of a text (or of a JSON array
// of ids), and the perplexity; optionally the full logits [positions, vocab] as float32 .npy.
// Position i scores token i+1 given tokens 0..i, so n tokens give n-1 scores.
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
#include <memory>

#include "common/error.h"
#include "common/npy.h"
#include "quant/kv_format.h"
#include "runtime/session.h"
#include "kv_flags.h"
#include "kv_scale_flags.h"
#include "tokenizer/tokenizer.h"

namespace {

struct ScoreArgs {
  std::string model_dir;
  std::optional<std::string> text;
  std::optional<std::string> ids_json;
  nibble::cli::KvFlags kv;
  int64_t chunk = 0;
  int64_t page_size = 16;
  std::string logits_out;
  bool json = false;
  std::string device = "cpu";
  std::string weights;  // "" = the device's default (bf16 on cuda)
  int threads = 0;
  nibble::cli::KvScaleFlags kv_scale_flags;
};

std::vector<int32_t> read_ids(const std::string& path) {
  std::ifstream in(path);
  NIBBLE_CHECK(in.good(), "cannot open --ids-json file {}", path);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    NIBBLE_FAIL("{}: not valid JSON: {}", path, e.what());
  }
  NIBBLE_CHECK(j.is_array(), "{}: expected a JSON array of token ids", path);
  std::vector<int32_t> ids;
  for (const auto& v : j) {
    NIBBLE_CHECK(v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() <= INT32_MAX,
                 "{}: element {} is not a non-negative integer token id", path, v.dump());
    ids.push_back(v.get<int32_t>());
  }
  return ids;
}

void run_score(const ScoreArgs& args) {
  using namespace nibble;
  NIBBLE_CHECK(args.text.has_value() != args.ids_json.has_value(), "give exactly one of --text and --ids-json");
  runtime::LoadedModel model = runtime::load_model({.dir = args.model_dir, .device = args.device,
                                                    .num_threads = args.threads,
                                                    .progress = std::nullopt,
                                                    .weights = runtime::parse_weight_precision(args.weights)});
  const runtime::KvChoice kv = cli::resolve(args.kv, model.transformer().kv_geometry().head_dim);
  const quant::KvDtype kv_dtype = kv.dtype;
  const quant::Rotation rotation = kv.rotation;
  const std::vector<int32_t> ids = args.text ? Tokenizer::load(args.model_dir).encode(*args.text) : read_ids(*args.ids_json);
  NIBBLE_CHECK(!ids.empty(), "nothing to score: the input has no tokens");
  const int64_t vocab = model.config().vocab_size;
  for (int32_t id : ids) NIBBLE_CHECK(id < vocab, "token id {} is outside the vocabulary of {}", id, vocab);
  const int64_t n = static_cast<int64_t>(ids.size());
  const int64_t context = model.config().max_position_embeddings;
  NIBBLE_CHECK(n <= context, "the input is {} tokens, longer than the model's context of {} tokens", n, context);

  runtime::Session session(model, {.kv_dtype = kv_dtype, .rotation = rotation, .page_size = args.page_size,
                                   .prefill_chunk = args.chunk, .max_context = n,
                                   .global_scales = cli::kv_global_scales(
                                       args.kv_scale_flags, model.transformer().kv_geometry().num_layers, kv_dtype,
                                       rotation),
                                   .nvfp4_scale_rule = cli::parse_nvfp4_scale_rule(
                                       args.kv_scale_flags.nvfp4_scale_rule)});
  const std::vector<float> logits = session.prefill(ids, {.all_logits = true});  // [n, vocab]

  std::vector<double> logprobs;  // [n - 1]
  for (int64_t i = 0; i + 1 < n; ++i) {
    const float* row = logits.data() + i * vocab;
    double max_logit = row[0];
    for (int64_t v = 1; v < vocab; ++v) max_logit = std::max(max_logit, static_cast<double>(row[v]));
    double sum = 0.0;
    for (int64_t v = 0; v < vocab; ++v) sum += std::exp(static_cast<double>(row[v]) - max_logit);
    logprobs.push_back(static_cast<double>(row[ids[i + 1]]) - max_logit - std::log(sum));
  }
  double nll_sum = 0.0;
  for (double lp : logprobs) nll_sum -= lp;
  const double mean_nll = logprobs.empty() ? 0.0 : nll_sum / static_cast<double>(logprobs.size());
  const double perplexity = std::exp(mean_nll);

  if (!args.logits_out.empty()) {
    const std::vector<int64_t> shape = {n, vocab};
    write_npy(args.logits_out, shape, logits);
  }
  if (args.json) {
    nlohmann::json out = {{"tokens", ids},
                          {"logprobs", logprobs},
                          {"num_scored", logprobs.size()},
                          {"mean_nll", logprobs.empty() ? nlohmann::json(nullptr) : nlohmann::json(mean_nll)},
                          {"perplexity", logprobs.empty() ? nlohmann::json(nullptr) : nlohmann::json(perplexity)},
                          {"kv_dtype", quant::kv_dtype_name(kv_dtype)},
                          {"rotate", rotation == quant::Rotation::kHadamard ? "hadamard" : "none"}};
    fmt::print("{}\n", out.dump());
    return;
  }
  fmt::print("{:>6} {:>8} {:>12}\n", "pos", "next_id", "logprob");
  for (int64_t i = 0; i + 1 < n; ++i) fmt::print("{:>6} {:>8} {:>12.6f}\n", i, ids[i + 1], logprobs[i]);
  if (logprobs.empty()) {
    fmt::print("perplexity: undefined (a single token has no next token to score)\n");
  } else {
    fmt::print("tokens scored: {}  mean NLL: {:.6f}  perplexity: {:.6f}\n", logprobs.size(), mean_nll, perplexity);
  }
}

}  // namespace

void add_score_command(CLI::App& app) {
  auto args = std::make_shared<ScoreArgs>();
  CLI::App* cmd = app.add_subcommand("score", "Log-probability of each next token and the perplexity");
  cmd->add_option("--model", args->model_dir, "Hugging Face model directory")->required();
  cmd->add_option("--text", args->text, "Text to score (tokenized with special tokens, as Hugging Face does)");
  cmd->add_option("--ids-json", args->ids_json, "File with a JSON array of token ids to score");
  nibble::cli::add_kv_flags(cmd, args->kv);
  cmd->add_option("--chunk", args->chunk, "Prefill chunk in tokens (0 = all at once)")->capture_default_str();
  cmd->add_option("--page-size", args->page_size, "Tokens per KV page")->capture_default_str();
  cmd->add_option("--logits-out", args->logits_out, "Write all logits [positions, vocab] as float32 .npy");
  cmd->add_flag("--json", args->json, "One JSON object on stdout");
  cmd->add_option("--device", args->device, "cpu | cuda")->capture_default_str();
  cmd->add_option("--weights", args->weights, "Weight matrices: bf16 | f32 (default: bf16 on cuda; cpu is f32 only)")
      ->check(CLI::IsMember({"bf16", "f32"}));
  cmd->add_option("--threads", args->threads, "CPU threads (0 = one per core)")->capture_default_str();
  nibble::cli::add_kv_scale_flags(cmd, args->kv_scale_flags);
  cmd->callback([args] { run_score(*args); });
}
