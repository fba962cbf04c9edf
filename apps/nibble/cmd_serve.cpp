// nibble serve: an OpenAI-compatible HTTP server over the engine (src/engine, src/server).
//
// KV pool size, in order of precedence:
//   --kv-pages N        exactly N pages;
//   --mem-fraction F    the memory planner's pool (`nibble plan`'s figures): F × device memory
//                       (--device-memory, default: the backend's memory, Backend::memory_bytes:
//                       this machine's RAM on cpu, the GPU's on cuda) minus the weights;
//   neither             room for --max-running requests of the model's full context, at most what
//                       --mem-fraction 0.9 would give (a 128K-context model's 64 full contexts
//                       would not fit any GPU).
// A pool that does not fit the memory beside the weights (the planner's estimate) is refused, naming
// the sizes, before anything is allocated.
// SIGINT/SIGTERM (server/http_server.h has the sequence): new requests get 503; in-flight requests
// may finish for --shutdown-grace-s, then are cancelled (a stream still gets a last chunk with
// finish_reason "abort" and [DONE]); the listener stops once every response is written; exit 0.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cerrno>
#include <csignal>
#include <filesystem>
#include <memory>
#include <optional>
#include <thread>
#include <unistd.h>

#include "cache/kv_accounting.h"
#include "cache/planner.h"
#include "common/error.h"
#include "common/units.h"
#include "engine/engine.h"
#include "quant/kv_format.h"
#include "runtime/forward_step.h"
#include "runtime/loaded_model.h"
#include "server/http_server.h"
#include "tokenizer/tokenizer.h"
#include "kv_flags.h"
#include "kv_scale_flags.h"

