// nibble generate: one request through the serving engine (src/engine, the same Engine, scheduler,
// paged KV pool, sampler, detokenizer and stop conditions as `nibble serve`): tokenize the prompt
// (optionally through the chat template), submit it, stream the generated text to stdout as the
// engine produces it. A tokens/s line ends the run on stderr: prefill is the time to the first
// token (it includes that token's sampling), decode the rate of the tokens after it.
//
// Empty prompt: the tokenizer's encoding of "" is used, i.e. the BOS token alone when the tokenizer
// adds one (Llama 2, stories260k); a tokenizer that adds nothing (Qwen) makes it an error.
// --max-tokens beyond the model's context is cut to what fits ("stopped: model context full").
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>

#include "common/error.h"
#include "engine/engine.h"
#include "quant/kv_format.h"
#include "runtime/loaded_model.h"
#include "kv_flags.h"
#include "kv_scale_flags.h"
#include "sampling/sampler.h"
#include "tokenizer/tokenizer.h"

namespace {

struct GenerateArgs {
  std::string model_dir;
  std::string prompt;
  bool chat = false;
  int64_t max_tokens = 128;
  nibble::cli::KvFlags kv;
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

using Clock = std::chrono::steady_clock;

double seconds_between(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

void write_stdout(const std::string& text) {
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);
}

void run_generate(const GenerateArgs& args) {
  using namespace nibble;
  NIBBLE_CHECK(args.max_tokens >= 0, "--max-tokens must be >= 0, got {}", args.max_tokens);
  NIBBLE_CHECK(args.page_size >= 1, "--page-size must be >= 1, got {}", args.page_size);
  NIBBLE_CHECK(args.chunk >= 0, "--chunk must be >= 0, got {}", args.chunk);
  const sampling::SamplingParams params{.temperature = args.temperature,
                                        .top_k = args.top_k,
                                        .top_p = args.top_p,
                                        .min_p = args.min_p,
                                        .seed = args.seed};
  sampling::validate(params);
  runtime::LoadedModel model = runtime::load_model({.dir = args.model_dir, .device = args.device,
                                                    .num_threads = args.threads,
                                                    .progress = std::nullopt,
                                                    .weights = runtime::parse_weight_precision(args.weights)});
  Tokenizer tokenizer = Tokenizer::load(args.model_dir);
  std::vector<int32_t> prompt;
  if (args.chat) {
    const ChatMessage message{.role = "user", .content = args.prompt};
    prompt = tokenizer.encode(tokenizer.apply_chat_template(std::span(&message, 1)), /*add_special=*/false);
  } else {
    prompt = tokenizer.encode(args.prompt);
  }
  NIBBLE_CHECK(!prompt.empty(), "the prompt is empty and this tokenizer adds no BOS token: nothing to generate from");
  const int64_t context = model.config().max_position_embeddings;
  const int64_t prompt_tokens = static_cast<int64_t>(prompt.size());
  NIBBLE_CHECK(prompt_tokens <= context, "the prompt is {} tokens, longer than the model's context of {} tokens",
               prompt_tokens, context);
  const int64_t max_tokens = std::min(args.max_tokens, context - prompt_tokens);

  const runtime::KvChoice kv = cli::resolve(args.kv, model.transformer().kv_geometry().head_dim);
  const quant::KvDtype kv_dtype = kv.dtype;
  const quant::Rotation rotation = kv.rotation;
  // One request: a pool of exactly its pages, no prefix cache, prefill in --chunk token steps.
  const cache::KvGlobalScales kv_scales = cli::kv_global_scales(
      args.kv_scale_flags, model.transformer().kv_geometry().num_layers, kv_dtype, rotation);
  engine::Engine engine(std::move(model), std::move(tokenizer),
                        {.kv_dtype = kv_dtype,
                         .rotation = rotation,
                         .page_size = args.page_size,
                         .num_pages = std::max<int64_t>((prompt_tokens + max_tokens + args.page_size - 1) / args.page_size, 1),
                         .max_running = 1,
                         .max_waiting = 1,
                         .max_batch_tokens = args.chunk > 0 ? args.chunk : prompt_tokens,
                         .prefix_cache = false,
                         .global_scales = kv_scales,
                         .nvfp4_scale_rule = cli::parse_nvfp4_scale_rule(args.kv_scale_flags.nvfp4_scale_rule)});

  const Clock::time_point start = Clock::now();
  engine::GenerationRequest request;
  request.prompt = prompt;
  request.max_tokens = max_tokens;
  request.sampling = params;
  request.ignore_eos = args.ignore_eos;
  std::shared_ptr<engine::RequestStream> stream = engine.submit(std::move(request));
  std::optional<Clock::time_point> first_token;
  engine::EngineEvent last;
  while (true) {
    std::optional<engine::EngineEvent> event = stream->next(std::chrono::seconds(1));
    if (!event) continue;
    if (!first_token && !event->tokens.empty()) first_token = Clock::now();
    write_stdout(event->text);
    if (event->finish != engine::FinishReason::kNone) {
      last = std::move(*event);
      break;
    }
  }
  const Clock::time_point end = Clock::now();
  write_stdout("\n");
  NIBBLE_CHECK(last.finish != engine::FinishReason::kError, "generation failed: {}", last.error);
  NIBBLE_CHECK(last.finish != engine::FinishReason::kCancelled, "generation was cancelled");

  // An EOS stop reports the EOS token (it prints nothing); the count is of the tokens before it.
  const bool eos = last.finish == engine::FinishReason::kStop;
  const int64_t generated = last.usage.completion_tokens - (eos ? 1 : 0);
  const char* stop_reason = eos                          ? "end of sequence"
                            : max_tokens < args.max_tokens ? "model context full"
                                                         : "max tokens";
  const Clock::time_point decode_start = first_token.value_or(end);
  const double prefill_s = seconds_between(start, decode_start);
  const double decode_s = seconds_between(decode_start, end);
  const int64_t decode_steps = std::max<int64_t>(last.usage.completion_tokens - 1, 0);  // after the first token
  fmt::print(stderr, "prefill: {} tokens in {:.3f} s ({:.1f} tok/s); decode: {} tokens in {:.3f} s ({:.1f} tok/s); "
                     "stopped: {}; kv {}{}\n",
             prompt_tokens, prefill_s, static_cast<double>(prompt_tokens) / std::max(prefill_s, 1e-9), generated,
             decode_s, static_cast<double>(decode_steps) / std::max(decode_s, 1e-9), stop_reason, quant::kv_dtype_name(kv_dtype),
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
  nibble::cli::add_kv_flags(cmd, args->kv);
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
