#pragma once
// The KV-format flags of generate, score and serve:
//   --kv-dtype auto|f32|bf16|fp8|nvfp4|k8v4   default auto: the accuracy study's recommendation
//   --rotate auto|none|hadamard               (fp8 + Hadamard, bf16 where head_dim is not a power of two;
//                                             runtime/kv_choice.h)
// Names are checked when the flags are parsed (before a model loads); the head_dim-dependent choice
// is made once the model's geometry is known.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <string>

#include "common/error.h"
#include "quant/kv_format.h"
#include "runtime/kv_choice.h"

namespace nibble::cli {

struct KvFlags {
  std::string dtype = "auto";
  std::string rotate = "auto";
};

inline void add_kv_flags(CLI::App* cmd, KvFlags& flags) {
  cmd->add_option("--kv-dtype", flags.dtype,
                  fmt::format("KV cache format: auto f32 bf16 fp8 nvfp4 k8v4 (auto: {} with the Hadamard rotation "
                              "where head_dim is a power of two, else {}; nvfp4 and k8v4 hold ~1.8x and ~1.3x "
                              "fp8's context)",
                              quant::kv_dtype_name(runtime::kRecommendedDtype),
                              quant::kv_dtype_name(runtime::kUnrotatedDtype)))
      ->capture_default_str()
      ->check([](const std::string& s) -> std::string {
        if (s == "auto") return {};
        try {
          quant::parse_kv_dtype(s);
          return {};
        } catch (const Error& e) {
          return e.what();
        }
      });
  cmd->add_option("--rotate", flags.rotate,
                  "KV rotation: auto none hadamard (auto: hadamard for quantized formats, power-of-two head_dim)")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "none", "hadamard"}));
}

inline runtime::KvChoice resolve(const KvFlags& flags, int64_t head_dim) {
  return runtime::resolve_kv_choice(flags.dtype, flags.rotate, head_dim);
}

}  // namespace nibble::cli
