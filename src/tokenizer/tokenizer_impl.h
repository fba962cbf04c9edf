#pragma once
// The state behind nibble::Tokenizer (shared by tokenizer.cpp, chat.cpp and the streaming detokenizer).
#include <nlohmann/json.hpp>

#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe.h"
#include "tokenizer/decoders.h"
#include "tokenizer/normalizers.h"
#include "tokenizer/post_processors.h"
#include "tokenizer/pre_tokenizers.h"
#include "tokenizer/tokenizer.h"

namespace nibble {

struct Tokenizer::Impl {
  std::unique_ptr<BpeModel> model;
  std::unique_ptr<Normalizer> normalizer;        // null: none
  std::unique_ptr<PreTokenizer> pre_tokenizer;   // null: the whole piece is one word
  std::unique_ptr<PostProcessor> post_processor; // null: add_special adds nothing
  std::unique_ptr<Decoder> decoder;              // null: tokens joined with " " (Hugging Face's default)

  std::vector<AddedToken> added;                  // tokenizer.json added_tokens, in file order
  std::unordered_map<int32_t, size_t> added_by_id;  // id -> index into added
  TokenIndex added_by_content;
  std::unique_ptr<AddedTokenMatcher> raw_matcher;         // normalized = false tokens, on the raw text
  std::unique_ptr<AddedTokenMatcher> normalized_matcher;  // normalized = true tokens, after normalization
  int32_t vocab_size = 0;

  // tokenizer_config.json
  std::string bos_token, eos_token;
  std::optional<ChatTemplate> chat_template;

  const std::string* token_text(int32_t id) const;  // added token or model vocab; nullptr if unknown
  void encode_text(std::string_view text, bool at_input_start, std::vector<int32_t>& ids) const;
};

}  // namespace nibble
