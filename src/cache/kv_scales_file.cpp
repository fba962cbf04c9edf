#include "cache/kv_scales_file.h"

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/error.h"

namespace nibble::cache {
namespace {

constexpr float kE4m3Max = 448.0f;
constexpr float kE2m1Max = 6.0f;

bool scale_ok(float s) { return std::isfinite(s) && s >= kKvScaleMin && s <= kKvScaleMax; }

const char* rotation_name(quant::Rotation r) { return r == quant::Rotation::kHadamard ? "hadamard" : "none"; }

float number_field(const nlohmann::json& layer, const char* key, size_t index, const std::string& path) {
  NIBBLE_CHECK(layer.contains(key), "{}: layers[{}] has no \"{}\"", path, index, key);
  const nlohmann::json& v = layer.at(key);
  NIBBLE_CHECK(v.is_number(), "{}: layers[{}].{} is not a number", path, index, key);
  return v.get<float>();
}

void check_scale(float s, const char* what, size_t layer, const std::string& source) {
  NIBBLE_CHECK(scale_ok(s), "{}: layers[{}].{} = {} is not a finite scale in [{}, {}]", source, layer, what, s,
               kKvScaleMin, kKvScaleMax);
}

void check_layer(const KvLayerScales& l, size_t i, const std::string& source) {
  NIBBLE_CHECK(std::isfinite(l.k_amax) && l.k_amax >= 0.0f, "{}: layers[{}].k_amax = {} is not a finite amax", source,
               i, l.k_amax);
  NIBBLE_CHECK(std::isfinite(l.v_amax) && l.v_amax >= 0.0f, "{}: layers[{}].v_amax = {} is not a finite amax", source,
               i, l.v_amax);
  check_scale(l.k_scale_nvfp4, "k_scale_nvfp4", i, source);
  check_scale(l.v_scale_nvfp4, "v_scale_nvfp4", i, source);
  check_scale(l.k_scale_fp8, "k_scale_fp8", i, source);
  check_scale(l.v_scale_fp8, "v_scale_fp8", i, source);
}

}  // namespace

KvScalesFile kv_scales_from_amax(std::string model, quant::Rotation rotation, const std::vector<float>& k_amax,
                                 const std::vector<float>& v_amax) {
  NIBBLE_CHECK(k_amax.size() == v_amax.size() && !k_amax.empty(), "calibration: {} K and {} V amax values",
               k_amax.size(), v_amax.size());
  KvScalesFile file{.model = std::move(model), .rotation = rotation, .layers = {}};
  for (size_t i = 0; i < k_amax.size(); ++i) {
    const KvLayerScales l{.k_amax = k_amax[i],
                          .v_amax = v_amax[i],
                          .k_scale_nvfp4 = k_amax[i] / (kE2m1Max * kE4m3Max),
                          .v_scale_nvfp4 = v_amax[i] / (kE2m1Max * kE4m3Max),
                          .k_scale_fp8 = k_amax[i] / kE4m3Max,
                          .v_scale_fp8 = v_amax[i] / kE4m3Max};
    check_layer(l, i, "calibration");
    file.layers.push_back(l);
  }
  return file;
}

KvScalesFile read_kv_scales_file(const std::filesystem::path& path) {
  const std::string source = path.string();
  std::ifstream in(path);
  NIBBLE_CHECK(in.good(), "cannot read KV scales file {}", source);
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text.str());
  } catch (const nlohmann::json::exception& e) {
    NIBBLE_FAIL("{}: malformed JSON: {}", source, e.what());
  }
  NIBBLE_CHECK(j.is_object(), "{}: expected a JSON object", source);
  KvScalesFile file;
  if (j.contains("model")) {
    NIBBLE_CHECK(j.at("model").is_string(), "{}: \"model\" is not a string", source);
    file.model = j.at("model").get<std::string>();
  }
  NIBBLE_CHECK(j.contains("rotation") && j.at("rotation").is_string(), "{}: missing string field \"rotation\"", source);
  const std::string rotation = j.at("rotation").get<std::string>();
  NIBBLE_CHECK(rotation == "none" || rotation == "hadamard", "{}: rotation '{}' is not none or hadamard", source,
               rotation);
  file.rotation = quant::parse_rotation(rotation);
  NIBBLE_CHECK(j.contains("layers") && j.at("layers").is_array() && !j.at("layers").empty(),
               "{}: \"layers\" must be a non-empty array", source);
  const nlohmann::json& layers = j.at("layers");
  for (size_t i = 0; i < layers.size(); ++i) {
    const nlohmann::json& l = layers[i];
    NIBBLE_CHECK(l.is_object(), "{}: layers[{}] is not an object", source, i);
    const KvLayerScales s{.k_amax = number_field(l, "k_amax", i, source),
                          .v_amax = number_field(l, "v_amax", i, source),
                          .k_scale_nvfp4 = number_field(l, "k_scale_nvfp4", i, source),
                          .v_scale_nvfp4 = number_field(l, "v_scale_nvfp4", i, source),
                          .k_scale_fp8 = number_field(l, "k_scale_fp8", i, source),
                          .v_scale_fp8 = number_field(l, "v_scale_fp8", i, source)};
    check_layer(s, i, source);
    file.layers.push_back(s);
  }
  return file;
}

