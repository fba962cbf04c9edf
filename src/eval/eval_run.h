#pragma once
// One `nibble eval` run: load the model and tokenizer, decide which configurations can run, run the
// tasks on the same items for every configuration, and summarize. apps/nibble/cmd_eval.cpp is the
// command line over this.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "eval/report.h"
#include "quant/nvfp4.h"

namespace nibble::eval {

struct EvalOptions {
  std::string model_dir{};
  std::string configs = "f32,bf16,fp8,nvfp4,nvfp4+hadamard,k8v4";
  std::string reference = "f32";
  std::vector<std::string> tasks = {"perplexity", "passkey"};
  // perplexity
  std::string corpus{};        // text file; required for the perplexity task
  int64_t context = 512;       // tokens per document
  int64_t documents = 8;       // 0 = every complete window of the corpus
  // passkey and multineedle
  std::vector<int64_t> passkey_lengths = {256, 512};
  std::vector<double> passkey_depths = {0.0, 0.25, 0.5, 0.75, 1.0};
  int64_t samples = 2;
  int64_t max_new_tokens = 8;
  // multineedle (lengths, depths, samples and max_new_tokens shared with passkey)
  int64_t needles = 4;
  // both
  int64_t chunk = 64;
  int64_t page_size = 16;
  uint64_t seed = 0;
  int64_t bootstrap_resamples = 2000;
  std::string device = "cpu";
  int threads = 0;
  // Weight matrices on the device: "" = the backend's default (bf16 on cuda), "bf16", "f32"
  // (runtime::parse_weight_precision). f32 makes the CUDA reference the exact float32 model.
  std::string weights{};
  // KV scales (cache/kv_scales_file.h) for every configuration with a global scale (fp8, nvfp4,
  // k8v4; each must use the file's rotation); "" = g = 1. The nvfp4 block-scale rule of every config.
  std::string kv_scales{};
  quant::Nvfp4ScaleRule nvfp4_scale_rule = quant::Nvfp4ScaleRule::kAmaxOver6;
};

// Throws nibble::Error for a bad option (unknown task or configuration, a reference that cannot run
// on the model, perplexity without --corpus, ...). Configurations unsuitable for the model's
// head_dim are skipped and listed with the reason; passkey lengths over the model's context are
// skipped with a note.
EvalReport run_eval(const EvalOptions& options);

}  // namespace nibble::eval
