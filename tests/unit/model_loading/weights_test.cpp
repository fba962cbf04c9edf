// Mapping HF tensors into ModelWeights: every architecture's names and shapes, float32 values
// checked against the synthetic formula (or raw file bytes), and every missing/misshapen tensor.
#include "model/weights.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
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
using testing::TestTensor;
using testing::synthetic_value;
using testing::write_synthetic_checkpoint;

namespace fs = std::filesystem;

// Every element of `t` equals the synthetic formula for `name` (name given separately so a tied
// lm_head can be checked against the embedding's formula).
void expect_synthetic(const WeightTensor& t, const std::string& name, std::vector<int64_t> shape) {
  ASSERT_NE(t.f32, nullptr) << name;
  EXPECT_EQ(t.shape, shape) << name;
  for (int64_t i = 0; i < t.numel(); ++i)
    ASSERT_EQ(t.f32[i], synthetic_value(name, i)) << name << " element " << i;
}

// Checks every field of `w` against the synthetic model `m`.
void expect_model(const ModelWeights& w, const SyntheticModel& m) {
  const int64_t q_dim = m.heads * m.head_dim, kv_dim = m.kv_heads * m.head_dim;
  expect_synthetic(w.embed, "model.embed_tokens.weight", {m.vocab, m.hidden});
  ASSERT_EQ(w.layers.size(), static_cast<size_t>(m.layers));
  for (int64_t i = 0; i < m.layers; ++i) {
    const LayerWeights& l = w.layers[static_cast<size_t>(i)];
    const std::string p = fmt::format("model.layers.{}.", i);
    expect_synthetic(l.attn_norm, p + "input_layernorm.weight", {m.hidden});
    expect_synthetic(l.wq, p + "self_attn.q_proj.weight", {q_dim, m.hidden});
    expect_synthetic(l.wk, p + "self_attn.k_proj.weight", {kv_dim, m.hidden});
    expect_synthetic(l.wv, p + "self_attn.v_proj.weight", {kv_dim, m.hidden});
    expect_synthetic(l.wo, p + "self_attn.o_proj.weight", {m.hidden, q_dim});
    expect_synthetic(l.mlp_norm, p + "post_attention_layernorm.weight", {m.hidden});
    expect_synthetic(l.w_gate, p + "mlp.gate_proj.weight", {m.intermediate, m.hidden});
    expect_synthetic(l.w_up, p + "mlp.up_proj.weight", {m.intermediate, m.hidden});
    expect_synthetic(l.w_down, p + "mlp.down_proj.weight", {m.hidden, m.intermediate});
    ASSERT_EQ(l.bq.has_value(), m.biases);
    ASSERT_EQ(l.bk.has_value(), m.biases);
    ASSERT_EQ(l.bv.has_value(), m.biases);
    if (m.biases) {
      expect_synthetic(*l.bq, p + "self_attn.q_proj.bias", {q_dim});
      expect_synthetic(*l.bk, p + "self_attn.k_proj.bias", {kv_dim});
      expect_synthetic(*l.bv, p + "self_attn.v_proj.bias", {kv_dim});
    }
    ASSERT_EQ(l.q_norm.has_value(), m.qk_norm);
    ASSERT_EQ(l.k_norm.has_value(), m.qk_norm);
    if (m.qk_norm) {
      expect_synthetic(*l.q_norm, p + "self_attn.q_norm.weight", {m.head_dim});
      expect_synthetic(*l.k_norm, p + "self_attn.k_norm.weight", {m.head_dim});
    }
  }
  expect_synthetic(w.final_norm, "model.norm.weight", {m.hidden});
  EXPECT_EQ(w.tied_embeddings, m.tied);
  if (m.tied) {
    EXPECT_EQ(w.lm_head.f32, w.embed.f32);
    expect_synthetic(w.lm_head, "model.embed_tokens.weight", {m.vocab, m.hidden});
  } else {
    EXPECT_NE(w.lm_head.f32, w.embed.f32);
    expect_synthetic(w.lm_head, "lm_head.weight", {m.vocab, m.hidden});
  }
}

ModelWeights load_dir(const fs::path& dir, const LoadWeightsOptions& options = {}) {
  return load_weights(open_checkpoint(dir), options);
}

