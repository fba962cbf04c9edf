#include "config/model_config.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <utility>

#include "common/error.h"

namespace nibble::config {

namespace {

using nlohmann::json;

struct ArchitectureName {
  const char* hf_name;     // config.json "architectures"[0]
  Architecture architecture;
};

constexpr ArchitectureName kArchitectureNames[] = {
    {"LlamaForCausalLM", Architecture::kLlama},
    {"MistralForCausalLM", Architecture::kMistral},
    {"Qwen2ForCausalLM", Architecture::kQwen2},
    {"Qwen3ForCausalLM", Architecture::kQwen3},
    {"Qwen3NextForCausalLM", Architecture::kQwen3Next},
    {"Qwen3_5ForCausalLM", Architecture::kQwen3Next},
    {"Qwen3_5ForConditionalGeneration", Architecture::kQwen3Next},
    {"Qwen3_5MoeForCausalLM", Architecture::kQwen3Next},
    {"Qwen3_5MoeForConditionalGeneration", Architecture::kQwen3Next},
};

// model_type -> architecture, used only when "architectures" is absent.
constexpr std::pair<const char*, Architecture> kModelTypes[] = {
    {"llama", Architecture::kLlama},          {"mistral", Architecture::kMistral},
    {"qwen2", Architecture::kQwen2},          {"qwen3", Architecture::kQwen3},
    {"qwen3_next", Architecture::kQwen3Next}, {"qwen3_5", Architecture::kQwen3Next},
    {"qwen3_5_text", Architecture::kQwen3Next}, {"qwen3_5_moe", Architecture::kQwen3Next},
    {"qwen3_5_moe_text", Architecture::kQwen3Next},
};

const char* json_type_name(const json& v) {
  if (v.is_boolean()) return "a boolean";
  if (v.is_number_integer()) return "an integer";
  if (v.is_number_float()) return "a floating-point number";
  if (v.is_string()) return "a string";
  if (v.is_array()) return "a list";
  if (v.is_object()) return "an object";
  return "null";
}

// The fields of one config: the text model's object (a nested "text_config" when there is one) is
// searched first, then the top level (VL-style configs keep e.g. tie_word_embeddings or torch_dtype
// there). Every error names the field and the file.
class Fields {
 public:
  Fields(const json& root, std::string source) : root_(root), source_(std::move(source)) {
    NIBBLE_CHECK(root.is_object(), "{}: a config.json must be a JSON object, got {}", source_, json_type_name(root));
    if (auto it = root.find("text_config"); it != root.end() && !it->is_null()) {
      NIBBLE_CHECK(it->is_object(), "{}: field 'text_config' must be an object, got {}", source_, json_type_name(*it));
      text_ = &*it;
    }
  }

  const std::string& source() const { return source_; }

  // The value of `name`, or nullptr when absent or null. `path` receives its printable location.
  const json* find(const char* name, std::string* path = nullptr) const {
    if (text_ != nullptr) {
      if (auto it = text_->find(name); it != text_->end() && !it->is_null()) {
        if (path != nullptr) *path = fmt::format("text_config.{}", name);
        return &*it;
      }
    }
    if (auto it = root_.find(name); it != root_.end() && !it->is_null()) {
      if (path != nullptr) *path = name;
      return &*it;
    }
    return nullptr;
  }

  [[noreturn]] void fail_type(const std::string& path, const char* expected, const json& v) const {
    NIBBLE_FAIL("{}: field '{}' must be {}, got {} ({})", source_, path, expected, json_type_name(v), v.dump());
  }

  int64_t integer(const json& v, const std::string& path) const {
    if (!v.is_number_integer()) fail_type(path, "an integer", v);
    if (v.is_number_unsigned()) {
      NIBBLE_CHECK(v.get<uint64_t>() <= static_cast<uint64_t>(INT64_MAX), "{}: field '{}' is too large ({})",
                   source_, path, v.dump());
    }
    return v.get<int64_t>();
  }

