// config.json -> ModelConfig on real Hugging Face configs (values as published on the model pages)
// and on broken ones, whose errors must name the field and the file.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "config_test_util.h"

namespace nibble::config {
namespace {

using testing::config_path;
using testing::load;
using testing::load_error;
using ::testing::HasSubstr;
using nlohmann::json;

TEST(ModelConfig, Llama3_8B) {
  const ModelConfig c = load("llama-3-8b.json");
  EXPECT_EQ(c.architecture, Architecture::kLlama);
  EXPECT_EQ(c.model_type, "llama");
  EXPECT_EQ(c.vocab_size, 128256);
  EXPECT_EQ(c.hidden_size, 4096);
  EXPECT_EQ(c.intermediate_size, 14336);
  EXPECT_EQ(c.num_layers, 32);
  EXPECT_EQ(c.num_heads, 32);
  EXPECT_EQ(c.num_kv_heads, 8);
  EXPECT_EQ(c.head_dim, 128);  // not in the file: hidden_size / num_attention_heads
  EXPECT_EQ(c.max_position_embeddings, 8192);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_DOUBLE_EQ(c.rope_theta, 500000.0);
  EXPECT_EQ(c.rope_scaling.kind, RopeScaling::Kind::kNone);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_FALSE(c.qk_norm);
  EXPECT_EQ(c.torch_dtype, WeightDtype::kBF16);
  EXPECT_TRUE(c.torch_dtype_given);
  EXPECT_EQ(c.eos_token_ids, std::vector<int64_t>{128001});
  EXPECT_EQ(c.bos_token_id, 128000);
  EXPECT_EQ(c.num_full_attention_layers(), 32);
  EXPECT_EQ(c.num_linear_attention_layers(), 0);
  EXPECT_FALSE(c.linear.has_value());
  EXPECT_EQ(c.linear_state_bytes_per_request(), 0);
}

TEST(ModelConfig, Llama31RopeScalingAndEosList) {
  const ModelConfig c = load("llama-3.1-8b-instruct.json");
  EXPECT_EQ(c.max_position_embeddings, 131072);
  EXPECT_EQ(c.rope_scaling.kind, RopeScaling::Kind::kLlama3);
  EXPECT_DOUBLE_EQ(c.rope_scaling.factor, 8.0);
  EXPECT_DOUBLE_EQ(c.rope_scaling.low_freq_factor, 1.0);
  EXPECT_DOUBLE_EQ(c.rope_scaling.high_freq_factor, 4.0);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 8192);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{128001, 128008, 128009}));
}

TEST(ModelConfig, LinearRopeScalingWithLegacyTypeKey) {
  json j = json::parse(R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 64, "intermediate_size": 128,
    "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 100, "max_position_embeddings": 512,
    "rope_scaling": {"type": "linear", "factor": 4.0}})");
  const ModelConfig c = parse_model_config(j, "inline.json");
  EXPECT_EQ(c.rope_scaling.kind, RopeScaling::Kind::kLinear);
  EXPECT_DOUBLE_EQ(c.rope_scaling.factor, 4.0);
  EXPECT_EQ(c.num_kv_heads, 4);  // defaults to num_attention_heads
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_FALSE(c.torch_dtype_given);
  EXPECT_TRUE(c.eos_token_ids.empty());
}

TEST(ModelConfig, Mistral7B) {
  const ModelConfig c = load("mistral-7b-v0.1.json");
  EXPECT_EQ(c.architecture, Architecture::kMistral);
  EXPECT_EQ(c.vocab_size, 32000);
  EXPECT_EQ(c.num_kv_heads, 8);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.sliding_window, 4096);
  EXPECT_EQ(c.eos_token_ids, std::vector<int64_t>{2});
}

TEST(ModelConfig, Qwen25_7BHasQkvBiases) {
  const ModelConfig c = load("qwen2.5-7b.json");
  EXPECT_EQ(c.architecture, Architecture::kQwen2);
  EXPECT_TRUE(c.attention_bias);  // Qwen2 always has q/k/v biases, though the file does not say so
  EXPECT_FALSE(c.qk_norm);
  EXPECT_EQ(c.hidden_size, 3584);
  EXPECT_EQ(c.num_heads, 28);
  EXPECT_EQ(c.num_kv_heads, 4);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_FALSE(c.sliding_window.has_value());  // use_sliding_window is false
  EXPECT_DOUBLE_EQ(c.rope_theta, 1e6);
}