std::string load_error(const fs::path& dir) {
  try {
    load_dir(dir);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TestTensor* find(std::vector<TestTensor>& tensors, const std::string& name) {
  for (auto& t : tensors)
    if (t.name == name) return &t;
  throw std::logic_error("no test tensor " + name);
}

TEST(Weights, Stories260kTiedF32ZeroCopy) {
  const fs::path path = fs::path(NIBBLE_SOURCE_DIR) / "models/stories260k";
  const ModelWeights w = load_dir(path);
  EXPECT_TRUE(w.tied_embeddings);
  ASSERT_EQ(w.layers.size(), 5u);
  EXPECT_EQ(w.embed.shape, (std::vector<int64_t>{512, 64}));
  EXPECT_EQ(w.layers[2].wq.shape, (std::vector<int64_t>{64, 64}));
  EXPECT_EQ(w.layers[2].wk.shape, (std::vector<int64_t>{32, 64}));
  EXPECT_EQ(w.layers[2].wo.shape, (std::vector<int64_t>{64, 64}));
  EXPECT_EQ(w.layers[4].w_gate.shape, (std::vector<int64_t>{172, 64}));
  EXPECT_EQ(w.layers[4].w_down.shape, (std::vector<int64_t>{64, 172}));
  EXPECT_FALSE(w.layers[0].bq.has_value());
  EXPECT_FALSE(w.layers[0].q_norm.has_value());
  // F32 stays on the mapping: no copies, the float pointer is the raw pointer.
  EXPECT_EQ(w.converted_bytes, 0u);
  EXPECT_EQ(reinterpret_cast<const std::byte*>(w.embed.f32), w.embed.raw);
  EXPECT_EQ(w.lm_head.f32, w.embed.f32);
  EXPECT_EQ(w.stored_bytes, 1044984u - 8u - 4848u);  // the whole data section, every tensor used once

  // Values against the file's bytes, read independently: header length, JSON offsets, floats.
  std::ifstream in(path / "model.safetensors", std::ios::binary);
  uint64_t header_len = 0;
  in.read(reinterpret_cast<char*>(&header_len), 8);
  std::string header_text(header_len, '\0');
  in.read(header_text.data(), static_cast<std::streamsize>(header_len));
  const auto header = nlohmann::json::parse(header_text);
  auto expect_first_floats = [&](const WeightTensor& t, const std::string& name) {
    const uint64_t begin = header[name]["data_offsets"][0];
    float expected[8];
    in.seekg(static_cast<std::streamoff>(8 + header_len + begin));
    in.read(reinterpret_cast<char*>(expected), sizeof expected);
    for (int i = 0; i < 8; ++i) EXPECT_EQ(t.f32[i], expected[i]) << name << " element " << i;
  };
  expect_first_floats(w.embed, "model.embed_tokens.weight");
  expect_first_floats(w.lm_head, "model.embed_tokens.weight");
  expect_first_floats(w.layers[1].wv, "model.layers.1.self_attn.v_proj.weight");
  expect_first_floats(w.layers[4].w_down, "model.layers.4.mlp.down_proj.weight");
  expect_first_floats(w.final_norm, "model.norm.weight");
}

TEST(Weights, LlamaUntiedShardedF32) {
  TempDir tmp("w_llama");
  const SyntheticModel m{.layers = 3, .shards = 2};
  write_synthetic_checkpoint(tmp.path(), m);
  const ModelWeights w = load_dir(tmp.path());
  expect_model(w, m);
  EXPECT_EQ(w.converted_bytes, 0u);
}

TEST(Weights, Bf16AndF16ConvertedOnce) {
  for (const char* dtype : {"BF16", "F16"}) {
    TempDir tmp("w_half");
    const SyntheticModel m{.dtype = dtype, .shards = 2};
    write_synthetic_checkpoint(tmp.path(), m);
    const ModelWeights w = load_dir(tmp.path());
    SCOPED_TRACE(dtype);
    expect_model(w, m);
    EXPECT_EQ(w.embed.dtype, *dtype_from_name(dtype));
    EXPECT_EQ(w.converted_bytes, 2 * w.stored_bytes);  // every weight: 2 bytes stored -> 4 owned
  }
}

TEST(Weights, TiedBf16SharesOneConversion) {
  TempDir tmp("w_tied");
  const SyntheticModel m{.tied = true, .dtype = "BF16"};
  write_synthetic_checkpoint(tmp.path(), m);
  const ModelWeights w = load_dir(tmp.path());
  expect_model(w, m);
  EXPECT_EQ(w.converted_bytes, 2 * w.stored_bytes);  // embed converted once, not twice
}

TEST(Weights, Qwen2Biases) {
  TempDir tmp("w_qwen2");
  const SyntheticModel m{.architecture = "Qwen2ForCausalLM", .model_type = "qwen2", .kv_heads = 2,
                         .biases = true, .dtype = "BF16"};
  write_synthetic_checkpoint(tmp.path(), m);
  expect_model(load_dir(tmp.path()), m);
  // The config alone implies the biases for qwen2: without them the load fails naming one.
  TempDir missing("w_qwen2_missing");
  write_synthetic_checkpoint(missing.path(), m, {.edit_tensors = [](auto& tensors) {
                               std::erase_if(tensors, [](const TestTensor& t) {
                                 return t.name == "model.layers.1.self_attn.k_proj.bias";
                               });
                             }});
  EXPECT_THAT(load_error(missing.path()),
              HasSubstr("missing tensor 'model.layers.1.self_attn.k_proj.bias' (expected shape [8], "
                        "attention_bias)"));
}

TEST(Weights, Qwen3QkNorms) {
  TempDir tmp("w_qwen3");
  const SyntheticModel m{.architecture = "Qwen3ForCausalLM", .model_type = "qwen3", .heads = 4,
                         .kv_heads = 2, .head_dim = 8, .tied = true, .qk_norm = true, .dtype = "F16"};
  write_synthetic_checkpoint(tmp.path(), m);
  expect_model(load_dir(tmp.path()), m);
}

TEST(Weights, MistralF32) {
  TempDir tmp("w_mistral");
  const SyntheticModel m{.architecture = "MistralForCausalLM", .model_type = "mistral"};
  write_synthetic_checkpoint(tmp.path(), m);
  expect_model(load_dir(tmp.path()), m);
}

TEST(Weights, MisalignedF32IsCopied) {
  TempDir tmp("w_misaligned");
  const SyntheticModel m{.layers = 1};
  fs::create_directories(tmp.path());
  write_synthetic_checkpoint(tmp.path(), m);
  // Rewrite the weights with a header of length 8k+1: the data section starts at an odd offset.
  testing::write_bytes(tmp.path() / "model.safetensors",
                       testing::build_safetensors(testing::synthetic_tensors(m), {.header_length_mod8 = 1}));
  const ModelWeights w = load_dir(tmp.path());
  expect_model(w, m);
  EXPECT_EQ(w.converted_bytes, w.stored_bytes);
  EXPECT_NE(reinterpret_cast<const std::byte*>(w.embed.f32), w.embed.raw);
}

TEST(Weights, WithoutConversionOnlyF32HasFloats) {
  TempDir tmp("w_noconvert");
  const SyntheticModel m{.dtype = "BF16"};
  write_synthetic_checkpoint(tmp.path(), m);
  const ModelWeights w = load_dir(tmp.path(), {.convert_to_f32 = false});
  EXPECT_EQ(w.converted_bytes, 0u);
  EXPECT_EQ(w.embed.f32, nullptr);
  EXPECT_THAT([&] { (void)w.layers[0].wq.f32_data(); },
              ::testing::ThrowsMessage<Error>(HasSubstr("'model.layers.0.self_attn.q_proj.weight' (BF16) has no float32")));
  // The raw bytes are the file's BF16 values.
  uint16_t first;
  std::memcpy(&first, w.embed.raw, 2);
  EXPECT_EQ(first, testing::bf16_bits_exact(synthetic_value("model.embed_tokens.weight", 0)));
}

TEST(Weights, ExtraTensorsAreIgnored) {
  TempDir tmp("w_extra");
  const SyntheticModel m{};
  write_synthetic_checkpoint(tmp.path(), m, {.edit_tensors = [](auto& tensors) {
                               tensors.push_back(testing::make_tensor(
                                   "model.layers.0.self_attn.rotary_emb.inv_freq", "F32", {2}, {1.0f, 0.01f}));
                             }});
  expect_model(load_dir(tmp.path()), m);
}

TEST(Weights, MissingTensor) {
  TempDir tmp("w_missing");
  write_synthetic_checkpoint(tmp.path(), SyntheticModel{}, {.edit_tensors = [](auto& tensors) {
                               std::erase_if(tensors, [](const TestTensor& t) {
                                 return t.name == "model.layers.1.mlp.up_proj.weight";
                               });
                             }});
  EXPECT_THAT(load_error(tmp.path()),
              HasSubstr("missing tensor 'model.layers.1.mlp.up_proj.weight' (expected shape [12, 8]) "
                        "in model directory " + tmp.path().string()));
}

TEST(Weights, UntiedWithoutLmHead) {
  TempDir tmp("w_nohead");
  write_synthetic_checkpoint(tmp.path(), SyntheticModel{}, {.edit_tensors = [](auto& tensors) {
                               std::erase_if(tensors, [](const TestTensor& t) { return t.name == "lm_head.weight"; });
                             }});
  EXPECT_THAT(load_error(tmp.path()),
              HasSubstr("missing tensor 'lm_head.weight' (expected shape [16, 8], tie_word_embeddings is false)"));
}

TEST(Weights, WrongShape) {
  TempDir tmp("w_shape");
  write_synthetic_checkpoint(tmp.path(), SyntheticModel{}, {.edit_tensors = [](auto& tensors) {
                               // k_proj as if kv_heads were 2: [8, 8] instead of [4, 8].
                               *find(tensors, "model.layers.0.self_attn.k_proj.weight") = testing::make_tensor(
                                   "model.layers.0.self_attn.k_proj.weight", "F32", {8, 8}, std::vector<float>(64, 0.5f));
                             }});
  EXPECT_THAT(load_error(tmp.path()),
              AllOf(HasSubstr("tensor 'model.layers.0.self_attn.k_proj.weight'"),
                    HasSubstr("expected shape [4, 8], got [8, 8]")));
}

TEST(Weights, WrongDtype) {
  TempDir tmp("w_dtype");
  write_synthetic_checkpoint(tmp.path(), SyntheticModel{}, {.edit_tensors = [](auto& tensors) {
                               TestTensor* norm = find(tensors, "model.norm.weight");
                               norm->dtype = "I32";  // same byte size as F32, so the file itself is valid
                             }});
  EXPECT_THAT(load_error(tmp.path()),
              HasSubstr("tensor 'model.norm.weight' in " + (tmp.path() / "model.safetensors").string() +
                        " has dtype I32, unsupported for weights (supported: F32, F16, BF16)"));
}

TEST(Weights, BiasTheModelWouldNotApplyIsRejected) {
  TempDir tmp("w_obias");
  write_synthetic_checkpoint(tmp.path(), SyntheticModel{}, {.edit_tensors = [](auto& tensors) {
                               tensors.push_back(testing::make_tensor("model.layers.0.self_attn.o_proj.bias", "F32",
                                                                      {8}, std::vector<float>(8, 1.0f)));
                             }});
  EXPECT_THAT(load_error(tmp.path()),
              HasSubstr("tensor 'model.layers.0.self_attn.o_proj.bias'"));
}

TEST(Weights, ProgressBarOnlyWhenAsked) {
  TempDir tmp("w_progress");
  write_synthetic_checkpoint(tmp.path(), SyntheticModel{.dtype = "BF16"});
  const Checkpoint c = open_checkpoint(tmp.path());
  ::testing::internal::CaptureStderr();
  (void)load_weights(c);  // default: only on a terminal, and the test's stderr is captured
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
  ::testing::internal::CaptureStderr();
  (void)load_weights(c, {.progress = true});
  const std::string drawn = ::testing::internal::GetCapturedStderr();
  EXPECT_THAT(drawn, AllOf(HasSubstr("loading weights ["), HasSubstr("100.0%")));
  EXPECT_EQ(drawn.back(), '\n');
}

}  // namespace
}  // namespace nibble::model

namespace nibble::model {
namespace {

TEST(Weights, HybridLinearAttentionIsRejectedByName) {
  TempDir tmp("w_qwen3next");
  write_synthetic_checkpoint(tmp.path(), SyntheticModel{});
  nlohmann::json config = nlohmann::json::parse(std::ifstream(tmp.path() / "config.json"));
  config["architectures"] = {"Qwen3NextForCausalLM"};
  config["model_type"] = "qwen3_next";
  config["full_attention_interval"] = 2;
  config["linear_num_key_heads"] = 2;
  config["linear_num_value_heads"] = 2;
  config["linear_key_head_dim"] = 4;
  config["linear_value_head_dim"] = 4;
  config["linear_conv_kernel_dim"] = 4;
  std::ofstream(tmp.path() / "config.json") << config.dump();
  EXPECT_THAT(load_error(tmp.path()),
              AllOf(HasSubstr("model_type 'qwen3_next'"), HasSubstr("linear-attention layers"),
                    HasSubstr("supported: Llama, Mistral, Qwen2, Qwen3")));
}

}  // namespace
}  // namespace nibble::model
