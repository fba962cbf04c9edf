#include "tokenizer/bpe.h"

#include <fmt/format.h>

#include <queue>

#include "tokenizer/json_fields.h"
#include "tokenizer/utf8.h"

namespace nibble {
namespace tj = tokenizer_json;

BpeModel::BpeModel(const nlohmann::json& json) {
  const std::string type = tj::type_of(json, "model");
  NIBBLE_CHECK(type == "BPE", "tokenizer.json: unsupported model type \"{}\" (supported: BPE)", type);
  const auto dropout = json.find("dropout");
  NIBBLE_CHECK(dropout == json.end() || dropout->is_null(), "tokenizer.json: BPE dropout is not supported");
  for (const char* affix : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const auto it = json.find(affix);
    NIBBLE_CHECK(it == json.end() || it->is_null() || (it->is_string() && it->get<std::string>().empty()),
                 "tokenizer.json: BPE {} is not supported", affix);
  }
  fuse_unk_ = tj::bool_field(json, "fuse_unk", "model", false);
  byte_fallback_ = tj::bool_field(json, "byte_fallback", "model", false);
  ignore_merges_ = tj::bool_field(json, "ignore_merges", "model", false);

  const auto& vocab = tj::field(json, "vocab", "model");
  NIBBLE_CHECK(vocab.is_object(), "tokenizer.json: model.vocab must be an object");
  // Vocab ids are dense in real files; the bound keeps a hostile file from sizing the id -> token
  // table far beyond its own entries.
  const int64_t id_limit = static_cast<int64_t>(vocab.size()) + 65536;
  vocab_.reserve(vocab.size());
  for (const auto& [token, id_json] : vocab.items()) {
    NIBBLE_CHECK(id_json.is_number_integer(), "tokenizer.json: vocab id of {:?} is not an integer", token);
    const int64_t id = id_json.get<int64_t>();
    NIBBLE_CHECK(id >= 0 && id < id_limit, "tokenizer.json: vocab id {} of {:?} is out of range [0, {})", id, token,
                 id_limit);
    NIBBLE_CHECK(utf8::is_valid(token), "tokenizer.json: a vocab token is not valid UTF-8");
    if (static_cast<size_t>(id) >= id_to_token_.size()) {
      id_to_token_.resize(id + 1);
      has_id_.resize(id + 1, false);
    }
    id_to_token_[id] = token;
    has_id_[id] = true;
    vocab_.emplace(token, static_cast<int32_t>(id));
  }

  const auto& merges = tj::array_field(json, "merges", "model");
  merges_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& m = merges[rank];
    std::string left, right;
    if (m.is_string()) {  // "a b"
      const std::string s = m.get<std::string>();
      const size_t space = s.find(' ');
      NIBBLE_CHECK(space != std::string::npos && s.find(' ', space + 1) == std::string::npos,
                   "tokenizer.json: merge {} {:?} is not two tokens separated by one space", rank, s);
      left = s.substr(0, space);
      right = s.substr(space + 1);
    } else {  // ["a", "b"]
      NIBBLE_CHECK(m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string(),
                   "tokenizer.json: merge {} must be \"a b\" or [\"a\", \"b\"]", rank);
      left = m[0].get<std::string>();
      right = m[1].get<std::string>();
    }
    const auto l = vocab_.find(left), r = vocab_.find(right), result = vocab_.find(left + right);
    NIBBLE_CHECK(l != vocab_.end() && r != vocab_.end(), "tokenizer.json: merge {} uses {:?} or {:?}, not in the vocab",
                 rank, left, right);
    NIBBLE_CHECK(result != vocab_.end(), "tokenizer.json: merge {} result {:?} is not in the vocab", rank, left + right);
    merges_.try_emplace(pair_key(l->second, r->second), Merge{static_cast<int32_t>(rank), result->second});
  }

  const auto unk = json.find("unk_token");
  if (unk != json.end() && !unk->is_null()) {
    NIBBLE_CHECK(unk->is_string(), "tokenizer.json: model.unk_token must be a string or null");
    const auto it = vocab_.find(unk->get<std::string>());
    NIBBLE_CHECK(it != vocab_.end(), "tokenizer.json: unk_token {:?} is not in the vocab", unk->get<std::string>());
    unk_id_ = it->second;
  }
  byte_ids_.fill(-1);
  if (byte_fallback_) {
    for (int b = 0; b < 256; ++b) {
      const auto it = vocab_.find(fmt::format("<0x{:02X}>", b));
      if (it == vocab_.end()) continue;
      byte_ids_[b] = it->second;
      if (is_byte_token_.size() <= static_cast<size_t>(it->second)) is_byte_token_.resize(it->second + 1, false);
      is_byte_token_[it->second] = true;
    }
  }
}