TEST(ModelConfig, Qwen3_8BHasQkNorm) {
  const ModelConfig c = load("qwen3-8b.json");
  EXPECT_EQ(c.architecture, Architecture::kQwen3);
  EXPECT_TRUE(c.qk_norm);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.num_layers, 36);
  EXPECT_EQ(c.eos_token_ids, std::vector<int64_t>{151645});
  EXPECT_DOUBLE_EQ(c.rope_theta, 1e6);  // written as an integer in the file
}

TEST(ModelConfig, Qwen3NextHybridWithInterval) {
  const ModelConfig c = load("qwen3-next-80b-a3b.json");
  EXPECT_EQ(c.architecture, Architecture::kQwen3Next);
  EXPECT_EQ(c.num_layers, 48);
  EXPECT_EQ(c.num_full_attention_layers(), 12);
  EXPECT_EQ(c.num_linear_attention_layers(), 36);
  for (int64_t i = 0; i < 48; ++i) {
    // full_attention_interval 4: layers 3, 7, 11, ... are full attention.
    EXPECT_EQ(c.layer_kinds[i], i % 4 == 3 ? LayerKind::kFullAttention : LayerKind::kLinearAttention) << i;
  }
  EXPECT_EQ(c.head_dim, 256);  // given, unlike hidden_size / heads = 128
  EXPECT_EQ(c.num_kv_heads, 2);
  EXPECT_DOUBLE_EQ(c.partial_rotary_factor, 0.25);
  EXPECT_TRUE(c.qk_norm);
  EXPECT_TRUE(c.attn_output_gate);
  ASSERT_TRUE(c.linear.has_value());
  EXPECT_EQ(c.linear->num_key_heads, 16);
  EXPECT_EQ(c.linear->num_value_heads, 32);
  EXPECT_EQ(c.linear->key_head_dim, 128);
  EXPECT_EQ(c.linear->value_head_dim, 128);
  EXPECT_EQ(c.linear->conv_kernel, 4);
  ASSERT_TRUE(c.moe.has_value());
  EXPECT_EQ(c.moe->num_experts, 512);
  EXPECT_EQ(c.moe->num_experts_per_token, 10);
  EXPECT_EQ(c.moe->expert_intermediate_size, 512);
  EXPECT_EQ(c.moe->shared_expert_intermediate_size, 512);
  EXPECT_EQ(c.linear_state_dtype, WeightDtype::kF32);  // no mamba_ssm_dtype: float32
  // Per linear layer: recurrent [32, 128, 128] f32 + conv [3, 2*16*128 + 32*128] bf16.
  const int64_t per_layer = 32 * 128 * 128 * 4 + 3 * (2 * 16 * 128 + 32 * 128) * 2;
  EXPECT_EQ(per_layer, 2097152 + 49152);
  EXPECT_EQ(c.linear_state_bytes_per_request(), 36 * per_layer);
}

TEST(ModelConfig, Qwen38_27BStyleNestedTextConfig) {
  const ModelConfig c = load("qwen3.8-27b-style.json");
  EXPECT_EQ(c.architecture, Architecture::kQwen3Next);
  EXPECT_EQ(c.model_type, "qwen3_5_text");
  EXPECT_EQ(c.num_layers, 64);
  EXPECT_EQ(c.num_full_attention_layers(), 16);
  EXPECT_EQ(c.num_linear_attention_layers(), 48);
  EXPECT_EQ(c.num_kv_heads, 4);
  EXPECT_EQ(c.head_dim, 256);
  EXPECT_EQ(c.num_heads, 24);
  EXPECT_EQ(c.hidden_size, 5120);
  EXPECT_EQ(c.intermediate_size, 17408);
  EXPECT_EQ(c.vocab_size, 248320);
  EXPECT_EQ(c.torch_dtype, WeightDtype::kBF16);  // from text_config.dtype
  EXPECT_TRUE(c.torch_dtype_given);
  EXPECT_DOUBLE_EQ(c.rope_theta, 1e7);            // from rope_parameters
  EXPECT_DOUBLE_EQ(c.partial_rotary_factor, 0.25);
  EXPECT_EQ(c.rope_scaling.kind, RopeScaling::Kind::kNone);
  EXPECT_FALSE(c.moe.has_value());
  ASSERT_TRUE(c.linear.has_value());
  EXPECT_EQ(c.linear->num_value_heads, 48);
  EXPECT_EQ(c.linear_state_dtype, WeightDtype::kF32);
  for (int64_t i = 0; i < 64; ++i) {
    EXPECT_EQ(c.layer_kinds[i] == LayerKind::kFullAttention, (i + 1) % 4 == 0) << i;
  }
}