void write_kv_scales_file(const std::filesystem::path& path, const KvScalesFile& file) {
  nlohmann::json layers = nlohmann::json::array();
  for (const KvLayerScales& l : file.layers) {
    layers.push_back({{"k_amax", l.k_amax},
                      {"v_amax", l.v_amax},
                      {"k_scale_nvfp4", l.k_scale_nvfp4},
                      {"v_scale_nvfp4", l.v_scale_nvfp4},
                      {"k_scale_fp8", l.k_scale_fp8},
                      {"v_scale_fp8", l.v_scale_fp8}});
  }
  const nlohmann::json j = {{"model", file.model}, {"rotation", rotation_name(file.rotation)}, {"layers", layers}};
  std::ofstream out(path);
  NIBBLE_CHECK(out.good(), "cannot write KV scales file {}", path.string());
  out << j.dump(2) << "\n";
  NIBBLE_CHECK(out.good(), "writing KV scales file {} failed", path.string());
}

KvGlobalScales select_kv_global_scales(const KvScalesFile& file, const KvScalesUse& use, const std::string& source) {
  NIBBLE_CHECK(static_cast<int64_t>(file.layers.size()) == use.num_layers,
               "{}: has scales for {} layers, the model has {} full-attention layers", source, file.layers.size(),
               use.num_layers);
  NIBBLE_CHECK(file.rotation == use.rotation,
               "{}: calibrated with rotation '{}', this run uses '{}' (calibrate again with the same --rotate)", source,
               rotation_name(file.rotation), rotation_name(use.rotation));
  const quant::KvFormat format = quant::kv_format(use.dtype);
  auto pick = [](quant::ElemFormat f, float nvfp4, float fp8) {
    if (f == quant::ElemFormat::kNVFP4) return nvfp4;
    if (f == quant::ElemFormat::kFP8) return fp8;
    return 1.0f;  // f32, bf16: no global scale
  };
  KvGlobalScales g;
  for (size_t i = 0; i < file.layers.size(); ++i) {
    check_layer(file.layers[i], i, source);
    g.k.push_back(pick(format.k, file.layers[i].k_scale_nvfp4, file.layers[i].k_scale_fp8));
    g.v.push_back(pick(format.v, file.layers[i].v_scale_nvfp4, file.layers[i].v_scale_fp8));
  }
  return g;
}

KvGlobalScales load_kv_global_scales(const std::filesystem::path& path, const KvScalesUse& use) {
  return select_kv_global_scales(read_kv_scales_file(path), use, path.string());
}

}  // namespace nibble::cache