std::optional<int32_t> BpeModel::token_to_id(std::string_view token) const {
  const auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* BpeModel::id_to_token(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= id_to_token_.size()) return nullptr;
  return has_id_[id] ? &id_to_token_[id] : nullptr;
}

// One symbol per character: its vocab id; else its <0xXX> byte tokens (byte_fallback); else unk
// (consecutive unks fused when fuse_unk); else the character is dropped, as Hugging Face does.
void BpeModel::initial_symbols(std::string_view word, std::vector<int32_t>& symbols,
                               std::vector<uint32_t>& lengths) const {
  bool previous_unk = false;
  for (size_t i = 0; i < word.size();) {
    size_t n = utf8::valid_sequence_length(word, i);
    if (n == 0) n = 1;
    const std::string_view ch = word.substr(i, n);
    i += n;
    if (const auto it = vocab_.find(ch); it != vocab_.end()) {
      symbols.push_back(it->second);
      lengths.push_back(static_cast<uint32_t>(n));
      previous_unk = false;
      continue;
    }
    if (byte_fallback_) {
      bool all_bytes = true;
      for (char c : ch) all_bytes = all_bytes && byte_ids_[static_cast<uint8_t>(c)] >= 0;
      if (all_bytes) {
        for (char c : ch) {
          symbols.push_back(byte_ids_[static_cast<uint8_t>(c)]);
          lengths.push_back(1);
        }
        previous_unk = false;
        continue;
      }
    }
    if (!unk_id_) continue;
    if (fuse_unk_ && previous_unk) {
      lengths.back() += static_cast<uint32_t>(n);
    } else {
      symbols.push_back(*unk_id_);
      lengths.push_back(static_cast<uint32_t>(n));
    }
    previous_unk = true;
  }
}

void BpeModel::encode_word(std::string_view word, std::vector<int32_t>& ids) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    if (const auto it = vocab_.find(word); it != vocab_.end()) {
      ids.push_back(it->second);
      return;
    }
  }
  std::vector<int32_t> symbols;   // [n] token id of each live symbol
  std::vector<uint32_t> lengths;  // [n] byte length (0 = merged away)
  initial_symbols(word, symbols, lengths);
  const size_t n = symbols.size();
  std::vector<int32_t> prev(n), next(n);  // doubly linked list over live symbols; -1 = none
  for (size_t i = 0; i < n; ++i) {
    prev[i] = static_cast<int32_t>(i) - 1;
    next[i] = i + 1 < n ? static_cast<int32_t>(i + 1) : -1;
  }
  struct Candidate {
    int32_t rank, pos, result;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  auto push_pair = [&](int32_t left) {
    const int32_t right = next[left];
    if (left < 0 || right < 0) return;
    if (const auto it = merges_.find(pair_key(symbols[left], symbols[right])); it != merges_.end())
      queue.push({it->second.rank, left, it->second.result});
  };
  for (size_t i = 0; i + 1 < n; ++i) push_pair(static_cast<int32_t>(i));
  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    const int32_t right = next[c.pos];
    // Stale entry: the left symbol was merged away or changed, or its right neighbour changed.
    if (lengths[c.pos] == 0 || right < 0) continue;
    const auto it = merges_.find(pair_key(symbols[c.pos], symbols[right]));
    if (it == merges_.end() || it->second.result != c.result || it->second.rank != c.rank) continue;
    symbols[c.pos] = c.result;
    lengths[c.pos] += lengths[right];
    lengths[right] = 0;
    next[c.pos] = next[right];
    if (next[right] >= 0) prev[next[right]] = c.pos;
    if (prev[c.pos] >= 0) push_pair(prev[c.pos]);
    push_pair(c.pos);
  }
  for (size_t i = 0; i < n; ++i)
    if (lengths[i] != 0) ids.push_back(symbols[i]);
}

}  // namespace nibble
