#pragma once
// A KV-cache configuration as `nibble eval --configs` spells it: dtype[+hadamard], e.g. "f32",
// "nvfp4+hadamard", "k8v4". The name is kept verbatim (canonical spelling) for reports.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cache/page_layout.h"
#include "quant/kv_format.h"

namespace nibble::eval {

struct KvConfig {
  std::string name{};  // canonical: "<dtype>" or "<dtype>+hadamard"
  quant::KvDtype dtype = quant::KvDtype::kF32;
  quant::Rotation rotation = quant::Rotation::kNone;
  cache::KvGlobalScales global_scales{};  // per-layer g (from --kv-scales); empty = 1.0
  quant::Nvfp4ScaleRule nvfp4_scale_rule = quant::Nvfp4ScaleRule::kAmaxOver6;
};

// Throws nibble::Error naming the bad spelling (unknown dtype, unknown modifier, empty).
KvConfig parse_kv_config(std::string_view text);
// Comma-separated list; spaces around names are ignored. Throws for an empty list or a duplicate.
std::vector<KvConfig> parse_kv_configs(std::string_view list);

// Why the configuration cannot run on a model with this head_dim (quant::validate_head_dim's
// message), or nullopt when it can.
std::optional<std::string> unsuitable_reason(const KvConfig& config, int64_t head_dim);

// A file-name-safe spelling: "nvfp4+hadamard" -> "nvfp4_hadamard".
std::string file_stem(const KvConfig& config);

}  // namespace nibble::eval
