#pragma once
// The BPE model of tokenizer.json: vocab + ranked merges, byte_fallback (<0xXX> tokens), unk/fuse_unk,
// ignore_merges. Merging uses a priority queue over a linked list of symbols (lowest rank first,
// leftmost among equal ranks, as Hugging Face's Word::merge_all), so a word of n symbols costs
// O(n log n) — SentencePiece-style models without a pre-tokenizer merge a whole input as one word.
#include <nlohmann/json_fwd.hpp>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace nibble {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using TokenIndex = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

class BpeModel {
 public:
  // json: the "model" object. Throws nibble::Error for a non-BPE type, dropout, a merge whose parts or
  // result are not in the vocab, or a malformed field.
  explicit BpeModel(const nlohmann::json& json);

  // Appends the ids of one pre-tokenized word (in the vocab's alphabet).
  void encode_word(std::string_view word, std::vector<int32_t>& ids) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;
  const std::string* id_to_token(int32_t id) const;  // nullptr when id is not in the vocab
  // A <0xXX> token of a byte_fallback model (the ByteFallback decoder turns runs of them into bytes).
  bool is_byte_token(int32_t id) const {
    return byte_fallback_ && id >= 0 && static_cast<size_t>(id) < is_byte_token_.size() && is_byte_token_[id];
  }
  int32_t max_id() const { return static_cast<int32_t>(id_to_token_.size()) - 1; }

 private:
  struct Merge {
    int32_t rank;
    int32_t result;
  };
  static uint64_t pair_key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  void initial_symbols(std::string_view word, std::vector<int32_t>& symbols, std::vector<uint32_t>& lengths) const;

  TokenIndex vocab_;
  std::vector<std::string> id_to_token_;                // index = id
  std::vector<bool> has_id_;                            // index = id: false for gaps in the vocab
  std::unordered_map<uint64_t, Merge> merges_;          // (left id, right id) -> rank, merged id
  std::optional<int32_t> unk_id_;
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  std::array<int32_t, 256> byte_ids_{};                 // <0xXX> token ids (-1 when absent)
  std::vector<bool> is_byte_token_;                     // index = id
};

}  // namespace nibble