TEST(ModelConfig, LayerTypesWinOverInterval) {
  json j = json::parse(R"({"architectures": ["Qwen3NextForCausalLM"], "hidden_size": 64, "intermediate_size": 128,
    "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 100,
    "max_position_embeddings": 512, "full_attention_interval": 4,
    "layer_types": ["full_attention", "linear_attention", "full_attention"],
    "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 8, "linear_value_head_dim": 8,
    "linear_conv_kernel_dim": 4, "mamba_ssm_dtype": "bfloat16", "torch_dtype": "float32"})");
  const ModelConfig c = parse_model_config(j, "inline.json");
  EXPECT_EQ(c.layer_kinds, (std::vector<LayerKind>{LayerKind::kFullAttention, LayerKind::kLinearAttention,
                                                   LayerKind::kFullAttention}));
  EXPECT_EQ(c.linear_state_dtype, WeightDtype::kBF16);
  // 1 linear layer: recurrent [4, 8, 8] bf16 + conv [3, 2*2*8 + 4*8] float32 (torch_dtype).
  EXPECT_EQ(c.linear_state_bytes_per_request(), 4 * 8 * 8 * 2 + 3 * (32 + 32) * 4);
}

TEST(ModelConfig, Stories260K) {
  const ModelConfig c = load_model_config(std::filesystem::path(NIBBLE_SOURCE_DIR) / "models/stories260k/config.json");
  EXPECT_EQ(c.architecture, Architecture::kLlama);
  EXPECT_EQ(c.vocab_size, 512);
  EXPECT_EQ(c.hidden_size, 64);
  EXPECT_EQ(c.num_layers, 5);
  EXPECT_EQ(c.num_heads, 8);
  EXPECT_EQ(c.num_kv_heads, 4);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_EQ(c.intermediate_size, 172);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.torch_dtype, WeightDtype::kF32);
  EXPECT_EQ(c.rope_scaling.kind, RopeScaling::Kind::kNone);  // "rope_scaling": null
  EXPECT_EQ(c.eos_token_ids, std::vector<int64_t>{2});
  EXPECT_EQ(c.bos_token_id, 1);
}

// ---- bad configs: the message names the field (or architecture) and the file --------------------

struct BadConfig {
  const char* file;
  std::vector<const char*> message_parts;
};

class BadConfigFile : public ::testing::TestWithParam<BadConfig> {};

TEST_P(BadConfigFile, ErrorNamesTheProblemAndTheFile) {
  const BadConfig& bad = GetParam();
  const auto path = config_path(std::string("bad/") + bad.file);
  const std::string message = load_error(path);
  ASSERT_FALSE(message.empty()) << bad.file << " was accepted";
  EXPECT_THAT(message, HasSubstr(bad.file));
  for (const char* part : bad.message_parts) EXPECT_THAT(message, HasSubstr(part));
}

INSTANTIATE_TEST_SUITE_P(
    Files, BadConfigFile,
    ::testing::Values(
        BadConfig{"missing-hidden-size.json", {"missing required field 'hidden_size'"}},
        BadConfig{"wrong-type-num-attention-heads.json", {"'num_attention_heads'", "must be an integer", "a string"}},
        BadConfig{"unsupported-architecture.json", {"GPT2LMHeadModel", "LlamaForCausalLM", "Qwen3NextForCausalLM"}},
        BadConfig{"llama3-rope-missing-factor.json", {"rope_scaling.factor", "llama3"}},
        BadConfig{"hybrid-missing-linear-num-value-heads.json", {"missing required field 'linear_num_value_heads'"}},
        BadConfig{"layer-types-wrong-length.json", {"layer_types", "6 entries", "48"}},
        BadConfig{"truncated.json", {"not valid JSON"}}));

std::string parse_error(const std::string& text) {
  try {
    parse_model_config(json::parse(text), "inline.json");
  } catch (const nibble::Error& e) {
    return e.what();
  }
  return "";
}