  int64_t required_positive(const char* name) const {
    std::string path;
    const json* v = find(name, &path);
    NIBBLE_CHECK(v != nullptr, "{}: missing required field '{}'", source_, name);
    const int64_t n = integer(*v, path);
    NIBBLE_CHECK(n > 0, "{}: field '{}' must be positive, got {}", source_, path, n);
    return n;
  }

  std::optional<int64_t> optional_positive(const char* name) const {
    std::string path;
    const json* v = find(name, &path);
    if (v == nullptr) return std::nullopt;
    const int64_t n = integer(*v, path);
    NIBBLE_CHECK(n > 0, "{}: field '{}' must be positive, got {}", source_, path, n);
    return n;
  }

  std::optional<int64_t> optional_integer(const char* name) const {
    std::string path;
    const json* v = find(name, &path);
    if (v == nullptr) return std::nullopt;
    return integer(*v, path);
  }

  double number_in(const json& obj, const char* name, const std::string& prefix, double fallback) const {
    auto it = obj.find(name);
    if (it == obj.end() || it->is_null()) return fallback;
    if (!it->is_number()) fail_type(prefix + name, "a number", *it);
    return it->get<double>();
  }

  std::optional<double> optional_number(const char* name) const {
    std::string path;
    const json* v = find(name, &path);
    if (v == nullptr) return std::nullopt;
    if (!v->is_number()) fail_type(path, "a number", *v);
    return v->get<double>();
  }

  bool boolean(const char* name, bool fallback) const {
    std::string path;
    const json* v = find(name, &path);
    if (v == nullptr) return fallback;
    if (!v->is_boolean()) fail_type(path, "true or false", *v);
    return v->get<bool>();
  }

  std::optional<std::string> optional_string(const char* name, std::string* path_out = nullptr) const {
    std::string path;
    const json* v = find(name, &path);
    if (v == nullptr) return std::nullopt;
    if (!v->is_string()) fail_type(path, "a string", *v);
    if (path_out != nullptr) *path_out = path;
    return v->get<std::string>();
  }

  // The top-level "architectures" list's first entry (the text model's own list is never used:
  // it would name the text sub-model of a VL wrapper, which the same table covers).
  std::optional<std::string> architecture_name() const {
    auto it = root_.find("architectures");
    if (it == root_.end() || it->is_null()) return std::nullopt;
    if (!it->is_array() || it->empty()) fail_type("architectures", "a non-empty list of strings", *it);
    if (!(*it)[0].is_string()) fail_type("architectures[0]", "a string", (*it)[0]);
    return (*it)[0].get<std::string>();
  }

