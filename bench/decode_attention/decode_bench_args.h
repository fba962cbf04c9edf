#pragma once
// bench_decode_attention's command line, parsed whole before the benchmark touches the GPU (a typo
// costs no device time). Plain C++, tested in tests/unit/bench (decode_bench_args_test.cpp) and
// fuzzed (tests/fuzz/decode_bench_args). Every parser throws nibble::Error naming the flag and the
// text it could not read.
#include <cstdint>
#include <optional>
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

// The pieces of `text` between `sep`s (an empty piece where two meet or at either end).
std::vector<std::string> split_at(const std::string& text, char sep);

// "4:32768:32,8:1024:256" -> shapes (GROUP:CTX:BATCH, each a positive integer within the limits above).
std::vector<DecodeShape> parse_decode_shapes(const std::string& text);
// "bf16,fp8,nvfp4,k8v4" -> formats (quant::parse_kv_dtype's names); errors name `flag`.
std::vector<quant::KvDtype> parse_formats(const std::string& text, const std::string& flag = "--formats");
// "1,4,8" -> GQA groups (query heads per KV head, each an integer in [1, kMaxShapeGroup]); errors name `flag`.
std::vector<int> parse_groups(const std::string& text, const std::string& flag);
// One extend shape (bench_prefill_attention --extend-shapes): `chunk` new tokens over `prefix`
// cached ones.
struct ExtendShape {
  int64_t prefix;
  int64_t chunk;
};
inline constexpr int64_t kMaxExtendPrefix = int64_t{1} << 20;  // 1M tokens
inline constexpr int64_t kMaxExtendChunk = int64_t{1} << 16;
// "32768:64,131072:512" -> extend shapes (PREFIX:CHUNK, 1 <= PREFIX <= kMaxExtendPrefix, 1 <= CHUNK <=
// kMaxExtendChunk); errors name `flag`.
std::vector<ExtendShape> parse_extend_shapes(const std::string& text, const std::string& flag);
// "65536:1,65536:0.37" -> write shapes (1 <= TOKENS <= kMaxWriteTokens, G finite and > 0), each with `rule`.
std::vector<WriteShape> parse_write_shapes(const std::string& text, quant::Nvfp4ScaleRule rule);

// How a decode case is timed: CUDA-graph replays of captured calls, or calls launched from the host.
enum class DecodeTiming { kGraph, kEager };
const char* decode_timing_name(DecodeTiming t);

inline constexpr int64_t kMaxPageSize = 1024;
inline constexpr int kMaxKvHeads = 64;
inline constexpr double kMaxSustainSeconds = 600.0;

// Every flag of bench_decode_attention, with the defaults resolved: an empty list flag has become
// the sweep it stands for, and the decode or write list is empty where that part is skipped.
struct DecodeBenchOptions {
  bool quick = false;             // --quick: the short sweep (contexts 4K, 32K; batches 1, 32)
  std::string json_path;          // --json FILE ("" = none)
  std::vector<quant::KvDtype> formats;  // --formats (default bf16, fp8, nvfp4, k8v4)
  std::vector<DecodeShape> shapes;      // --shapes (default the sweep; empty with --write-only)
  std::vector<WriteShape> write_shapes; // --write-shapes (default 256:1, 4096:1, 65536:1, 65536:0.37;
                                        // empty with --no-write)
  quant::Nvfp4ScaleRule write_rule = quant::Nvfp4ScaleRule::kAmaxOver6;  // --nvfp4-rule 6|4over6
  bool both_orders = true;              // off with --one-order
  std::vector<DecodeTiming> timings = {DecodeTiming::kGraph, DecodeTiming::kEager};  // --timing
  std::vector<int64_t> chunks;          // --chunks: forced item sizes, multiples of the split granule
  int64_t page_size = 16;               // --page-size: a multiple of 16 in 16..kMaxPageSize
  int head_dim = 128;                   // --head-dim 64|128|256
  int kv_heads = 8;                     // --kv-heads 1..kMaxKvHeads
  int span_units_warps = -1;            // --units auto (-1) | off (0) | 8 | 16
  bool pair_merge = true;               // --pair-merge on|off
  bool prefix_ready = false;            // --prefix-ready on|off
  bool engine_batches = false;          // --engine-batches
  uint64_t mixed_seed = 0;              // --mixed SEED (> 0); 0 = every sequence ctx long
  double sustain_seconds = 0.0;         // --sustain SECONDS in 0..kMaxSustainSeconds
};

// The flags after the program's name, in any order (a later one overrides an earlier one).
// Throws nibble::Error on an unknown flag, a missing value, a value out of its range, or --no-write
// with --write-only (nothing left to time).
DecodeBenchOptions parse_decode_bench_options(const std::vector<std::string>& args);
// The usage line (every flag), for `program`.
std::string decode_bench_usage(const std::string& program);

}  // namespace nibble::bench
