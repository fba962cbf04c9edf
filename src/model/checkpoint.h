#pragma once
// A Hugging Face model directory, opened: its config (with generation_config.json's stop ids
// merged in) and the tensors of its safetensors file(s), memory-mapped.
//
//   DIR/config.json                        required
//   DIR/model.safetensors                  one file, or else
//   DIR/model.safetensors.index.json       {"weight_map": {"<tensor>": "<shard file>", ...}}
//   DIR/model-0000K-of-0000N.safetensors   the shards it names
//   DIR/generation_config.json             optional: eos_token_id (int or list), bos_token_id
// (tokenizer.json / tokenizer_config.json are read by src/tokenizer.)
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "config/model_config.h"
#include "model/safetensors.h"

namespace nibble::model {

// The tensors of one checkpoint across its files. A tensor name appears in exactly one file.
// Views stay valid as long as the TensorStore lives (it owns the mappings).
class TensorStore {
 public:
  // Adds every tensor of `file`. Throws nibble::Error when a name is already in another file.
  void add_file(SafetensorsFile file);

  std::optional<TensorView> find(const std::string& name) const;
  // The file holding `name` (for messages), or "" when absent.
  std::string source_of(const std::string& name) const;

  const std::vector<std::shared_ptr<const SafetensorsFile>>& files() const { return files_; }
  size_t tensor_count() const { return index_.size(); }

 private:
  std::vector<std::shared_ptr<const SafetensorsFile>> files_;
  std::map<std::string, size_t, std::less<>> index_;  // tensor name -> position in files_
};

struct Checkpoint {
  std::filesystem::path dir;
  // From config.json; eos_token_ids also holds generation_config.json's eos ids (config's first,
  // then the new ones, no duplicates) and bos_token_id is generation_config.json's when it sets one.
  config::ModelConfig config;
  std::vector<std::filesystem::path> weight_files;  // the safetensors files opened, in name order
  std::shared_ptr<const TensorStore> tensors;
};

// Opens the model directory `dir`. Throws nibble::Error naming the file and the directory when
// config.json, the weights or a shard named by the index is missing, and naming the problem when
// a file is malformed (see parse_safetensors, config::load_model_config).
Checkpoint open_checkpoint(const std::filesystem::path& dir);

// Merges generation_config.json (parsed) into `config`'s stop and bos ids as described above.
// `source` names the file in messages; a wrongly typed eos/bos field throws nibble::Error.
void merge_generation_config(const nlohmann::json& generation_config, const std::string& source,
                             config::ModelConfig& config);

}  // namespace nibble::model
