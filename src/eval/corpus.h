#pragma once
// A text corpus cut into documents of a fixed context length for perplexity scoring.
//
// The corpus is split into passages at blank lines ("\n\n"); each passage is tokenized with the
// model's special tokens (so Llama-style tokenizers start every passage with BOS, as in training
// data), the passages' ids are concatenated in file order, and the stream is cut into consecutive
// windows of `context` tokens. The incomplete tail is dropped, so every document has exactly
// `context` tokens and every configuration sees the same positions.
#include <cstdint>
#include <filesystem>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace nibble::eval {

struct CorpusOptions {
  int64_t context = 512;    // tokens per document
  int64_t max_documents = 0;  // 0 = every complete window
};

// [documents][context] token ids. Throws nibble::Error when context < 2 or the corpus has fewer
// than `context` tokens (the message gives both counts).
std::vector<std::vector<int32_t>> make_documents(const Tokenizer& tokenizer, std::string_view text,
                                                 const CorpusOptions& options);

// The same from a file; the error names the path when it cannot be read or is empty.
std::vector<std::vector<int32_t>> load_documents(const Tokenizer& tokenizer, const std::filesystem::path& path,
                                                 const CorpusOptions& options);

}  // namespace nibble::eval
