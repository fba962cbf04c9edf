#pragma once
// The KV-cache configuration a command runs with when the user leaves it to nibble (`--kv-dtype auto`,
// `--rotate auto`, the defaults of generate, score, serve and calibrate): the recommendation of the
// accuracy study (docs/ACCURACY.md, "Recommended default"). Explicit names are parsed and checked
// against the head_dim as before, so a bad flag is rejected with a message that names it.
//
//   auto dtype     kRecommendedDtype (fp8 with the rotation: the most faithful format below bf16 on
//                  both study models, half of bf16's bytes) where head_dim is a power of two;
//                  otherwise kUnrotatedDtype (bf16: plain fp8 is fragile with outlier keys, which
//                  only the rotation tames)
//   auto rotation  Hadamard if the chosen dtype quantizes (fp8, nvfp4, k8v4) and head_dim is a power
//                  of two (the rotation's requirement), else none
//
// The 4-bit formats (nvfp4, k8v4) are the capacity choices: ask for them by name.
#include <cstdint>
#include <string_view>

#include "quant/kv_format.h"

namespace nibble::runtime {

inline constexpr quant::KvDtype kRecommendedDtype = quant::KvDtype::kFP8;
inline constexpr quant::KvDtype kUnrotatedDtype = quant::KvDtype::kBF16;

struct KvChoice {
  quant::KvDtype dtype;
  quant::Rotation rotation;
};

// dtype_flag: auto | f32 | bf16 | fp8 | nvfp4 | k8v4; rotate_flag: auto | none | hadamard.
// Throws nibble::Error for an unknown name or a choice the head_dim cannot hold.
KvChoice resolve_kv_choice(std::string_view dtype_flag, std::string_view rotate_flag, int64_t head_dim);

}  // namespace nibble::runtime
