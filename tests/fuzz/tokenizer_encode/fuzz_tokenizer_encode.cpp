// Fuzz target: encode arbitrary bytes with a real tokenizer (models/stories260k: SentencePiece-style
// BPE with byte fallback). Invalid UTF-8 must be a nibble::Error; valid text must round-trip through
// decode, and the streaming detokenizer must reproduce decode exactly with valid UTF-8 deltas.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "common/error.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace {

const nibble::Tokenizer& tokenizer() {
  static const nibble::Tokenizer tok = nibble::Tokenizer::load(NIBBLE_SOURCE_DIR "/models/stories260k");
  return tok;
}

void check(bool ok) {
  if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const nibble::Tokenizer& tok = tokenizer();
  if (!nibble::utf8::is_valid(text)) {
    try {
      tok.encode(text, true);
    } catch (const nibble::Error&) {
      return 0;
    }
    std::abort();  // invalid UTF-8 was accepted
  }
  const auto ids = tok.encode(text, false);
  for (int32_t id : ids) check(id >= 0 && id < tok.vocab_size());
  // Added-token text ("<s>", "</s>", "<unk>") splits the input, and each piece gets its own "▁"
  // prefix, so only text without them round-trips exactly.
  if (text.find("<s>") == std::string::npos && text.find("</s>") == std::string::npos &&
      text.find("<unk>") == std::string::npos)
    check(tok.decode(ids, false) == text);
  nibble::StreamingDetokenizer stream(tok, /*skip_special=*/false);
  std::string joined;
  for (int32_t id : ids) {
    const std::string delta = stream.push(id);
    check(nibble::utf8::is_valid(delta));
    joined += delta;
  }
  joined += stream.finish();
  check(joined == tok.decode(ids, false));
  return 0;
}