constexpr const char* kTinyLlama = R"("architectures": ["LlamaForCausalLM"], "hidden_size": 64, "intermediate_size": 128,
    "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 100, "max_position_embeddings": 512)";

std::string tiny_llama_with(const std::string& extra) { return std::string("{") + kTinyLlama + ", " + extra + "}"; }

TEST(ModelConfigErrors, InlineBadFields) {
  EXPECT_THAT(parse_error(tiny_llama_with(R"("eos_token_id": "</s>")")),
              HasSubstr("'eos_token_id' must be an integer or a list of integers"));
  EXPECT_THAT(parse_error(tiny_llama_with(R"("torch_dtype": "int8")")), HasSubstr("'torch_dtype' is 'int8'"));
  EXPECT_THAT(parse_error(tiny_llama_with(R"("num_key_value_heads": 3)")),
              HasSubstr("multiple of num_key_value_heads (3)"));
  EXPECT_THAT(parse_error(tiny_llama_with(R"("num_key_value_heads": 0)")),
              HasSubstr("'num_key_value_heads' must be positive"));
  EXPECT_THAT(parse_error(tiny_llama_with(R"("num_key_value_heads": 2.0)")),
              HasSubstr("'num_key_value_heads' must be an integer"));
  EXPECT_THAT(parse_error(tiny_llama_with(R"("tie_word_embeddings": "yes")")),
              HasSubstr("'tie_word_embeddings' must be true or false"));
  EXPECT_THAT(parse_error(tiny_llama_with(R"("rope_scaling": {"rope_type": "yarn", "factor": 4.0})")),
              HasSubstr("unsupported rope scaling type 'yarn'"));
  EXPECT_THAT(parse_error(tiny_llama_with(R"("layer_types": ["full_attention", "sliding_attention"])")),
              HasSubstr("'layer_types[1]' is 'sliding_attention'"));
  EXPECT_THAT(parse_error(tiny_llama_with(R"("layer_types": ["full_attention", "linear_attention"])")),
              HasSubstr("linear_attention layers are only supported in Qwen3-Next"));
  EXPECT_THAT(parse_error(R"({"model_type": "gpt_neox", "hidden_size": 64})"),
              HasSubstr("unsupported model_type 'gpt_neox'"));
  EXPECT_THAT(parse_error(R"({"hidden_size": 64})"), HasSubstr("missing required field 'architectures'"));
  EXPECT_THAT(parse_error("[1, 2]"), HasSubstr("must be a JSON object"));
  EXPECT_THAT(parse_error(R"({"architectures": ["LlamaForCausalLM"], "text_config": 5})"),
              HasSubstr("'text_config' must be an object"));
  // hidden_size 60 / 8 heads is not whole and no head_dim is given.
  EXPECT_THAT(parse_error(R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 60, "intermediate_size": 128,
    "num_hidden_layers": 2, "num_attention_heads": 8, "vocab_size": 100, "max_position_embeddings": 512})"),
              HasSubstr("no 'head_dim'"));
  EXPECT_EQ(parse_error(tiny_llama_with(R"("rope_scaling": null, "bos_token_id": null)")), "");
}

TEST(ModelConfigErrors, NestedTextConfigNamesThePath) {
  EXPECT_THAT(parse_error(R"({"architectures": ["Qwen3_5ForConditionalGeneration"],
    "text_config": {"vocab_size": 100, "hidden_size": 64, "num_hidden_layers": "four"}})"),
              HasSubstr("'text_config.num_hidden_layers' must be an integer"));
  EXPECT_THAT(parse_error(R"({"architectures": ["Qwen3_5ForConditionalGeneration"],
    "text_config": {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 4, "num_attention_heads": 4,
    "vocab_size": 100, "max_position_embeddings": 512}})"),
              HasSubstr("needs 'layer_types' or 'full_attention_interval'"));
}

TEST(ModelConfigErrors, MissingFile) {
  EXPECT_THAT(load_error(config_path("does-not-exist.json")), HasSubstr("cannot open model config"));
}

TEST(ModelConfig, SupportedArchitecturesListed) {
  const std::string names = supported_architectures();
  for (const char* arch : {"LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM",
                           "Qwen3NextForCausalLM", "Qwen3_5ForConditionalGeneration"}) {
    EXPECT_THAT(names, HasSubstr(arch));
  }
}

}  // namespace
}  // namespace nibble::config
