// Streaming detokenizer: the prefix/read-offset scheme of Hugging Face's text-generation-inference,
// made exact. Each push decodes a window that starts at the previously emitted ids, so the decoder sees
// the same left context (leading-space rules) as in the full decode, and emits the text past them
// unless it must be held:
//  - it ends in U+FFFD: an incomplete character (byte-level pieces) that a later id may complete;
//  - the last visible id is a <0xXX> byte-fallback token: Hugging Face's ByteFallback decoder turns a
//    whole run of byte tokens into U+FFFDs when any part of it is invalid, so a run's text is known
//    only when the run ends.
// Windows therefore always start at the beginning of a byte run, which keeps the decode of each window
// consistent with decode(all ids).
#include "common/error.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_impl.h"

namespace nibble {
namespace {

bool ends_with_replacement(const std::string& text) {
  return text.size() >= 3 && text.compare(text.size() - 3, 3, "\xEF\xBF\xBD") == 0;
}

}  // namespace

StreamingDetokenizer::StreamingDetokenizer(Tokenizer tokenizer, bool skip_special)
    : tokenizer_(std::move(tokenizer)), skip_special_(skip_special) {}

std::string StreamingDetokenizer::push(int32_t id) {
  NIBBLE_CHECK(id >= 0 && id < tokenizer_.vocab_size(), "streaming detokenizer: token id {} out of range [0, {})", id,
               tokenizer_.vocab_size());
  ids_.push_back(id);
  if (skip_special_ && tokenizer_.is_special(id)) return {};  // invisible: changes nothing
  if (tokenizer_.impl_->model->is_byte_token(id)) return {};  // inside a byte run
  const std::span<const int32_t> all(ids_);
  const std::string prefix_text =
      tokenizer_.decode(all.subspan(prefix_offset_, read_offset_ - prefix_offset_), skip_special_);
  const std::string new_text = tokenizer_.decode(all.subspan(prefix_offset_), skip_special_);
  if (new_text.size() <= prefix_text.size() || ends_with_replacement(new_text)) return {};
  // The window's text must extend what was already emitted from it; the supported decoders only ever
  // append (Strip/Metaspace act on the window's first token, which is in the prefix).
  NIBBLE_ASSERT(new_text.compare(0, prefix_text.size(), prefix_text) == 0);
  std::string delta = new_text.substr(prefix_text.size());
  // The emitted ids become the next window's prefix; older ids are dropped so a push costs O(window).
  ids_.erase(ids_.begin(), ids_.begin() + static_cast<std::ptrdiff_t>(read_offset_));
  prefix_offset_ = 0;
  read_offset_ = ids_.size();
  return delta;
}

std::string StreamingDetokenizer::finish() {
  const std::span<const int32_t> all(ids_);
  const std::string prefix_text =
      tokenizer_.decode(all.subspan(prefix_offset_, read_offset_ - prefix_offset_), skip_special_);
  const std::string new_text = tokenizer_.decode(all.subspan(prefix_offset_), skip_special_);
  ids_.clear();
  prefix_offset_ = read_offset_ = 0;
  if (new_text.size() <= prefix_text.size()) return {};
  return new_text.substr(prefix_text.size());
}

}  // namespace nibble
