// Fuzz target for bench_decode_attention's list flags: the first byte picks the parser (--shapes,
// --formats or --write-shapes), the rest is the flag's text. Any input either parses into values
// inside the documented bounds, one per comma-separated item, or throws nibble::Error; anything else
// (a crash, a sanitizer report, another exception, a value out of bounds) is a finding.
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "common/error.h"
#include "decode_bench_args.h"

namespace {

size_t items(const std::string& text) {
  size_t n = 1;
  for (char ch : text) n += ch == ',';
  return n;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  using namespace nibble::bench;
  try {
    switch (data[0] % 3) {
      case 0: {
        const std::vector<DecodeShape> shapes = parse_decode_shapes(text);
        if (shapes.size() != items(text)) std::abort();
        for (const DecodeShape& s : shapes) {
          if (s.group < 1 || s.group > kMaxShapeGroup || s.ctx < 1 || s.ctx > kMaxShapeContext || s.batch < 1 ||
              s.batch > kMaxShapeBatch)
            std::abort();
        }
        break;
      }
      case 1:
        if (parse_formats(text).size() != items(text)) std::abort();
        break;
      default: {
        const std::vector<WriteShape> shapes = parse_write_shapes(text, nibble::quant::Nvfp4ScaleRule::kAmaxOver6);
        if (shapes.size() != items(text)) std::abort();
        for (const WriteShape& w : shapes) {
          if (w.tokens < 1 || w.tokens > kMaxWriteTokens || !(w.g > 0.0f) || !std::isfinite(w.g)) std::abort();
        }
        break;
      }
    }
  } catch (const nibble::Error&) {
    return 0;  // rejected with a message
  }
  return 0;
}
