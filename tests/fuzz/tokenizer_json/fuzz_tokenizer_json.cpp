// Fuzz target: tokenizer.json is outside input. Any bytes either load (then encode/decode must work)
// or fail with a nibble::Error; nothing else (crashes, other exceptions, hangs) is acceptable.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "common/error.h"
#include "tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string json(reinterpret_cast<const char*>(data), size);
  try {
    const nibble::Tokenizer tok = nibble::Tokenizer::from_json(json);
    const auto ids = tok.encode("Hello, world! 123 <s> 中文 😀", true);
    tok.decode(ids, false);
  } catch (const nibble::Error&) {
  }
  return 0;
}