namespace {

int g_signal_pipe[2] = {-1, -1};  // [read end, write end]

void on_signal(int signal) {
  const unsigned char byte = static_cast<unsigned char>(signal);
  (void)!write(g_signal_pipe[1], &byte, 1);  // async-signal-safe
}

struct ServeArgs {
  std::string model_dir;
  std::string served_model_name;
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string device = "cpu";
  std::string weights;  // "" = the device's default (bf16 on cuda)
  int threads = 0;
  nibble::cli::KvFlags kv;
  std::optional<double> mem_fraction;
  std::optional<std::string> device_memory;
  int64_t kv_pages = 0;
  int64_t page_size = 16;
  int64_t max_running = 64;
  int64_t max_waiting = 1024;
  std::optional<int64_t> max_batch_tokens;  // default: default_max_batch_tokens(device)
  double decode_reserve = 0.0;
  bool no_prefix_cache = false;
  bool no_overlap = false;
  int64_t max_body_bytes = 8 << 20;
  int http_threads = 256;
  double shutdown_grace_s = 10.0;
  nibble::cli::KvScaleFlags kv_scale_flags;
};

// Tokens per engine step when --max-batch-tokens is not given. On cuda a bigger prefill chunk pays
// for its weight reads and fills the GEMMs: 4 prompts of 32K on an H200 (Llama-3-8B shape, nvfp4 KV;
// PERFORMANCE.md, thirty-sixth round) prefilled at 11.7K / 13.5K / 14.3K tokens/s with 512 / 2048 /
// 8192, mean time to first token 5.97 / 5.04 / 4.72 s, while the decode steps that carry a chunk
// (the inter-token p99) took 53 / 168 / 443 ms. 2048 takes most of the gain for a third of 8192's
// stall. On cpu a step's time grows with its tokens alone, so smaller chunks interleave better.
int64_t default_max_batch_tokens(const std::string& device) { return device == "cuda" ? 2048 : 512; }

struct PoolSize {
  int64_t pages = 0;
  int64_t full_context_requests = 0;  // requests of the model's whole context that fit
  std::string source;
};

constexpr double kDefaultMemFraction = 0.9;  // the cap on the pool sized by --max-running

PoolSize size_pool(const ServeArgs& args, nibble::runtime::LoadedModel& model, const nibble::cache::PageLayout& layout) {
  using namespace nibble;
  const int64_t context = model.config().max_position_embeddings;
  const int64_t pages_per_request = (context + args.page_size - 1) / args.page_size;
  const int64_t memory =
      args.device_memory ? static_cast<int64_t>(parse_bytes(*args.device_memory)) : model.backend().memory_bytes();
  const std::string memory_text = format_bytes(static_cast<double>(memory));
  const auto plan_at = [&](double fraction) {
    return cache::plan_memory({.model = model.config(),
                               .model_source = args.model_dir,
                               .gpu_memory_bytes = memory,
                               .mem_fraction = fraction,
                               .weights_bytes = std::nullopt,  // estimated from the config
                               .context_tokens = context,
                               .page_size = args.page_size,
                               .kv_dtypes = {layout.dtype()}});
  };
  PoolSize size;
  if (args.kv_pages > 0) {
    size.pages = args.kv_pages;
    size.source = "--kv-pages";
  } else if (args.mem_fraction) {
    size.pages = plan_at(*args.mem_fraction).formats.at(0).pool_pages;
    size.source = fmt::format("--mem-fraction {} of {}", *args.mem_fraction, memory_text);
  } else {
    const int64_t wanted = args.max_running * pages_per_request;
    const int64_t fit = plan_at(kDefaultMemFraction).formats.at(0).pool_pages;
    size.pages = std::min(wanted, fit);
    size.source =
        wanted <= fit
            ? fmt::format("--max-running {} full contexts", args.max_running)
            : fmt::format("{} of {} less the weights: --max-running {} full contexts would need {}", kDefaultMemFraction,
                          memory_text, args.max_running,
                          format_bytes(static_cast<double>(wanted) * static_cast<double>(layout.page_bytes())));
  }
  NIBBLE_CHECK(size.pages >= 1, "the KV pool would have no pages ({})", size.source);
  const cache::MemoryPlan whole = plan_at(1.0);
  NIBBLE_CHECK(size.pages <= whole.budget_bytes / layout.page_bytes(),
               "the KV pool of {} pages ({}, from {}) does not fit beside the weights (~{}) in {} of memory{}: give "
               "fewer --kv-pages or a --mem-fraction",
               size.pages, format_bytes(static_cast<double>(size.pages) * static_cast<double>(layout.page_bytes())),
               size.source, format_bytes(static_cast<double>(whole.weights_bytes)), memory_text,
               args.device_memory ? " (--device-memory)" : "");
  size.full_context_requests = size.pages / pages_per_request;
  return size;
}

void run_serve(const ServeArgs& args) {
  using namespace nibble;
  NIBBLE_CHECK(args.port >= 0 && args.port <= 65535, "--port must be 0..65535, got {}", args.port);
  NIBBLE_CHECK(args.page_size >= 1, "--page-size must be >= 1, got {}", args.page_size);
  NIBBLE_CHECK(args.max_running >= 1, "--max-running must be >= 1, got {}", args.max_running);
  NIBBLE_CHECK(args.max_waiting >= 0, "--max-waiting must be >= 0, got {}", args.max_waiting);
  NIBBLE_CHECK(args.shutdown_grace_s >= 0, "--shutdown-grace-s must be >= 0, got {}", args.shutdown_grace_s);
  const int64_t max_batch_tokens = args.max_batch_tokens.value_or(default_max_batch_tokens(args.device));
  NIBBLE_CHECK(max_batch_tokens >= 1, "--max-batch-tokens must be >= 1, got {}", max_batch_tokens);
  NIBBLE_CHECK(args.decode_reserve >= 0.0 && args.decode_reserve <= 1.0, "--decode-reserve must be in [0, 1], got {}",
               args.decode_reserve);

  // SIGINT/SIGTERM may land on any thread (OpenBLAS starts its own before main), so the handler
  // only writes a byte to a pipe; a watcher thread reads it and shuts the server down.
  NIBBLE_CHECK(pipe(g_signal_pipe) == 0, "cannot create the signal pipe");
  struct sigaction action {};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
  std::signal(SIGPIPE, SIG_IGN);  // a client gone mid-write is an error return, not a kill

  runtime::LoadedModel model = runtime::load_model({.dir = args.model_dir, .device = args.device,
                                                    .num_threads = args.threads,
                                                    .progress = std::nullopt,
                                                    .weights = runtime::parse_weight_precision(args.weights)});
  Tokenizer tokenizer = Tokenizer::load(args.model_dir);
  const runtime::KvChoice kv = cli::resolve(args.kv, model.transformer().kv_geometry().head_dim);
  const quant::KvDtype kv_dtype = kv.dtype;
  const quant::Rotation rotation = kv.rotation;
  const cache::PageLayout layout =
      runtime::kv_page_layout(model, {.kv_dtype = kv_dtype, .rotation = rotation, .page_size = args.page_size});
  const PoolSize pool = size_pool(args, model, layout);
  const config::ModelConfig config = model.config();
  const int64_t bytes_per_token =
      cache::kv_bytes_per_token_per_layer(kv_dtype, layout.geometry().kv_heads, layout.geometry().head_dim) *
      layout.geometry().num_layers;
  const std::string name = args.served_model_name.empty()
                               ? std::filesystem::path(args.model_dir).lexically_normal().filename().string()
                               : args.served_model_name;
  const std::string model_name = name.empty() ? args.model_dir : name;

  const cache::KvGlobalScales kv_scales =
      cli::kv_global_scales(args.kv_scale_flags, layout.geometry().num_layers, kv_dtype, rotation);
  engine::Engine engine(std::move(model), std::move(tokenizer),
                        {.kv_dtype = kv_dtype,
                         .rotation = rotation,
                         .page_size = args.page_size,
                         .num_pages = pool.pages,
                         .max_running = args.max_running,
                         .max_waiting = args.max_waiting,
                         .max_batch_tokens = max_batch_tokens,
                         .decode_reserve = args.decode_reserve,
                         .prefix_cache = !args.no_prefix_cache,
                         .global_scales = kv_scales,
                         .nvfp4_scale_rule = cli::parse_nvfp4_scale_rule(args.kv_scale_flags.nvfp4_scale_rule),
                         .overlap = !args.no_overlap});
  server::HttpServer http(engine, {.host = args.host,
                                   .port = args.port,
                                   .model_name = model_name,
                                   .max_body_bytes = args.max_body_bytes,
                                   .http_threads = args.http_threads,
                                   .shutdown_grace = std::chrono::milliseconds(
                                       static_cast<int64_t>(args.shutdown_grace_s * 1000.0))});
  const int port = http.bind();
  fmt::print(stderr,
             "nibble serve: model {} ({}, context {} tokens) on {}; KV {}{}: {} pages x {} tokens = {} tokens "
             "({} B/token, {} per page, {} in all; from {}); {} requests of the full {}-token context fit; "
             "{} tokens per step; prefix cache {}; overlapped steps {}; listening on http://{}:{}\n",
             model_name, args.model_dir, config.max_position_embeddings, args.device, quant::kv_dtype_name(kv_dtype),
             rotation == quant::Rotation::kHadamard ? " + hadamard" : "", pool.pages, args.page_size,
             pool.pages * args.page_size, bytes_per_token, format_bytes(static_cast<double>(layout.page_bytes())),
             format_bytes(static_cast<double>(layout.page_bytes() * pool.pages)), pool.source,
             pool.full_context_requests, config.max_position_embeddings, max_batch_tokens,
             args.no_prefix_cache ? "off" : "on",
             args.no_overlap ? "off" : "on", args.host, port);

  std::thread watcher([&http] {
    unsigned char signal = 0;
    while (read(g_signal_pipe[0], &signal, 1) < 0 && errno == EINTR) {
    }
    if (signal != 0) {
      fmt::print(stderr, "nibble serve: {} received, shutting down\n", signal == SIGINT ? "SIGINT" : "SIGTERM");
    }
    http.shutdown();
  });
  http.serve();
  http.shutdown();  // serve() may also return on its own (a listen error)
  const unsigned char wake = 0;  // wakes the watcher if no signal came
  (void)!write(g_signal_pipe[1], &wake, 1);
  watcher.join();
  fmt::print(stderr, "nibble serve: stopped\n");
}

}  // namespace

