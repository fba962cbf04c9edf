// nibble calibrate: per-layer K/V global scales from a text corpus. Runs the model (f32 KV cache)
// over the corpus cut into documents of --context tokens (eval/corpus.h), records per
// full-attention layer the amax of K and V as the cache write sees them (after RoPE, and after the
// Hadamard rotation with --rotate hadamard), and writes the JSON of cache/kv_scales_file.h, which
// generate and score take with --kv-scales.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <filesystem>
#include <memory>

#include "cache/kv_scales_file.h"
#include "common/error.h"
#include "eval/corpus.h"
#include "quant/kv_format.h"
#include "runtime/calibrate.h"
#include "runtime/kv_choice.h"
#include "tokenizer/tokenizer.h"

namespace {

struct CalibrateArgs {
  std::string model_dir;
  std::string corpus;
  int64_t context = 512;
  int64_t documents = 16;
  std::string rotate = "auto";
  int64_t chunk = 0;
  std::string device = "cpu";
  int threads = 0;
  std::string weights;  // "" = the device's default (bf16 on cuda)
  std::string out = "kv_scales.json";
};

void run_calibrate(const CalibrateArgs& args) {
  using namespace nibble;
  NIBBLE_CHECK(args.documents >= 0, "--docs must not be negative, got {}", args.documents);
  NIBBLE_CHECK(args.rotate == "auto" || args.rotate == "none" || args.rotate == "hadamard",
               "--rotate: unknown rotation '{}' (expected auto, none or hadamard)", args.rotate);
  runtime::LoadedModel model =
      runtime::load_model({.dir = args.model_dir,
                           .device = args.device,
                           .num_threads = args.threads,
                           .progress = std::nullopt,
                           .weights = runtime::parse_weight_precision(args.weights)});
  // auto: the rotation the commands' default KV configuration uses for this model.
  const quant::Rotation rotation =
      runtime::resolve_kv_choice("auto", args.rotate, model.transformer().kv_geometry().head_dim).rotation;
  const Tokenizer tokenizer = Tokenizer::load(args.model_dir);
  const auto documents =
      eval::load_documents(tokenizer, args.corpus, {.context = args.context, .max_documents = args.documents});
  const runtime::KvAmax amax =
      runtime::measure_kv_amax(model, documents, {.rotation = rotation, .prefill_chunk = args.chunk});
  const std::string model_name = std::filesystem::path(args.model_dir).lexically_normal().filename().string();
  const cache::KvScalesFile file = cache::kv_scales_from_amax(model_name, rotation, amax.k, amax.v);
  cache::write_kv_scales_file(args.out, file);
  fmt::print("calibrated {} layers over {} documents ({} tokens), rotation {}; wrote {}\n", file.layers.size(),
             documents.size(), amax.tokens, rotation == quant::Rotation::kHadamard ? "hadamard" : "none", args.out);
  for (size_t i = 0; i < file.layers.size(); ++i) {
    fmt::print("  layer {:3}: k_amax {:10.4g}  v_amax {:10.4g}\n", i, file.layers[i].k_amax, file.layers[i].v_amax);
  }
}

}  // namespace

void add_calibrate_command(CLI::App& app) {
  auto args = std::make_shared<CalibrateArgs>();
  CLI::App* cmd = app.add_subcommand("calibrate", "Per-layer K/V global scales (amax) from a text corpus");
  cmd->add_option("--model", args->model_dir, "Hugging Face model directory")->required();
  cmd->add_option("--corpus", args->corpus, "Text file (passages split at blank lines)")->required();
  cmd->add_option("--context", args->context, "Tokens per document")->capture_default_str();
  cmd->add_option("--docs", args->documents, "Documents to run (0 = every complete window)")->capture_default_str();
  cmd->add_option("--rotate", args->rotate, "KV rotation the scales are for: auto | none | hadamard (auto: as generate/serve's default)")->capture_default_str();
  cmd->add_option("--chunk", args->chunk, "Prefill chunk in tokens (0 = whole document)")->capture_default_str();
  cmd->add_option("--device", args->device, "cpu | cuda")->capture_default_str();
  cmd->add_option("--threads", args->threads, "CPU threads (0 = one per core)")->capture_default_str();
  cmd->add_option("--weights", args->weights, "Weight matrices: bf16 | f32 (default: bf16 on cuda; cpu is f32 only)");
  cmd->add_option("--out", args->out, "Output JSON file")->capture_default_str();
  cmd->callback([args] { run_calibrate(*args); });
}
