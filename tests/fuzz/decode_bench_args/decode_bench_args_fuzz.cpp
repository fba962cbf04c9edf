// Fuzz target for bench_decode_attention's command line: the first byte picks the parser (--shapes,
// --formats and the group lists of bench_prefill_attention's --extend-gqa, --write-shapes, or the
// whole command line with one argument per line), the rest is its text. Any input either parses
// into values inside the documented bounds (one per comma-separated item for a list flag) or throws
// nibble::Error; anything else (a crash, a sanitizer report, another exception, a value out of
// bounds) is a finding.
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/error.h"
#include "decode_bench_args.h"

namespace {

size_t items(const std::string& text) {
  size_t n = 1;
  for (char ch : text) n += ch == ',';
  return n;
}

bool shape_in_bounds(const nibble::bench::DecodeShape& s) {
  using namespace nibble::bench;
  return s.group >= 1 && s.group <= kMaxShapeGroup && s.ctx >= 1 && s.ctx <= kMaxShapeContext && s.batch >= 1 &&
         s.batch <= kMaxShapeBatch;
}

bool write_shape_in_bounds(const nibble::bench::WriteShape& w) {
  return w.tokens >= 1 && w.tokens <= nibble::bench::kMaxWriteTokens && w.g > 0.0f && std::isfinite(w.g);
}

// Every field of a parsed command line inside the range its flag documents.
bool options_in_bounds(const nibble::bench::DecodeBenchOptions& o) {
  using namespace nibble::bench;
  for (const DecodeShape& s : o.shapes)
    if (!shape_in_bounds(s)) return false;
  for (const WriteShape& w : o.write_shapes)
    if (!write_shape_in_bounds(w) || w.rule != o.write_rule) return false;
  for (int64_t c : o.chunks)
    if (c < 64 || c > kMaxShapeContext || c % 64 != 0) return false;
  return !o.formats.empty() && !o.timings.empty() && (!o.shapes.empty() || !o.write_shapes.empty()) &&
         o.page_size >= 16 && o.page_size <= kMaxPageSize && o.page_size % 16 == 0 &&
         (o.head_dim == 64 || o.head_dim == 128 || o.head_dim == 256) && o.kv_heads >= 1 &&
         o.kv_heads <= kMaxKvHeads &&
         (o.span_units_warps == -1 || o.span_units_warps == 0 || o.span_units_warps == 8 ||
          o.span_units_warps == 16) &&
         o.sustain_seconds >= 0.0 && o.sustain_seconds <= kMaxSustainSeconds;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  using namespace nibble::bench;
  try {
    switch (data[0] % 4) {
      case 0: {
        const std::vector<DecodeShape> shapes = parse_decode_shapes(text);
        if (shapes.size() != items(text)) std::abort();
        for (const DecodeShape& s : shapes)
          if (!shape_in_bounds(s)) std::abort();
        break;
      }
      case 1:
        // The plain list parsers on the same text (a format list, extend shapes, a group list).
        try {
          if (parse_formats(text).size() != items(text)) std::abort();
        } catch (const nibble::Error&) {
        }
        try {
          const std::vector<ExtendShape> shapes = parse_extend_shapes(text, "--extend-shapes");
          if (shapes.size() != items(text)) std::abort();
          for (const ExtendShape& e : shapes)
            if (e.prefix < 1 || e.prefix > kMaxExtendPrefix || e.chunk < 1 || e.chunk > kMaxExtendChunk) std::abort();
        } catch (const nibble::Error&) {
        }
        {
          const std::vector<int> groups = parse_groups(text, "--extend-gqa");
          if (groups.size() != items(text)) std::abort();
          for (int g : groups)
            if (g < 1 || g > kMaxShapeGroup) std::abort();
        }
        break;
      case 2: {
        const std::vector<WriteShape> shapes = parse_write_shapes(text, nibble::quant::Nvfp4ScaleRule::kAmaxOver6);
        if (shapes.size() != items(text)) std::abort();
        for (const WriteShape& w : shapes)
          if (!write_shape_in_bounds(w)) std::abort();
        break;
      }
      default:
        if (!options_in_bounds(parse_decode_bench_options(split_at(text, '\n')))) std::abort();
        break;
    }
  } catch (const nibble::Error&) {
    return 0;  // rejected with a message
  }
  return 0;
}