void add_serve_command(CLI::App& app) {
  auto args = std::make_shared<ServeArgs>();
  CLI::App* cmd = app.add_subcommand("serve", "OpenAI-compatible HTTP server (chat/completions, completions)");
  cmd->add_option("--model", args->model_dir, "Hugging Face model directory")->required();
  cmd->add_option("--served-model-name", args->served_model_name, "Model name in the API (default: the directory name)");
  cmd->add_option("--host", args->host, "Address to listen on")->capture_default_str();
  cmd->add_option("--port", args->port, "Port (0 = any free port)")->capture_default_str();
  cmd->add_option("--device", args->device, "cpu | cuda")->capture_default_str();
  cmd->add_option("--weights", args->weights, "Weight matrices: bf16 | f32 (default: bf16 on cuda; cpu is f32 only)")
      ->check(CLI::IsMember({"bf16", "f32"}));
  cmd->add_option("--threads", args->threads, "CPU backend threads (0 = one per core)")->capture_default_str();
  nibble::cli::add_kv_flags(cmd, args->kv);
  nibble::cli::add_kv_scale_flags(cmd, args->kv_scale_flags);
  auto* fraction = cmd->add_option("--mem-fraction", args->mem_fraction,
                                   "Size the KV pool as `nibble plan` does: this fraction of device memory minus weights");
  cmd->add_option("--device-memory", args->device_memory,
                  "Device memory for --mem-fraction and the pool's checks, e.g. 141GB (default: this machine's RAM on "
                  "cpu, the GPU's on cuda)");
  cmd->add_option("--kv-pages", args->kv_pages, "KV pool pages (0 = see --mem-fraction / --max-running)")
      ->capture_default_str()
      ->excludes(fraction);
  cmd->add_option("--page-size", args->page_size, "Tokens per KV page")->capture_default_str();
  cmd->add_option("--max-running", args->max_running, "Requests decoding at once")->capture_default_str();
  cmd->add_option("--max-waiting", args->max_waiting, "Queued requests before 429")->capture_default_str();
  cmd->add_option("--max-batch-tokens", args->max_batch_tokens,
                  "Tokens per engine step (decodes + prefill chunks); default 2048 on cuda, 512 on cpu. Larger: "
                  "faster prefill, longer stalls of the other requests' tokens while a chunk runs");
  cmd->add_option("--decode-reserve", args->decode_reserve,
                  "Admit a request only while the KV pool also holds this fraction (0..1) of every admitted request's "
                  "remaining max_tokens, and the rest of their prompts: 0 admits on the first chunk's pages and preempts "
                  "(recomputes) the newest request when the pool runs out; 1 never preempts for growth")
      ->capture_default_str();
  cmd->add_flag("--no-prefix-cache", args->no_prefix_cache, "Turn the radix prefix cache off");
  cmd->add_flag("--no-overlap", args->no_overlap,
                "Run engine steps one after another: no next step planned and launched while this one's tokens "
                "are drawn");
  cmd->add_option("--max-body-bytes", args->max_body_bytes, "Largest request body (larger: 413)")->capture_default_str();
  cmd->add_option("--http-threads", args->http_threads, "Connections served at once")->capture_default_str();
  cmd->add_option("--shutdown-grace-s", args->shutdown_grace_s,
                  fmt::format("On SIGINT/SIGTERM new requests get 503 and in-flight ones may finish for this many "
                              "seconds; then they are cancelled (a stream ends with finish_reason \"abort\" and "
                              "[DONE], a non-streaming request gets 503). The server exits once every response is "
                              "written, at most {} s after the grace.",
                              nibble::server::kWriteOutLimit.count()))
      ->capture_default_str();
  cmd->callback([args] { run_serve(*args); });
}
