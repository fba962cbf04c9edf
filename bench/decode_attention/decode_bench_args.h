#pragma once
// bench_decode_attention's list flags (--shapes, --formats, --write-shapes), parsed before the
// benchmark touches the GPU. Plain C++, tested in tests/unit/bench (decode_bench_args_test.cpp).
// Each parser throws nibble::Error naming the flag and the item it could not read.
#include <cstdint>
#include <string>
#include <vector>

#include "quant/kv_format.h"
#include "quant/nvfp4.h"

namespace nibble::bench {

// One decode shape: `batch` sequences of `ctx` tokens, `group` query heads per KV head.
struct DecodeShape {
  int group;
  int64_t ctx;
  int64_t batch;
};
inline constexpr int kMaxShapeGroup = 256;
inline constexpr int64_t kMaxShapeContext = int64_t{1} << 24;  // 16M tokens
inline constexpr int64_t kMaxShapeBatch = 65536;

// One write-path shape: `tokens` new tokens with global scale g for K and V (1 = SGLang's recipe; a
// power of two takes the exact multiply path, anything else the true division).
struct WriteShape {
  int64_t tokens;
  float g;
  quant::Nvfp4ScaleRule rule = quant::Nvfp4ScaleRule::kAmaxOver6;  // nvfp4 parts (nvfp4, k8v4's V)
};
inline constexpr int64_t kMaxWriteTokens = int64_t{1} << 24;

// "4:32768:32,8:1024:256" -> shapes (GROUP:CTX:BATCH, each a positive integer within the limits above).
std::vector<DecodeShape> parse_decode_shapes(const std::string& text);
// "bf16,fp8,nvfp4,k8v4" -> formats (quant::parse_kv_dtype's names).
std::vector<quant::KvDtype> parse_formats(const std::string& text);
// "65536:1,65536:0.37" -> write shapes (1 <= TOKENS <= kMaxWriteTokens, G finite and > 0), each with `rule`.
std::vector<WriteShape> parse_write_shapes(const std::string& text, quant::Nvfp4ScaleRule rule);

}  // namespace nibble::bench
