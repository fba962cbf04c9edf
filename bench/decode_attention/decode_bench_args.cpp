#include "decode_bench_args.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "backend/cuda/decode_plan.h"  // kDecodeSplitGranule (plain C++)
#include "common/error.h"

namespace nibble::bench {

std::vector<std::string> split_at(const std::string& text, char sep) {
  std::vector<std::string> items;
  size_t at = 0;
  while (at <= text.size()) {
    const size_t end = std::min(text.find(sep, at), text.size());
    items.push_back(text.substr(at, end - at));
    at = end + 1;
  }
  return items;
}

namespace {

std::vector<std::string> split_items(const std::string& text) { return split_at(text, ','); }

// A decimal integer in [lo, hi] that is the whole of `text`; false otherwise (overflow included).
bool read_integer(const std::string& text, int64_t lo, int64_t hi, int64_t& out) {
  if (text.empty() || !(text[0] >= '0' && text[0] <= '9')) return false;  // no sign, no space
  errno = 0;
  char* tail = nullptr;
  const long long v = std::strtoll(text.c_str(), &tail, 10);
  if (errno == ERANGE || *tail != '\0' || v < lo || v > hi) return false;
  out = v;
  return true;
}

}  // namespace

std::vector<DecodeShape> parse_decode_shapes(const std::string& text) {
  std::vector<DecodeShape> shapes;
  for (const std::string& item : split_items(text)) {
    const size_t c1 = item.find(':');
    const size_t c2 = c1 == std::string::npos ? std::string::npos : item.find(':', c1 + 1);
    int64_t group = 0, ctx = 0, batch = 0;
    const bool ok = c2 != std::string::npos && read_integer(item.substr(0, c1), 1, kMaxShapeGroup, group) &&
                    read_integer(item.substr(c1 + 1, c2 - c1 - 1), 1, kMaxShapeContext, ctx) &&
                    read_integer(item.substr(c2 + 1), 1, kMaxShapeBatch, batch);
    NIBBLE_CHECK(ok, "--shapes: '{}' is not GROUP:CTX:BATCH (integers, 1 <= GROUP <= {}, 1 <= CTX <= {}, "
                 "1 <= BATCH <= {})", item, kMaxShapeGroup, kMaxShapeContext, kMaxShapeBatch);
    shapes.push_back({static_cast<int>(group), ctx, batch});
  }
  return shapes;
}

std::vector<quant::KvDtype> parse_formats(const std::string& text, const std::string& flag) {
  std::vector<quant::KvDtype> formats;
  for (const std::string& item : split_items(text)) {
    try {
      formats.push_back(quant::parse_kv_dtype(item));
    } catch (const Error& e) {
      NIBBLE_FAIL("{}: {}", flag, e.what());
    }
  }
  return formats;
}

std::vector<int> parse_groups(const std::string& text, const std::string& flag) {
  std::vector<int> groups;
  for (const std::string& item : split_items(text)) {
    int64_t group = 0;
    NIBBLE_CHECK(read_integer(item, 1, kMaxShapeGroup, group), "{}: '{}' is not a group size (an integer, 1 to {})",
                 flag, item, kMaxShapeGroup);
    groups.push_back(static_cast<int>(group));
  }
  return groups;
}

std::vector<ExtendShape> parse_extend_shapes(const std::string& text, const std::string& flag) {
  std::vector<ExtendShape> shapes;
  for (const std::string& item : split_items(text)) {
    const size_t colon = item.find(':');
    int64_t prefix = 0, chunk = 0;
    const bool ok = colon != std::string::npos && read_integer(item.substr(0, colon), 1, kMaxExtendPrefix, prefix) &&
                    read_integer(item.substr(colon + 1), 1, kMaxExtendChunk, chunk);
    NIBBLE_CHECK(ok, "{}: '{}' is not PREFIX:CHUNK (integers, 1 <= PREFIX <= {}, 1 <= CHUNK <= {})", flag, item,
                 kMaxExtendPrefix, kMaxExtendChunk);
    shapes.push_back({prefix, chunk});
  }
  return shapes;
}

std::vector<WriteShape> parse_write_shapes(const std::string& text, quant::Nvfp4ScaleRule rule) {
  std::vector<WriteShape> shapes;
  for (const std::string& item : split_items(text)) {
    const size_t colon = item.find(':');
    int64_t tokens = 0;
    float g = 0.0f;
    bool ok = colon != std::string::npos && read_integer(item.substr(0, colon), 1, kMaxWriteTokens, tokens);
    if (ok) {
      const std::string g_text = item.substr(colon + 1);
      char* tail = nullptr;
      errno = 0;
      g = g_text.empty() || std::isspace(static_cast<unsigned char>(g_text[0])) ? 0.0f
                                                                                 : std::strtof(g_text.c_str(), &tail);
      ok = !g_text.empty() && tail != nullptr && *tail == '\0' && errno != ERANGE && g > 0.0f && std::isfinite(g);
    }
    NIBBLE_CHECK(ok, "--write-shapes: '{}' is not TOKENS:G (1 <= TOKENS <= {}, G finite and > 0)", item,
                 kMaxWriteTokens);
    shapes.push_back({tokens, g, rule});
  }
  return shapes;
}

const char* decode_timing_name(DecodeTiming t) { return t == DecodeTiming::kGraph ? "graph" : "eager"; }

namespace {

// The sweep the benchmark times when --shapes is not given.
std::vector<DecodeShape> default_shapes(bool quick) {
  const std::vector<int64_t> contexts =
      quick ? std::vector<int64_t>{4096, 32768} : std::vector<int64_t>{1024, 4096, 16384, 32768, 131072};
  const std::vector<int64_t> batches = quick ? std::vector<int64_t>{1, 32} : std::vector<int64_t>{1, 8, 32, 128, 256};
  std::vector<DecodeShape> shapes;
  for (int group : {4, 8})
    for (int64_t ctx : contexts)
      for (int64_t batch : batches) shapes.push_back({group, ctx, batch});
  return shapes;
}

// One of `choices` (the whole text), or an error naming the flag and the choices.
int pick(const std::string& flag, const std::string& text, std::initializer_list<const char*> choices) {
  int i = 0;
  std::string list;
  for (const char* choice : choices) {
    if (text == choice) return i;
    list += (i == 0 ? "" : i + 1 == static_cast<int>(choices.size()) ? " or " : ", ") + std::string(choice);
    ++i;
  }
  NIBBLE_FAIL("{}: '{}' is not {}", flag, text, list);
}

}  // namespace

DecodeBenchOptions parse_decode_bench_options(const std::vector<std::string>& args) {
  DecodeBenchOptions o;
  std::string shapes_text, formats_text, write_shapes_text;
  bool have_shapes = false, have_formats = false, have_write_shapes = false, no_write = false, write_only = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& flag = args[i];
    // The flag's value: the next argument, which must exist.
    auto value = [&]() -> const std::string& {
      NIBBLE_CHECK(i + 1 < args.size(), "{} needs a value", flag);
      return args[++i];
    };
    int64_t n = 0;
    if (flag == "--quick") {
      o.quick = true;
    } else if (flag == "--json") {
      o.json_path = value();
      NIBBLE_CHECK(!o.json_path.empty(), "--json: the file name is empty");
    } else if (flag == "--shapes") {
      shapes_text = value(), have_shapes = true;
    } else if (flag == "--formats") {
      formats_text = value(), have_formats = true;
    } else if (flag == "--write-shapes") {
      write_shapes_text = value(), have_write_shapes = true;
    } else if (flag == "--no-write") {
      no_write = true;
    } else if (flag == "--write-only") {
      write_only = true;
    } else if (flag == "--one-order") {
      o.both_orders = false;
    } else if (flag == "--timing") {
      const int t = pick(flag, value(), {"graph", "eager", "both"});
      o.timings = t == 2 ? std::vector<DecodeTiming>{DecodeTiming::kGraph, DecodeTiming::kEager}
                         : std::vector<DecodeTiming>{t == 0 ? DecodeTiming::kGraph : DecodeTiming::kEager};
    } else if (flag == "--chunks") {
      o.chunks.clear();
      for (const std::string& item : split_items(value())) {
        NIBBLE_CHECK(read_integer(item, 1, kMaxShapeContext, n) && n % cuda::kDecodeSplitGranule == 0,
                     "--chunks: '{}' is not a multiple of {} in {}..{}", item, cuda::kDecodeSplitGranule,
                     cuda::kDecodeSplitGranule, kMaxShapeContext);
        o.chunks.push_back(n);
      }
    } else if (flag == "--page-size") {
      const std::string& text = value();
      NIBBLE_CHECK(read_integer(text, 16, kMaxPageSize, n) && n % 16 == 0,
                   "--page-size: '{}' is not a multiple of 16 in 16..{} (the decode kernel's pages)", text,
                   kMaxPageSize);
      o.page_size = n;
    } else if (flag == "--head-dim") {
      o.head_dim = 64 << pick(flag, value(), {"64", "128", "256"});
    } else if (flag == "--kv-heads") {
      const std::string& text = value();
      NIBBLE_CHECK(read_integer(text, 1, kMaxKvHeads, n), "--kv-heads: '{}' is not in 1..{}", text, kMaxKvHeads);
      o.kv_heads = static_cast<int>(n);
    } else if (flag == "--engine-batches") {
      o.engine_batches = true;
    } else if (flag == "--mixed") {
      const std::string& text = value();
      bool ok = !text.empty() && text[0] >= '0' && text[0] <= '9';
      char* tail = nullptr;
      errno = 0;
      const unsigned long long seed = ok ? std::strtoull(text.c_str(), &tail, 10) : 0;
      ok = ok && errno != ERANGE && *tail == '\0' && seed > 0;
      NIBBLE_CHECK(ok, "--mixed: '{}' is not a positive integer seed", text);
      o.mixed_seed = seed;
    } else if (flag == "--units") {
      const int u = pick(flag, value(), {"auto", "off", "8", "16"});
      o.span_units_warps = u == 0 ? -1 : u == 1 ? 0 : u == 2 ? 8 : 16;
    } else if (flag == "--pair-merge" || flag == "--prefix-ready") {
      (flag == "--pair-merge" ? o.pair_merge : o.prefix_ready) = pick(flag, value(), {"on", "off"}) == 0;
    } else if (flag == "--sustain") {
      const std::string& text = value();
      char* tail = nullptr;
      errno = 0;
      const double v = text.empty() || std::isspace(static_cast<unsigned char>(text[0]))
                           ? -1.0
                           : std::strtod(text.c_str(), &tail);
      NIBBLE_CHECK(tail != nullptr && *tail == '\0' && errno != ERANGE && v >= 0.0 && v <= kMaxSustainSeconds,
                   "--sustain: '{}' is not a number of seconds in 0..{}", text, kMaxSustainSeconds);
      o.sustain_seconds = v;
    } else if (flag == "--nvfp4-rule") {
      o.write_rule = pick(flag, value(), {"6", "4over6"}) == 0 ? quant::Nvfp4ScaleRule::kAmaxOver6
                                                               : quant::Nvfp4ScaleRule::kFourOverSix;
    } else {
      NIBBLE_FAIL("unknown argument '{}'", flag);
    }
  }
  NIBBLE_CHECK(!(no_write && write_only), "--no-write and --write-only together leave nothing to time");
  o.formats = have_formats ? parse_formats(formats_text)
                           : std::vector<quant::KvDtype>{quant::KvDtype::kBF16, quant::KvDtype::kFP8,
                                                         quant::KvDtype::kNVFP4, quant::KvDtype::kK8V4};
  if (!write_only) o.shapes = have_shapes ? parse_decode_shapes(shapes_text) : default_shapes(o.quick);
  // After the loop: --nvfp4-rule may follow --write-shapes.
  if (!no_write) {
    o.write_shapes = have_write_shapes ? parse_write_shapes(write_shapes_text, o.write_rule)
                                       : std::vector<WriteShape>{{256, 1.0f, o.write_rule},
                                                                 {4096, 1.0f, o.write_rule},
                                                                 {65536, 1.0f, o.write_rule},
                                                                 {65536, 0.37f, o.write_rule}};
  }
  return o;
}

std::string decode_bench_usage(const std::string& program) {
  return "usage: " + program +
         " [--quick] [--json FILE] [--shapes G:CTX:B,...] [--formats bf16,fp8,nvfp4,k8v4] "
         "[--no-write | --write-only] [--one-order] [--nvfp4-rule 6|4over6] [--timing graph|eager|both] "
         "[--chunks C1,C2,...] [--page-size N] [--head-dim 64|128|256] [--kv-heads N] "
         "[--write-shapes TOKENS:G,...] [--sustain SECONDS] [--units auto|off|8|16] [--engine-batches] "
         "[--mixed SEED] [--pair-merge on|off] [--prefix-ready on|off]";
}

}  // namespace nibble::bench
