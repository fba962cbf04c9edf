#include "eval/kv_config.h"

#include <algorithm>

#include "common/error.h"

namespace nibble::eval {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

}  // namespace

KvConfig parse_kv_config(std::string_view text) {
  text = trim(text);
  NIBBLE_CHECK(!text.empty(), "empty KV configuration (expected dtype[+hadamard], e.g. nvfp4+hadamard)");
  const size_t plus = text.find('+');
  KvConfig config;
  config.dtype = quant::parse_kv_dtype(text.substr(0, plus));
  if (plus != std::string_view::npos) {
    const std::string_view modifier = text.substr(plus + 1);
    NIBBLE_CHECK(modifier == "hadamard", "KV configuration '{}': unknown modifier '{}' (the only one is +hadamard)",
                 text, modifier);
    config.rotation = quant::Rotation::kHadamard;
  }
  config.name = quant::kv_dtype_name(config.dtype);
  if (config.rotation == quant::Rotation::kHadamard) config.name += "+hadamard";
  return config;
}

std::vector<KvConfig> parse_kv_configs(std::string_view list) {
  std::vector<KvConfig> configs;
  size_t start = 0;
  while (start <= list.size()) {
    const size_t comma = std::min(list.find(',', start), list.size());
    configs.push_back(parse_kv_config(list.substr(start, comma - start)));
    start = comma + 1;
  }
  for (size_t i = 0; i < configs.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      NIBBLE_CHECK(configs[i].name != configs[j].name, "KV configuration '{}' is listed twice", configs[i].name);
    }
  }
  return configs;
}

std::optional<std::string> unsuitable_reason(const KvConfig& config, int64_t head_dim) {
  try {
    quant::validate_head_dim(config.dtype, config.rotation, head_dim);
  } catch (const Error& e) {
    return std::string(e.what());
  }
  return std::nullopt;
}

std::string file_stem(const KvConfig& config) {
  std::string stem = config.name;
  std::replace(stem.begin(), stem.end(), '+', '_');
  return stem;
}

}  // namespace nibble::eval