 private:
  const json& root_;
  const json* text_ = nullptr;
  std::string source_;
};

Architecture parse_architecture(const Fields& f, std::string* model_type) {
  *model_type = f.optional_string("model_type").value_or("");
  if (auto name = f.architecture_name()) {
    for (const auto& a : kArchitectureNames) {
      if (*name == a.hf_name) return a.architecture;
    }
    NIBBLE_FAIL("{}: unsupported architecture '{}' (supported: {})", f.source(), *name, supported_architectures());
  }
  NIBBLE_CHECK(!model_type->empty(), "{}: missing required field 'architectures' (or at least 'model_type')",
               f.source());
  for (const auto& [type, arch] : kModelTypes) {
    if (*model_type == type) return arch;
  }
  NIBBLE_FAIL("{}: unsupported model_type '{}' and no 'architectures' list (supported: {})", f.source(), *model_type,
              supported_architectures());
}

WeightDtype parse_weight_dtype(const Fields& f, bool* given) {
  std::string path;
  std::optional<std::string> name = f.optional_string("torch_dtype", &path);
  if (!name) name = f.optional_string("dtype", &path);
  *given = name.has_value();
  if (!name) return WeightDtype::kBF16;
  if (*name == "float32") return WeightDtype::kF32;
  if (*name == "bfloat16") return WeightDtype::kBF16;
  if (*name == "float16") return WeightDtype::kF16;
  NIBBLE_FAIL("{}: field '{}' is '{}' (supported: float32, bfloat16, float16)", f.source(), path, *name);
}

// rope_scaling (transformers v4) or rope_parameters (v5) -> RopeScaling, rope_theta and the partial
// rotary factor. Qwen3.5's multimodal RoPE ("mrope_section") gives every section the same position
// for text-only input, which is plain RoPE, so its fields are ignored.
void parse_rope(const Fields& f, ModelConfig& c) {
  std::string params_path;
  const json* params = f.find("rope_parameters", &params_path);
  if (params != nullptr && !params->is_object()) f.fail_type(params_path, "an object", *params);

  c.rope_theta = f.optional_number("rope_theta").value_or(
      params != nullptr ? f.number_in(*params, "rope_theta", params_path + ".", 10000.0) : 10000.0);
  c.partial_rotary_factor = f.optional_number("partial_rotary_factor")
                                .value_or(params != nullptr ? f.number_in(*params, "partial_rotary_factor",
                                                                          params_path + ".", 1.0)
                                                            : 1.0);
  NIBBLE_CHECK(c.rope_theta > 0, "{}: rope_theta must be positive, got {}", f.source(), c.rope_theta);
  NIBBLE_CHECK(c.partial_rotary_factor > 0 && c.partial_rotary_factor <= 1,
               "{}: partial_rotary_factor must be in (0, 1], got {}", f.source(), c.partial_rotary_factor);

  std::string path;
  const json* scaling = f.find("rope_scaling", &path);
  if (scaling == nullptr) {
    scaling = params;
    path = params_path;
  }
  if (scaling == nullptr) return;
  if (!scaling->is_object()) f.fail_type(path, "an object or null", *scaling);

  std::string type;
  for (const char* key : {"rope_type", "type"}) {
    if (auto it = scaling->find(key); it != scaling->end() && !it->is_null()) {
      if (!it->is_string()) f.fail_type(path + "." + key, "a string", *it);
      type = it->get<std::string>();
      break;
    }
  }
  NIBBLE_CHECK(!type.empty(), "{}: field '{}' has no 'rope_type'", f.source(), path);
  const std::string prefix = path + ".";
  auto required_number = [&](const char* key) {
    auto it = scaling->find(key);
    NIBBLE_CHECK(it != scaling->end() && !it->is_null(), "{}: missing required field '{}{}' for rope_type '{}'",
                 f.source(), prefix, key, type);
    return f.number_in(*scaling, key, prefix, 0.0);
  };
  RopeScaling& r = c.rope_scaling;
  if (type == "default") {
    r.kind = RopeScaling::Kind::kNone;
  } else if (type == "linear") {
    r.kind = RopeScaling::Kind::kLinear;
    r.factor = required_number("factor");
  } else if (type == "llama3") {
    r.kind = RopeScaling::Kind::kLlama3;
    r.factor = required_number("factor");
    r.low_freq_factor = required_number("low_freq_factor");
    r.high_freq_factor = required_number("high_freq_factor");
    auto it = scaling->find("original_max_position_embeddings");
    NIBBLE_CHECK(it != scaling->end() && !it->is_null(), "{}: missing required field '{}original_max_position_embeddings'"
                 " for rope_type 'llama3'", f.source(), prefix);
    r.original_max_position_embeddings = f.integer(*it, prefix + "original_max_position_embeddings");
    NIBBLE_CHECK(r.original_max_position_embeddings > 0, "{}: {}original_max_position_embeddings must be positive",
                 f.source(), prefix);
    NIBBLE_CHECK(r.high_freq_factor > r.low_freq_factor,
                 "{}: llama3 rope scaling needs high_freq_factor > low_freq_factor, got {} and {}", f.source(),
                 r.high_freq_factor, r.low_freq_factor);
  } else {
    NIBBLE_FAIL("{}: unsupported rope scaling type '{}' in '{}' (supported: default, linear, llama3)", f.source(),
                type, path);
  }
  if (r.kind != RopeScaling::Kind::kNone) {
    NIBBLE_CHECK(r.factor > 0, "{}: {}factor must be positive, got {}", f.source(), prefix, r.factor);
  }
}

// layer_types ["full_attention" | "linear_attention", ...] or full_attention_interval N (layer i is
// full attention when (i + 1) % N == 0, as in Qwen3-Next: layers 3, 7, 11, ...), else all full.
void parse_layer_kinds(const Fields& f, ModelConfig& c) {
  std::string path;
  if (const json* types = f.find("layer_types", &path)) {
    if (!types->is_array()) f.fail_type(path, "a list of strings", *types);
    NIBBLE_CHECK(static_cast<int64_t>(types->size()) == c.num_layers,
                 "{}: field '{}' has {} entries but num_hidden_layers is {}", f.source(), path, types->size(),
                 c.num_layers);
    for (size_t i = 0; i < types->size(); ++i) {
      const json& t = (*types)[i];
      const std::string item = fmt::format("{}[{}]", path, i);
      if (!t.is_string()) f.fail_type(item, "a string", t);
      const std::string kind = t.get<std::string>();
      if (kind == "full_attention") {
        c.layer_kinds.push_back(LayerKind::kFullAttention);
      } else if (kind == "linear_attention") {
        c.layer_kinds.push_back(LayerKind::kLinearAttention);
      } else {
        NIBBLE_FAIL("{}: field '{}' is '{}' (supported: full_attention, linear_attention)", f.source(), item, kind);
      }
    }
    return;
  }
  if (auto interval = f.optional_integer("full_attention_interval")) {
    NIBBLE_CHECK(*interval > 0, "{}: field 'full_attention_interval' must be positive, got {}", f.source(), *interval);
    for (int64_t i = 0; i < c.num_layers; ++i) {
      c.layer_kinds.push_back((i + 1) % *interval == 0 ? LayerKind::kFullAttention : LayerKind::kLinearAttention);
    }
    return;
  }
  NIBBLE_CHECK(c.architecture != Architecture::kQwen3Next,
               "{}: a hybrid {} config needs 'layer_types' or 'full_attention_interval' to say which layers are "
               "full attention", f.source(), c.model_type);
  c.layer_kinds.assign(c.num_layers, LayerKind::kFullAttention);
}

void parse_linear_attention(const Fields& f, ModelConfig& c) {
  if (c.num_linear_attention_layers() == 0) return;
  NIBBLE_CHECK(c.architecture == Architecture::kQwen3Next,
               "{}: linear_attention layers are only supported in Qwen3-Next / Qwen3.5 configs, not {}", f.source(),
               architecture_name(c.architecture));
  LinearAttentionGeometry g;
  g.num_key_heads = f.required_positive("linear_num_key_heads");
  g.num_value_heads = f.required_positive("linear_num_value_heads");
  g.key_head_dim = f.required_positive("linear_key_head_dim");
  g.value_head_dim = f.required_positive("linear_value_head_dim");
  g.conv_kernel = f.required_positive("linear_conv_kernel_dim");
  NIBBLE_CHECK(g.num_value_heads % g.num_key_heads == 0,
               "{}: linear_num_value_heads ({}) must be a multiple of linear_num_key_heads ({})", f.source(),
               g.num_value_heads, g.num_key_heads);
  c.linear = g;
  std::string path;
  if (auto ssm = f.optional_string("mamba_ssm_dtype", &path)) {
    if (*ssm == "float32") c.linear_state_dtype = WeightDtype::kF32;
    else if (*ssm == "bfloat16") c.linear_state_dtype = WeightDtype::kBF16;
    else if (*ssm == "float16") c.linear_state_dtype = WeightDtype::kF16;
    else NIBBLE_FAIL("{}: field '{}' is '{}' (supported: float32, bfloat16, float16)", f.source(), path, *ssm);
  }
}

void parse_moe(const Fields& f, ModelConfig& c) {
  const int64_t experts = f.optional_integer("num_experts").value_or(0);
  NIBBLE_CHECK(experts >= 0, "{}: field 'num_experts' must not be negative, got {}", f.source(), experts);
  if (experts == 0) return;
  NIBBLE_CHECK(c.architecture == Architecture::kQwen3Next,
               "{}: mixture-of-experts ('num_experts') is only supported in Qwen3-Next / Qwen3.5 configs, not {}",
               f.source(), architecture_name(c.architecture));
  MoeGeometry m;
  m.num_experts = experts;
  m.num_experts_per_token = f.required_positive("num_experts_per_tok");
  m.expert_intermediate_size = f.required_positive("moe_intermediate_size");
  m.shared_expert_intermediate_size = f.optional_integer("shared_expert_intermediate_size").value_or(0);
  NIBBLE_CHECK(m.num_experts_per_token <= m.num_experts, "{}: num_experts_per_tok ({}) exceeds num_experts ({})",
               f.source(), m.num_experts_per_token, m.num_experts);
  const int64_t sparse_step = f.optional_integer("decoder_sparse_step").value_or(1);
  NIBBLE_CHECK(sparse_step == 1, "{}: decoder_sparse_step {} is not supported (only 1: every layer is MoE)",
               f.source(), sparse_step);
  std::string path;
  if (const json* only = f.find("mlp_only_layers", &path)) {
    if (!only->is_array()) f.fail_type(path, "a list of layer indices", *only);
    for (size_t i = 0; i < only->size(); ++i) {
      const int64_t layer = f.integer((*only)[i], fmt::format("{}[{}]", path, i));
      NIBBLE_CHECK(layer >= 0 && layer < c.num_layers, "{}: {}[{}] = {} is not a layer index (0..{})", f.source(),
                   path, i, layer, c.num_layers - 1);
      m.mlp_only_layers.push_back(layer);
    }
  }
  c.moe = std::move(m);
}

void parse_special_tokens(const Fields& f, ModelConfig& c) {
  std::string path;
  if (const json* eos = f.find("eos_token_id", &path)) {
    if (eos->is_array()) {
      for (size_t i = 0; i < eos->size(); ++i) c.eos_token_ids.push_back(f.integer((*eos)[i], fmt::format("{}[{}]", path, i)));
    } else if (eos->is_number_integer()) {
      c.eos_token_ids.push_back(f.integer(*eos, path));
    } else {
      f.fail_type(path, "an integer or a list of integers", *eos);
    }
  }
  c.bos_token_id = f.optional_integer("bos_token_id");
}

}  // namespace

int64_t dtype_bytes(WeightDtype dtype) { return dtype == WeightDtype::kF32 ? 4 : 2; }

const char* weight_dtype_name(WeightDtype dtype) {
  switch (dtype) {
    case WeightDtype::kF32: return "float32";
    case WeightDtype::kBF16: return "bfloat16";
    case WeightDtype::kF16: return "float16";
  }
  return "?";
}

int64_t LinearAttentionGeometry::recurrent_state_elements() const {
  return num_value_heads * key_head_dim * value_head_dim;
}

int64_t LinearAttentionGeometry::conv_state_elements() const {
  return (conv_kernel - 1) * (2 * num_key_heads * key_head_dim + num_value_heads * value_head_dim);
}

int64_t LinearAttentionGeometry::state_bytes(int64_t recurrent_dtype_bytes, int64_t conv_dtype_bytes) const {
  return recurrent_state_elements() * recurrent_dtype_bytes + conv_state_elements() * conv_dtype_bytes;
}

int64_t ModelConfig::num_full_attention_layers() const {
  return std::count(layer_kinds.begin(), layer_kinds.end(), LayerKind::kFullAttention);
}

int64_t ModelConfig::num_linear_attention_layers() const {
  return std::count(layer_kinds.begin(), layer_kinds.end(), LayerKind::kLinearAttention);
}

int64_t ModelConfig::linear_state_bytes_per_request() const {
  if (!linear) return 0;
  return num_linear_attention_layers() * linear->state_bytes(dtype_bytes(linear_state_dtype), dtype_bytes(torch_dtype));
}

const char* architecture_name(Architecture arch) {
  switch (arch) {
    case Architecture::kLlama: return "LlamaForCausalLM";
    case Architecture::kMistral: return "MistralForCausalLM";
    case Architecture::kQwen2: return "Qwen2ForCausalLM";
    case Architecture::kQwen3: return "Qwen3ForCausalLM";
    case Architecture::kQwen3Next: return "Qwen3NextForCausalLM";
  }
  return "?";
}

std::string supported_architectures() {
  std::string out;
  for (const auto& a : kArchitectureNames) {
    if (!out.empty()) out += ", ";
    out += a.hf_name;
  }
  return out;
}

ModelConfig parse_model_config(const json& root, const std::string& source) {
  const Fields f(root, source);
  ModelConfig c;
  c.architecture = parse_architecture(f, &c.model_type);

  c.vocab_size = f.required_positive("vocab_size");
  c.hidden_size = f.required_positive("hidden_size");
  c.num_layers = f.required_positive("num_hidden_layers");
  c.num_heads = f.required_positive("num_attention_heads");
  c.num_kv_heads = f.optional_positive("num_key_value_heads").value_or(c.num_heads);
  NIBBLE_CHECK(c.num_heads % c.num_kv_heads == 0,
               "{}: num_attention_heads ({}) must be a multiple of num_key_value_heads ({})", source, c.num_heads,
               c.num_kv_heads);
  if (auto head_dim = f.optional_positive("head_dim")) {
    c.head_dim = *head_dim;
  } else {
    NIBBLE_CHECK(c.hidden_size % c.num_heads == 0,
                 "{}: no 'head_dim' and hidden_size ({}) is not a multiple of num_attention_heads ({})", source,
                 c.hidden_size, c.num_heads);
    c.head_dim = c.hidden_size / c.num_heads;
  }
  c.max_position_embeddings = f.required_positive("max_position_embeddings");
  c.rms_norm_eps = f.optional_number("rms_norm_eps").value_or(1e-6);
  NIBBLE_CHECK(c.rms_norm_eps > 0, "{}: rms_norm_eps must be positive, got {}", source, c.rms_norm_eps);
  parse_rope(f, c);

  c.tie_word_embeddings = f.boolean("tie_word_embeddings", false);
  // Qwen2's q/k/v projections always carry biases (transformers hard-codes them); the others say so
  // with attention_bias. Qwen3-Next's q_proj always yields the output gate.
  c.attention_bias = c.architecture == Architecture::kQwen2 || f.boolean("attention_bias", false);
  c.qk_norm = c.architecture == Architecture::kQwen3 || c.architecture == Architecture::kQwen3Next;
  c.attn_output_gate = c.architecture == Architecture::kQwen3Next && f.boolean("attn_output_gate", true);
  c.torch_dtype = parse_weight_dtype(f, &c.torch_dtype_given);

  const bool sliding = c.architecture == Architecture::kMistral || f.boolean("use_sliding_window", false);
  if (sliding) c.sliding_window = f.optional_positive("sliding_window");

  parse_layer_kinds(f, c);
  parse_linear_attention(f, c);
  parse_moe(f, c);
  if (c.moe) {
    c.intermediate_size = f.optional_positive("intermediate_size").value_or(0);
    NIBBLE_CHECK(c.moe->mlp_only_layers.empty() || c.intermediate_size > 0,
                 "{}: missing required field 'intermediate_size' (mlp_only_layers use a dense MLP)", source);
  } else {
    c.intermediate_size = f.required_positive("intermediate_size");
  }
  NIBBLE_CHECK(c.num_full_attention_layers() > 0, "{}: no full-attention layer (every layer is linear attention)",
               source);
  parse_special_tokens(f, c);
  return c;
}

ModelConfig load_model_config(const std::filesystem::path& config_json) {
  const std::string source = config_json.string();
  std::ifstream in(config_json, std::ios::binary);
  NIBBLE_CHECK(in.good(), "cannot open model config '{}'", source);
  std::ostringstream text;
  text << in.rdbuf();
  json root;
  try {
    root = json::parse(text.str());
  } catch (const json::parse_error& e) {
    NIBBLE_FAIL("{}: not valid JSON: {}", source, e.what());
  }
  return parse_model_config(root, source);
}

}  // namespace nibble::config
