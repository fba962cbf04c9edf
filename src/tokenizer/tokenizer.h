#pragma once
// Text <-> token ids from a Hugging Face model directory (tokenizer.json + tokenizer_config.json),
// reproducing the `tokenizers` library exactly: byte-level BPE (GPT-2 / Llama 3 / Qwen2-3) and
// SentencePiece-style BPE with byte fallback (Llama 2 / Mistral / stories260k), added and special
// tokens, the post-processor's special tokens, the decoder chain, chat templates (Jinja subset) and a
// streaming detokenizer that never emits a broken UTF-8 sequence.
//
// Thread safety: a Tokenizer is immutable after load(); encode/decode may run concurrently.
// Copies are cheap (shared immutable state).
#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace nibble {

class ChatTemplate;

struct ChatMessage {
  std::string role;     // "system" | "user" | "assistant" | ...
  std::string content;
};

struct ChatOptions {
  bool add_generation_prompt = true;  // end with the assistant header so the model answers
};

class Tokenizer {
 public:
  // Reads model_dir/tokenizer.json (required) and model_dir/tokenizer_config.json (optional: chat
  // template, bos/eos tokens, add_bos_token). Throws nibble::Error naming the file and the problem
  // (missing file, malformed JSON, unsupported model/normalizer/pre-tokenizer/decoder type).
  static Tokenizer load(const std::filesystem::path& model_dir);
  // The same from the two files' contents (config may be empty).
  static Tokenizer from_json(std::string_view tokenizer_json, std::string_view tokenizer_config_json = {});

  // add_special = true matches Hugging Face's default (the post-processor's BOS/EOS tokens are added).
  // Added-token text inside `text` (e.g. "<|im_start|>") is always recognized as that token.
  std::vector<int32_t> encode(std::string_view text, bool add_special = true) const;
  // Always valid UTF-8 (invalid byte sequences become U+FFFD as in Hugging Face's decode).
  std::string decode(std::span<const int32_t> ids, bool skip_special = false) const;

  int32_t vocab_size() const;                            // 1 + the largest id (model + added tokens)
  std::optional<int32_t> token_to_id(std::string_view token) const;
  std::string id_to_token(int32_t id) const;             // the raw vocabulary string; throws if out of range
  bool is_special(int32_t id) const;                     // an added token marked "special"

  std::optional<int32_t> bos_id() const;                 // from tokenizer_config.json's bos_token
  std::vector<int32_t> eos_ids() const;                  // eos_token (generation_config.json adds more: caller's job)
  const std::string& bos_token() const;                  // "" when none
  const std::string& eos_token() const;

  bool has_chat_template() const;
  const ChatTemplate& chat_template() const;             // throws nibble::Error when the model has none
  // Renders the model's chat template with messages, add_generation_prompt, bos_token, eos_token.
  std::string apply_chat_template(std::span<const ChatMessage> messages, const ChatOptions& options = {}) const;
  // Same with messages as a JSON array of {"role", "content", ...} objects (richer messages), key
  // order kept.
  std::string apply_chat_template(const nlohmann::ordered_json& messages, const ChatOptions& options = {}) const;

  struct Impl;
 private:
  explicit Tokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
  friend class StreamingDetokenizer;
};

// A parsed Jinja chat template (the subset the Qwen3, Llama 3.x and Mistral templates use).
class ChatTemplate {
 public:
  // Throws nibble::Error with the line/column of a syntax error.
  static ChatTemplate parse(std::string_view source);
  // context: the template's variables, e.g. {"messages": [...], "add_generation_prompt": true,
  // "bos_token": "<s>"}. Throws nibble::Error for a runtime error, including raise_exception(msg).
  // Objects keep their key order with ordered_json (as Python dicts do: `tools | tojson` shows it);
  // an nlohmann::json context arrives key-sorted, because nlohmann::json stores objects sorted.
  std::string render(const nlohmann::ordered_json& context) const;
  std::string render(const nlohmann::json& context) const;

  struct Program;
 private:
  explicit ChatTemplate(std::shared_ptr<const Program> program) : program_(std::move(program)) {}
  std::shared_ptr<const Program> program_;
};

// Feed ids one at a time, get UTF-8 text deltas. Invariant: every delta is valid UTF-8 and
// (all push() results) + finish() == tokenizer.decode(all ids, skip_special). A multi-byte character
// split across tokens (byte-level pieces or <0xXX> byte-fallback tokens) is held back until complete.
class StreamingDetokenizer {
 public:
  explicit StreamingDetokenizer(Tokenizer tokenizer, bool skip_special = true);
  std::string push(int32_t id);   // the new text this id completes ("" while a character is pending)
  std::string finish();           // flushes a pending incomplete tail (as U+FFFD, like decode)

 private:
  Tokenizer tokenizer_;
  bool skip_special_;
  std::vector<int32_t> ids_;      // ids since prefix_offset_ was last reset (window, not the whole stream)
  size_t prefix_offset_ = 0;      // window start: context so leading-space rules decode as in the full text
  size_t read_offset_ = 0;        // ids before this were emitted
};

}  // namespace nibble
