// nibble generate: load a model, tokenize a prompt (optionally through the chat template), prefill
// it through the paged KV cache and stream the sampled continuation to stdout. A tokens/s line
// (prefill and decode separately) ends the run on stderr.
//
// Empty prompt: the tokenizer's encoding of "" is used, i.e. the BOS token alone when the tokenizer
// adds one (Llama 2, stories260k); a tokenizer that adds nothing (Qwen) makes it an error.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <memory>

#include "common/error.h"
#include "quant/kv_format.h"
#include "runtime/session.h"
#include "kv_scale_flags.h"
#include "sampling/sampler.h"
#include "tokenizer/tokenizer.h"

namespace {

struct GenerateArgs {
  std::string model_dir;
  std::string prompt;
  bool chat = false;
  int64_t max_tokens = 128;
  std::string kv_dtype = "f32";
  std::string rotate = "none";
  float temperature = 0.0f;
  int64_t top_k = 0;
  float top_p = 1.0f;
  float min_p = 0.0f;
  uint64_t seed = 0;
  int64_t page_size = 16;
  int64_t chunk = 512;
  std::string device = "cpu";
  std::string weights;  // "" = the device's default (bf16 on cuda)
  int threads = 0;
  nibble::cli::KvScaleFlags kv_scale_flags;
  bool ignore_eos = false;
};

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void run_generate(const GenerateArgs& args) {
  using namespace nibble;
  NIBBLE_CHECK(args.max_tokens >= 0, "--max-tokens must be >= 0, got {}", args.max_tokens);
  const sampling::SamplingParams params{.temperature = args.temperature,
                                        .top_k = args.top_k,
                                        .top_p = args.top_p,
                                        .min_p = args.min_p,
                                        .seed = args.seed};
  sampling::validate(params);
  const quant::KvDtype kv_dtype = quant::parse_kv_dtype(args.kv_dtype);
  const quant::Rotation rotation = quant::parse_rotation(args.rotate);

  runtime::LoadedModel model = runtime::load_model({.dir = args.model_dir, .device = args.device,
                                                    .num_threads = args.threads,
                                                    .progress = std::nullopt,
                                                    .weights = runtime::parse_weight_precision(args.weights)});
  const Tokenizer tokenizer = Tokenizer::load(args.model_dir);
  std::vector<int32_t> prompt;
  if (args.chat) {
    const ChatMessage message{.role = "user", .content = args.prompt};
    prompt = tokenizer.encode(tokenizer.apply_chat_template(std::span(&message, 1)), /*add_special=*/false);
  } else {
    prompt = tokenizer.encode(args.prompt);
  }
  NIBBLE_CHECK(!prompt.empty(), "the prompt is empty and this tokenizer adds no BOS token: nothing to generate from");
  const int64_t context = model.config().max_position_embeddings;
  NIBBLE_CHECK(static_cast<int64_t>(prompt.size()) <= context,
               "the prompt is {} tokens, longer than the model's context of {} tokens", prompt.size(), context);

  runtime::Session session(model, {.kv_dtype = kv_dtype,
                                   .rotation = rotation,
                                   .page_size = args.page_size,
                                   .prefill_chunk = args.chunk,
                                   .max_context = std::min<int64_t>(context, static_cast<int64_t>(prompt.size()) +
                                                                                 std::max<int64_t>(args.max_tokens, 1)),
                                   .global_scales = cli::kv_global_scales(
                                       args.kv_scale_flags, model.transformer().kv_geometry().num_layers, kv_dtype,
                                       rotation),
                                   .nvfp4_scale_rule = cli::parse_nvfp4_scale_rule(
                                       args.kv_scale_flags.nvfp4_scale_rule)});
  sampling::Sampler sampler(params);
  StreamingDetokenizer detok(tokenizer, /*skip_special=*/true);
  const std::vector<int64_t>& eos = model.config().eos_token_ids;

  auto start = std::chrono::steady_clock::now();
  std::vector<float> logits = session.prefill(prompt);
  const double prefill_s = seconds_since(start);
  start = std::chrono::steady_clock::now();
  int64_t generated = 0;
  const char* stop_reason = "max tokens";
  for (; generated < args.max_tokens; ++generated) {
    const int32_t next = sampler.sample(logits);
    if (!args.ignore_eos && std::find(eos.begin(), eos.end(), next) != eos.end()) {
      stop_reason = "end of sequence";
      break;
    }
    const std::string text = detok.push(next);
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
    if (session.length() >= session.max_context()) {
      ++generated;
      stop_reason = "model context full";
      break;
    }
    if (generated + 1 < args.max_tokens) logits = session.decode(next);
  }
  const std::string tail = detok.finish();
  std::fwrite(tail.data(), 1, tail.size(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
  const double decode_s = seconds_since(start);
  const double prompt_tokens = static_cast<double>(prompt.size());
  fmt::print(stderr, "prefill: {} tokens in {:.3f} s ({:.1f} tok/s); decode: {} tokens in {:.3f} s ({:.1f} tok/s); "
                     "stopped: {}; kv {}{}\n",
             prompt.size(), prefill_s, prompt_tokens / std::max(prefill_s, 1e-9), generated, decode_s,
             static_cast<double>(generated) / std::max(decode_s, 1e-9), stop_reason, args.kv_dtype,
             rotation == quant::Rotation::kHadamard ? " + hadamard" : "");
}

}  // namespace

void add_generate_command(CLI::App& app) {
  auto args = std::make_shared<GenerateArgs>();
  CLI::App* cmd = app.add_subcommand("generate", "Generate text from a prompt (streams to stdout)");
  cmd->add_option("--model", args->model_dir, "Hugging Face model directory")->required();
  cmd->add_option("--prompt", args->prompt, "Prompt text (\"\" = the BOS token alone, if the tokenizer adds one)")
      ->required();
  cmd->add_flag("--chat", args->chat, "Wrap the prompt as one user message in the model's chat template");
  cmd->add_option("--max-tokens", args->max_tokens, "Tokens to generate at most")->capture_default_str();
  cmd->add_option("--kv-dtype", args->kv_dtype, "KV cache format: f32 bf16 fp8 nvfp4 k8v4")->capture_default_str();
  cmd->add_option("--rotate", args->rotate, "KV rotation: none | hadamard")->capture_default_str();
  cmd->add_option("--temperature", args->temperature, "0 = greedy")->capture_default_str();
  cmd->add_option("--top-k", args->top_k, "Keep the k most probable tokens (0 = off)")->capture_default_str();
  cmd->add_option("--top-p", args->top_p, "Nucleus mass (1 = off)")->capture_default_str();
  cmd->add_option("--min-p", args->min_p, "Drop tokens below min-p × the top probability (0 = off)")
      ->capture_default_str();
  cmd->add_option("--seed", args->seed, "Sampling seed")->capture_default_str();
  cmd->add_option("--page-size", args->page_size, "Tokens per KV page")->capture_default_str();
  cmd->add_option("--chunk", args->chunk, "Prefill chunk in tokens (0 = whole prompt)")->capture_default_str();
  cmd->add_option("--device", args->device, "cpu | cuda")->capture_default_str();
  cmd->add_option("--weights", args->weights, "Weight matrices: bf16 | f32 (default: bf16 on cuda; cpu is f32 only)")
      ->check(CLI::IsMember({"bf16", "f32"}));
  cmd->add_option("--threads", args->threads, "CPU threads (0 = one per core)")->capture_default_str();
  nibble::cli::add_kv_scale_flags(cmd, args->kv_scale_flags);
  cmd->add_flag("--ignore-eos", args->ignore_eos, "Do not stop at the end-of-sequence token");
  cmd->callback([args] { run_generate(*args); });
}
