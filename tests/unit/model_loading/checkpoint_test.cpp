// Opening Hugging Face model directories: single file, shards with an index, generation_config.json,
// and every missing or inconsistent file.
#include "model/checkpoint.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "unit/model_loading/synthetic_checkpoint.h"

namespace nibble::model {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::SyntheticModel;
using testing::TempDir;
using testing::write_synthetic_checkpoint;

namespace fs = std::filesystem;

std::string open_error(const fs::path& dir) {
  try {
    open_checkpoint(dir);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

void write_text(const fs::path& path, const std::string& text) { std::ofstream(path) << text; }

TEST(Checkpoint, OpensStories260k) {
  const fs::path dir = fs::path(NIBBLE_SOURCE_DIR) / "models/stories260k";
  const Checkpoint c = open_checkpoint(dir);
  EXPECT_EQ(c.config.architecture, config::Architecture::kLlama);
  EXPECT_EQ(c.config.num_layers, 5);
  EXPECT_TRUE(c.config.tie_word_embeddings);
  ASSERT_EQ(c.weight_files.size(), 1u);
  EXPECT_EQ(c.weight_files[0].filename(), "model.safetensors");
  EXPECT_EQ(c.tensors->tensor_count(), 47u);  // 1 + 5 layers × 9 + 1, tied: no lm_head
  EXPECT_EQ(c.config.eos_token_ids, (std::vector<int64_t>{2}));  // no generation_config.json
  EXPECT_EQ(c.config.bos_token_id, 1);
}

TEST(Checkpoint, OpensShardsThroughTheIndex) {
  TempDir tmp("ckpt_sharded");
  SyntheticModel m{.shards = 3};
  write_synthetic_checkpoint(tmp.path(), m);
  const Checkpoint c = open_checkpoint(tmp.path());
  ASSERT_EQ(c.weight_files.size(), 3u);
  EXPECT_EQ(c.weight_files[0].filename(), "model-00001-of-00003.safetensors");
  EXPECT_EQ(c.weight_files[2].filename(), "model-00003-of-00003.safetensors");
  const auto expected = testing::synthetic_tensors(m);
  EXPECT_EQ(c.tensors->tensor_count(), expected.size());
  // Round-robin: tensor i is in shard i % 3.
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_THAT(c.tensors->source_of(expected[i].name),
                HasSubstr(fmt::format("model-{:05d}-of-00003.safetensors", i % 3 + 1)));
    ASSERT_TRUE(c.tensors->find(expected[i].name).has_value()) << expected[i].name;
  }
}

TEST(Checkpoint, GenerationConfigMergesStopIds) {
  TempDir tmp("ckpt_genconfig");
  write_synthetic_checkpoint(tmp.path(), SyntheticModel{});  // config.json: eos 2, bos 1
  write_text(tmp.path() / "generation_config.json", R"({"eos_token_id": [7, 2, 9], "bos_token_id": 5})");
  Checkpoint c = open_checkpoint(tmp.path());
  EXPECT_EQ(c.config.eos_token_ids, (std::vector<int64_t>{2, 7, 9}));
  EXPECT_EQ(c.config.bos_token_id, 5);

  write_text(tmp.path() / "generation_config.json", R"({"eos_token_id": 11, "bos_token_id": null})");
  c = open_checkpoint(tmp.path());
  EXPECT_EQ(c.config.eos_token_ids, (std::vector<int64_t>{2, 11}));
  EXPECT_EQ(c.config.bos_token_id, 1);

  write_text(tmp.path() / "generation_config.json", R"({"eos_token_id": "2"})");
  EXPECT_THAT(open_error(tmp.path()),
              AllOf(HasSubstr("generation_config.json"), HasSubstr("\"eos_token_id\" must be")));
  write_text(tmp.path() / "generation_config.json", R"({"eos_token_id": [2, -1]})");
  EXPECT_THAT(open_error(tmp.path()), HasSubstr("\"eos_token_id\" must be a non-negative integer"));
  write_text(tmp.path() / "generation_config.json", R"({"bos_token_id": 1.5})");
  EXPECT_THAT(open_error(tmp.path()), HasSubstr("\"bos_token_id\" must be a non-negative integer"));
  write_text(tmp.path() / "generation_config.json", "{not json");
  EXPECT_THAT(open_error(tmp.path()), HasSubstr("generation_config.json is not valid JSON"));
}

TEST(Checkpoint, MissingDirectoryConfigOrWeights) {
  EXPECT_THAT(open_error("/nonexistent/model"),
              HasSubstr("model directory /nonexistent/model does not exist"));

  TempDir tmp("ckpt_missing");
  write_synthetic_checkpoint(tmp.path(), SyntheticModel{}, {.write_config = false});
  EXPECT_THAT(open_error(tmp.path()),
              HasSubstr("missing config.json in model directory " + tmp.path().string()));

  TempDir no_weights("ckpt_noweights");
  write_synthetic_checkpoint(no_weights.path(), SyntheticModel{});
  fs::remove(no_weights.path() / "model.safetensors");
  EXPECT_THAT(open_error(no_weights.path()),
              HasSubstr("missing weights: neither model.safetensors nor model.safetensors.index.json "
                        "in model directory " + no_weights.path().string()));
}

TEST(Checkpoint, MissingShard) {
  TempDir tmp("ckpt_missing_shard");
  write_synthetic_checkpoint(tmp.path(), SyntheticModel{.shards = 2});
  fs::remove(tmp.path() / "model-00002-of-00002.safetensors");
  EXPECT_THAT(open_error(tmp.path()),
              HasSubstr("missing shard model-00002-of-00002.safetensors (listed in "
                        "model.safetensors.index.json) in model directory " + tmp.path().string()));
}

TEST(Checkpoint, InconsistentIndex) {
  TempDir tmp("ckpt_bad_index");
  write_synthetic_checkpoint(tmp.path(), SyntheticModel{.shards = 2});
  const fs::path index_path = tmp.path() / "model.safetensors.index.json";
  auto index = nlohmann::json::parse(std::ifstream(index_path));

  // A tensor mapped to the shard that does not hold it (tensor 0 is in shard 1).
  auto wrong = index;
  wrong["weight_map"]["model.embed_tokens.weight"] = "model-00002-of-00002.safetensors";
  write_text(index_path, wrong.dump());
  EXPECT_THAT(open_error(tmp.path()),
              HasSubstr("maps tensor 'model.embed_tokens.weight' to model-00002-of-00002.safetensors, "
                        "which does not hold it"));

  // A tensor the index lists but no shard holds.
  auto phantom = index;
  phantom["weight_map"]["model.extra.weight"] = "model-00001-of-00002.safetensors";
  write_text(index_path, phantom.dump());
  EXPECT_THAT(open_error(tmp.path()), HasSubstr("maps tensor 'model.extra.weight'"));

  // A shard name that leaves the directory.
  auto escape = index;
  escape["weight_map"]["model.norm.weight"] = "../model-00001-of-00002.safetensors";
  write_text(index_path, escape.dump());
  EXPECT_THAT(open_error(tmp.path()),
              HasSubstr("shard name '../model-00001-of-00002.safetensors' is not a plain file name"));

  write_text(index_path, R"({"metadata": {}})");
  EXPECT_THAT(open_error(tmp.path()), HasSubstr("missing or non-object \"weight_map\""));
  write_text(index_path, R"({"weight_map": {"a": 3}})");
  EXPECT_THAT(open_error(tmp.path()), HasSubstr("weight_map entry for 'a' is not a file name"));
}

TEST(Checkpoint, TensorInTwoShards) {
  TempDir tmp("ckpt_dup");
  SyntheticModel m{.shards = 2};
  write_synthetic_checkpoint(tmp.path(), m);
  // Rewrite shard 2 with an extra copy of shard 1's first tensor.
  auto tensors = testing::synthetic_tensors(m);
  std::vector<testing::TestTensor> shard2;
  for (size_t i = 1; i < tensors.size(); i += 2) shard2.push_back(tensors[i]);
  shard2.push_back(tensors[0]);
  testing::write_bytes(tmp.path() / "model-00002-of-00002.safetensors", testing::build_safetensors(shard2));
  EXPECT_THAT(open_error(tmp.path()),
              AllOf(HasSubstr("tensor 'model.embed_tokens.weight' appears in both"),
                    HasSubstr("model-00001-of-00002.safetensors"), HasSubstr("model-00002-of-00002.safetensors")));
}

TEST(Checkpoint, CorruptWeightsFileNamesTheFile) {
  TempDir tmp("ckpt_corrupt");
  write_synthetic_checkpoint(tmp.path(), SyntheticModel{});
  const fs::path weights = tmp.path() / "model.safetensors";
  fs::resize_file(weights, fs::file_size(weights) - 10);
  EXPECT_THAT(open_error(tmp.path()),
              AllOf(HasSubstr(weights.string()), HasSubstr("lm_head.weight"), HasSubstr("out of range")));
}

}  // namespace
}  // namespace nibble::model
