// nibble plan: how much KV cache a GPU holds after the weights, per KV format, and how many
// requests of a given context fit. The arithmetic is cache/planner.h; this file reads the flags and
// prints the plan (a table, or --json for machines).
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cache/planner.h"
#include "common/error.h"
#include "common/units.h"
#include "config/model_config.h"
#include "quant/kv_format.h"

namespace {

using nibble::cache::FormatPlan;
using nibble::cache::MemoryPlan;
using nibble::cache::PlanInput;
using nibble::quant::KvDtype;

constexpr KvDtype kAllDtypes[] = {KvDtype::kF32, KvDtype::kBF16, KvDtype::kFP8, KvDtype::kNVFP4, KvDtype::kK8V4};

struct PlanOptions {
  std::string config_path;  // empty: the built-in geometry
  std::string kv_dtype = "all";
  std::string gpu_memory = "141GB";
  double mem_fraction = 0.9;
  std::string weights_bytes;  // empty: estimated from the config
  int64_t context = 32768;
  int64_t page_size = 64;
  bool json = false;
};

struct SkippedFormat {
  KvDtype dtype;
  std::string reason;
};

// "1234567" -> "1,234,567".
std::string group_digits(int64_t n) {
  std::string digits = std::to_string(n < 0 ? -n : n);
  for (int i = static_cast<int>(digits.size()) - 3; i > 0; i -= 3) digits.insert(i, ",");
  return n < 0 ? "-" + digits : digits;
}

int64_t to_int64_bytes(const std::string& text, const char* flag) {
  const uint64_t bytes = nibble::parse_bytes(text);
  NIBBLE_CHECK(bytes <= static_cast<uint64_t>(INT64_MAX), "{} {} is too large", flag, text);
  return static_cast<int64_t>(bytes);
}

// --kv-dtype: "all" or a comma-separated list of format names. With "all", formats the model's
// head_dim cannot hold (nvfp4 needs multiples of 16) are listed as skipped, with the reason.
std::vector<KvDtype> select_dtypes(const std::string& spec, int64_t head_dim, std::vector<SkippedFormat>& skipped) {
  std::vector<KvDtype> out;
  if (spec == "all") {
    for (KvDtype d : kAllDtypes) {
      try {
        nibble::quant::validate_head_dim(d, nibble::quant::Rotation::kNone, head_dim);
        out.push_back(d);
      } catch (const nibble::Error& e) {
        skipped.push_back({d, e.what()});
      }
    }
    NIBBLE_CHECK(!out.empty(), "no KV format suits head_dim {}", head_dim);
    return out;
  }
  size_t start = 0;
  while (start <= spec.size()) {
    const size_t comma = spec.find(',', start);
    const std::string name = spec.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    NIBBLE_CHECK(!name.empty(), "--kv-dtype '{}': empty format name (expected all or f32, bf16, fp8, nvfp4, k8v4)",
                 spec);
    out.push_back(nibble::quant::parse_kv_dtype(name));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

nlohmann::json plan_json(const PlanInput& in, const MemoryPlan& plan, const std::vector<SkippedFormat>& skipped) {
  const nibble::config::ModelConfig& m = in.model;
  nlohmann::json j;
  j["model"] = {
      {"source", in.model_source},
      {"builtin_geometry", in.builtin_geometry},
      {"architecture", nibble::config::architecture_name(m.architecture)},
      {"layers", m.num_layers},
      {"full_attention_layers", plan.full_attention_layers},
      {"linear_attention_layers", plan.linear_attention_layers},
      {"kv_heads", m.num_kv_heads},
      {"head_dim", m.head_dim},
      {"torch_dtype", nibble::config::weight_dtype_name(m.torch_dtype)},
      {"torch_dtype_given", m.torch_dtype_given},
  };
  j["gpu_memory_bytes"] = in.gpu_memory_bytes;
  j["mem_fraction"] = in.mem_fraction;
  j["usable_bytes"] = plan.usable_bytes;
  j["weights_bytes"] = plan.weights_bytes;
  j["weights_estimated"] = plan.weights_estimated;
  j["parameter_count"] = plan.parameter_count;
  j["budget_bytes"] = plan.budget_bytes;
  j["context_tokens"] = in.context_tokens;
  j["page_size"] = in.page_size;
  j["pages_per_request"] = plan.pages_per_request;
  if (m.linear) {
    j["linear_state"] = {
        {"bytes_per_request", plan.state_bytes_per_request},
        {"recurrent_dtype", nibble::config::weight_dtype_name(m.linear_state_dtype)},
        {"conv_dtype", nibble::config::weight_dtype_name(m.torch_dtype)},
    };
  } else {
    j["linear_state"] = nullptr;
  }
  j["formats"] = nlohmann::json::array();
  for (const FormatPlan& f : plan.formats) {
    j["formats"].push_back({
        {"kv_dtype", nibble::quant::kv_dtype_name(f.kv_dtype)},
        {"bytes_per_token", f.bytes_per_token},
        {"bytes_per_token_per_layer", f.bytes_per_token_per_layer},
        {"page_bytes", f.page_bytes},
        {"request_bytes", f.request_bytes},
        {"pool_pages", f.pool_pages},
        {"pool_tokens", f.pool_tokens},
        {"requests", f.requests},
        {"tokens_per_byte_vs_fp8", f.tokens_per_byte_vs_fp8},
        {"requests_vs_fp8", f.requests_vs_fp8},
    });
  }
  j["skipped_formats"] = nlohmann::json::array();
  for (const SkippedFormat& s : skipped) {
    j["skipped_formats"].push_back({{"kv_dtype", nibble::quant::kv_dtype_name(s.dtype)}, {"reason", s.reason}});
  }
  return j;
}

void print_text(const PlanInput& in, const MemoryPlan& plan, const std::vector<SkippedFormat>& skipped) {
  using nibble::format_bytes;
  const nibble::config::ModelConfig& m = in.model;
  if (in.builtin_geometry) {
    fmt::print("model: built-in geometry, {} (pass --config CONFIG.json for another model)\n", in.model_source);
  } else {
    fmt::print("model: {} ({})\n", in.model_source, nibble::config::architecture_name(m.architecture));
  }
  fmt::print("  {} layers: {} full attention with a KV cache ({} KV heads × head_dim {})", m.num_layers,
             plan.full_attention_layers, m.num_kv_heads, m.head_dim);
  if (plan.linear_attention_layers > 0) {
    fmt::print(", {} linear attention with a fixed per-request state", plan.linear_attention_layers);
  }
  fmt::print("\n");
  const std::string weights_note =
      plan.weights_estimated
          ? fmt::format("estimated: {:.2f}e9 parameters × {} B {}{}", plan.parameter_count / 1e9,
                        nibble::config::dtype_bytes(m.torch_dtype), nibble::config::weight_dtype_name(m.torch_dtype),
                        m.torch_dtype_given ? "" : ", assumed: the config names no torch_dtype")
          : "from --weights-bytes";
  fmt::print("memory: {} × {} = {}; weights {} ({}) → KV budget {}\n", format_bytes(in.gpu_memory_bytes),
             in.mem_fraction, format_bytes(plan.usable_bytes), format_bytes(plan.weights_bytes), weights_note,
             format_bytes(plan.budget_bytes));
  if (m.linear) {
    fmt::print("linear-attention state: {} per request = {} layers × (recurrent [{}, {}, {}] {} + conv [{}, {}] {})\n",
               format_bytes(plan.state_bytes_per_request), plan.linear_attention_layers, m.linear->num_value_heads,
               m.linear->key_head_dim, m.linear->value_head_dim,
               nibble::config::weight_dtype_name(m.linear_state_dtype), m.linear->conv_kernel - 1,
               m.linear->conv_state_elements() / (m.linear->conv_kernel - 1),
               nibble::config::weight_dtype_name(m.torch_dtype));
    fmt::print("  (recurrent state in the config's mamba_ssm_dtype, float32 when it names none; conv state in the "
               "weights' dtype)\n");
  }
  fmt::print("requests of {} tokens: {} pages of {} tokens each\n\n", in.context_tokens, plan.pages_per_request,
             in.page_size);

  fmt::print("{:<7} {:>12} {:>7} {:>14} {:>12} {:>14} {:>9} {:>7}\n", "format", "KV B/token", "vs fp8", "page bytes",
             "pool pages", "pool tokens", "requests", "vs fp8");
  for (const FormatPlan& f : plan.formats) {
    fmt::print("{:<7} {:>12} {:>6.2f}× {:>14} {:>12} {:>14} {:>9} {:>6.2f}×\n", nibble::quant::kv_dtype_name(f.kv_dtype),
               group_digits(f.bytes_per_token), f.tokens_per_byte_vs_fp8, group_digits(f.page_bytes),
               group_digits(f.pool_pages), group_digits(f.pool_tokens), group_digits(f.requests), f.requests_vs_fp8);
  }
  for (const SkippedFormat& s : skipped) {
    fmt::print("{:<7} skipped: {}\n", nibble::quant::kv_dtype_name(s.dtype), s.reason);
  }
  fmt::print(
      "\nKV B/token: exact bytes one token costs in all {} full-attention layers, K and V, block scales included "
      "(nvfp4 = 9/16 = 0.5625 of fp8).\n"
      "vs fp8: tokens per byte of cache, then requests that fit. pool: whole pages left for KV after the weights"
      "{}.\n",
      plan.full_attention_layers,
      plan.state_bytes_per_request > 0 ? " and the linear-attention states of the requests that fit" : "");
}

void run_plan(const PlanOptions& opts) {
  PlanInput in;
  if (opts.config_path.empty()) {
    in.model = nibble::cache::builtin_model_geometry();
    in.builtin_geometry = true;
    in.model_source = "Qwen3.8-27B-style hybrid (the seed's worked example)";
  } else {
    in.model = nibble::config::load_model_config(opts.config_path);
    in.model_source = opts.config_path;
  }
  in.gpu_memory_bytes = to_int64_bytes(opts.gpu_memory, "--gpu-memory");
  in.mem_fraction = opts.mem_fraction;
  if (!opts.weights_bytes.empty()) in.weights_bytes = to_int64_bytes(opts.weights_bytes, "--weights-bytes");
  in.context_tokens = opts.context;
  in.page_size = opts.page_size;
  std::vector<SkippedFormat> skipped;
  in.kv_dtypes = select_dtypes(opts.kv_dtype, in.model.head_dim, skipped);

  const MemoryPlan plan = nibble::cache::plan_memory(in);
  if (opts.json) {
    fmt::print("{}\n", plan_json(in, plan, skipped).dump(2));
  } else {
    print_text(in, plan, skipped);
  }
}

}  // namespace

void add_plan_command(CLI::App& app) {
  auto opts = std::make_shared<PlanOptions>();
  CLI::App* cmd = app.add_subcommand(
      "plan", "KV memory planner: cache bytes per token, pool capacity and requests that fit, per KV format");
  cmd->add_option("--config", opts->config_path,
                  "Hugging Face config.json of the model (default: a built-in Qwen3.8-27B-style hybrid geometry)");
  cmd->add_option("--kv-dtype", opts->kv_dtype, "f32|bf16|fp8|nvfp4|k8v4, a comma-separated list, or all")
      ->capture_default_str();
  cmd->add_option("--gpu-memory", opts->gpu_memory, "GPU memory, e.g. 141GB, 80GiB")->capture_default_str();
  cmd->add_option("--mem-fraction", opts->mem_fraction, "fraction of GPU memory for weights + KV cache")
      ->capture_default_str();
  cmd->add_option("--weights-bytes", opts->weights_bytes,
                  "weight bytes (e.g. 54GB); default: estimated from the config at its torch_dtype");
  cmd->add_option("--context", opts->context, "tokens per request")->capture_default_str();
  cmd->add_option("--page-size", opts->page_size, "tokens per KV page")->capture_default_str();
  cmd->add_flag("--json", opts->json, "print the plan as JSON");
  cmd->callback([opts] { run_plan(*opts); });
}
