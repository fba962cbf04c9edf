#include "model/checkpoint.h"

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>
#include <utility>

#include <nlohmann/json.hpp>

#include "common/error.h"

namespace nibble::model {

namespace fs = std::filesystem;

namespace {

constexpr const char* kConfigFile = "config.json";
constexpr const char* kSingleWeightsFile = "model.safetensors";
constexpr const char* kIndexFile = "model.safetensors.index.json";
constexpr const char* kGenerationConfigFile = "generation_config.json";
// The index is small (one line per tensor); a bound keeps a hostile file from exhausting memory.
constexpr uintmax_t kMaxIndexBytes = 64ull << 20;

nlohmann::json read_json_file(const fs::path& path, uintmax_t max_bytes) {
  std::error_code ec;
  const uintmax_t size = fs::file_size(path, ec);
  NIBBLE_CHECK(!ec, "cannot read {}: {}", path.string(), ec.message());
  NIBBLE_CHECK(size <= max_bytes, "{} is {} bytes, more than the limit of {}", path.string(), size,
               max_bytes);
  std::ifstream in(path, std::ios::binary);
  NIBBLE_CHECK(in.good(), "cannot open {}", path.string());
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json json = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  NIBBLE_CHECK(!json.is_discarded(), "{} is not valid JSON", path.string());
  NIBBLE_CHECK(json.is_object(), "{} is not a JSON object", path.string());
  return json;
}

// A shard name from the index must be a plain file name inside the model directory.
void check_shard_name(const std::string& name, const fs::path& index_path) {
  NIBBLE_CHECK(!name.empty() && name != "." && name != ".." &&
                   name.find('/') == std::string::npos && name.find('\\') == std::string::npos &&
                   name.find('\0') == std::string::npos,
               "{}: shard name '{}' is not a plain file name in the model directory",
               index_path.string(), name);
}

// The shard files named by the index, each once, in name order; checks that every tensor it maps
// is in the shard it names.
std::vector<fs::path> open_sharded(const fs::path& dir, TensorStore& store) {
  const fs::path index_path = dir / kIndexFile;
  const nlohmann::json index = read_json_file(index_path, kMaxIndexBytes);
  const auto map_it = index.find("weight_map");
  NIBBLE_CHECK(map_it != index.end() && map_it->is_object(),
               "{}: missing or non-object \"weight_map\"", index_path.string());
  NIBBLE_CHECK(!map_it->empty(), "{}: \"weight_map\" is empty", index_path.string());

  std::set<std::string> shard_names;
  for (const auto& [tensor, shard] : map_it->items()) {
    NIBBLE_CHECK(shard.is_string(), "{}: weight_map entry for '{}' is not a file name",
                 index_path.string(), tensor);
    check_shard_name(shard.get<std::string>(), index_path);
    shard_names.insert(shard.get<std::string>());
  }

  std::vector<fs::path> paths;
  for (const auto& name : shard_names) {
    const fs::path path = dir / name;
    NIBBLE_CHECK(fs::is_regular_file(path), "missing shard {} (listed in {}) in model directory {}",
                 name, kIndexFile, dir.string());
    store.add_file(SafetensorsFile::open(path));
    paths.push_back(path);
  }
  for (const auto& [tensor, shard] : map_it->items()) {
    const std::string actual = store.source_of(tensor);
    NIBBLE_CHECK(!actual.empty() && fs::path(actual).filename() == shard.get<std::string>(),
                 "{} maps tensor '{}' to {}, which does not hold it", index_path.string(), tensor,
                 shard.get<std::string>());
  }
  return paths;
}

// Appends the ids in `value` (an integer, a list of integers, or null) to `ids`, skipping ones
// already present.
void merge_ids(const nlohmann::json& value, const std::string& source, const char* field,
               std::vector<int64_t>& ids) {
  auto add = [&](const nlohmann::json& id) {
    NIBBLE_CHECK(id.is_number_integer() && id.get<int64_t>() >= 0,
                 "{}: \"{}\" must be a non-negative integer or a list of them", source, field);
    const int64_t v = id.get<int64_t>();
    if (std::find(ids.begin(), ids.end(), v) == ids.end()) ids.push_back(v);
  };
  if (value.is_null()) return;
  if (value.is_array()) {
    for (const auto& id : value) add(id);
  } else {
    add(value);
  }
}

}  // namespace

// ---- TensorStore -------------------------------------------------------------------------------

void TensorStore::add_file(SafetensorsFile file) {
  auto shared = std::make_shared<const SafetensorsFile>(std::move(file));
  const size_t position = files_.size();
  for (const auto& info : shared->tensors()) {
    const auto [it, inserted] = index_.emplace(info.name, position);
    NIBBLE_CHECK(inserted, "tensor '{}' appears in both {} and {}", info.name,
                 files_[it->second]->source(), shared->source());
  }
  files_.push_back(std::move(shared));
}

std::optional<TensorView> TensorStore::find(const std::string& name) const {
  const auto it = index_.find(name);
  if (it == index_.end()) return std::nullopt;
  return files_[it->second]->find(name);
}

std::string TensorStore::source_of(const std::string& name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? std::string() : files_[it->second]->source();
}

// ---- generation_config.json --------------------------------------------------------------------

void merge_generation_config(const nlohmann::json& generation_config, const std::string& source,
                             config::ModelConfig& config) {
  NIBBLE_CHECK(generation_config.is_object(), "{} is not a JSON object", source);
  if (const auto it = generation_config.find("eos_token_id"); it != generation_config.end())
    merge_ids(*it, source, "eos_token_id", config.eos_token_ids);
  if (const auto it = generation_config.find("bos_token_id");
      it != generation_config.end() && !it->is_null()) {
    NIBBLE_CHECK(it->is_number_integer() && it->get<int64_t>() >= 0,
                 "{}: \"bos_token_id\" must be a non-negative integer", source);
    config.bos_token_id = it->get<int64_t>();
  }
}

// ---- open_checkpoint ---------------------------------------------------------------------------

Checkpoint open_checkpoint(const fs::path& dir) {
  NIBBLE_CHECK(fs::is_directory(dir), "model directory {} does not exist or is not a directory",
               dir.string());
  Checkpoint checkpoint;
  checkpoint.dir = dir;

  const fs::path config_path = dir / kConfigFile;
  NIBBLE_CHECK(fs::is_regular_file(config_path), "missing {} in model directory {}", kConfigFile,
               dir.string());
  checkpoint.config = config::load_model_config(config_path);

  const fs::path generation_path = dir / kGenerationConfigFile;
  if (fs::exists(generation_path))
    merge_generation_config(read_json_file(generation_path, kMaxIndexBytes),
                            generation_path.string(), checkpoint.config);

  // As transformers does: a single model.safetensors wins over an index.
  auto store = std::make_shared<TensorStore>();
  if (const fs::path single = dir / kSingleWeightsFile; fs::is_regular_file(single)) {
    store->add_file(SafetensorsFile::open(single));
    checkpoint.weight_files.push_back(single);
  } else if (fs::is_regular_file(dir / kIndexFile)) {
    checkpoint.weight_files = open_sharded(dir, *store);
  } else {
    NIBBLE_FAIL("missing weights: neither {} nor {} in model directory {}", kSingleWeightsFile,
                kIndexFile, dir.string());
  }
  checkpoint.tensors = std::move(store);
  return checkpoint;
}

}  // namespace nibble::model
