#include "decode_bench_args.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "common/error.h"

namespace nibble::bench {

namespace {

// The comma-separated items of `text` (an empty item where two commas meet or at either end).
std::vector<std::string> split_items(const std::string& text) {
  std::vector<std::string> items;
  size_t at = 0;
  while (at <= text.size()) {
    const size_t end = std::min(text.find(',', at), text.size());
    items.push_back(text.substr(at, end - at));
    at = end + 1;
  }
  return items;
}

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

std::vector<quant::KvDtype> parse_formats(const std::string& text) {
  std::vector<quant::KvDtype> formats;
  for (const std::string& item : split_items(text)) {
    try {
      formats.push_back(quant::parse_kv_dtype(item));
    } catch (const Error& e) {
      NIBBLE_FAIL("--formats: {}", e.what());
    }
  }
  return formats;
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

}  // namespace nibble::bench
