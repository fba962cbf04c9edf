#pragma once
// The KV-scale flags shared by generate, score and calibrate-aware commands:
//   --kv-scales FILE            per-layer K/V global scales from `nibble calibrate`
//   --nvfp4-scale-rule 6|4over6 nvfp4 block scale amax/6 (default) or 4-over-6
#include <CLI/CLI.hpp>

#include <string>

#include "cache/kv_scales_file.h"
#include "common/error.h"
#include "quant/nvfp4.h"

namespace nibble::cli {

struct KvScaleFlags {
  std::string kv_scales;             // "" = g = 1 for every layer
  std::string nvfp4_scale_rule = "6";
};

inline void add_kv_scale_flags(CLI::App* cmd, KvScaleFlags& flags) {
  cmd->add_option("--kv-scales", flags.kv_scales, "Per-layer K/V global scales (JSON from nibble calibrate)");
  cmd->add_option("--nvfp4-scale-rule", flags.nvfp4_scale_rule,
                  "nvfp4 block scale: 6 (amax/6) | 4over6 (amax/6 or amax/4, lower block error)")
      ->capture_default_str();
}

inline quant::Nvfp4ScaleRule parse_nvfp4_scale_rule(const std::string& text) {
  if (text == "6") return quant::Nvfp4ScaleRule::kAmaxOver6;
  if (text == "4over6") return quant::Nvfp4ScaleRule::kFourOverSix;
  NIBBLE_FAIL("--nvfp4-scale-rule: unknown rule '{}' (expected 6 or 4over6)", text);
}

// The global scales for a session: empty (g = 1) without --kv-scales, else the file's, validated
// against the model's full-attention layers, the dtype and the rotation.
inline cache::KvGlobalScales kv_global_scales(const KvScaleFlags& flags, int64_t num_layers, quant::KvDtype dtype,
                                              quant::Rotation rotation) {
  if (flags.kv_scales.empty()) return {};
  return cache::load_kv_global_scales(flags.kv_scales,
                                      {.num_layers = num_layers, .dtype = dtype, .rotation = rotation});
}

}  // namespace nibble::cli
