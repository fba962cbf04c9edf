// nibble kvq roundtrip: what a KV number format does to a tensor. Reads a float32 .npy, quantizes
// every vector along the last dimension (optionally Hadamard-rotated first), writes the dequantized
// float32 .npy and prints RMSE, max abs error and SQNR. The work is quant/roundtrip.h; this file
// parses flags, reads and writes files, and prints.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "common/error.h"
#include "common/npy.h"
#include "quant/roundtrip.h"

namespace {

using nibble::quant::ElemFormat;
using nibble::quant::Rotation;

struct KvqRoundtripArgs {
  std::string format;
  std::string scale_text;  // --scale, parsed here so a bad value gets nibble's message
  bool has_scale = false;
  std::string rotate = "none";
  std::string in_path;
  std::string out_path;
  bool json = false;
};

float parse_scale(const std::string& text) {
  float value = 0.0f;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  NIBBLE_CHECK(ec == std::errc() && ptr == end, "--scale must be a number, got '{}'", text);
  NIBBLE_CHECK(std::isfinite(value) && value > 0.0f, "--scale must be positive and finite, got '{}'", text);
  return value;
}

std::string shape_text(const std::vector<int64_t>& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

// JSON has no infinity: a non-finite statistic is written as null.
nlohmann::json json_number(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); }

void run_kvq_roundtrip(const KvqRoundtripArgs& args) {
  const ElemFormat format = nibble::quant::parse_elem_format(args.format);
  const Rotation rotation = nibble::quant::parse_rotation(args.rotate);
  NIBBLE_CHECK(!args.has_scale || nibble::quant::uses_global_scale(format),
               "--scale applies to fp8 and nvfp4 only; {} has no global scale", args.format);
  const float global_scale = args.has_scale ? parse_scale(args.scale_text) : 1.0f;

  const nibble::NpyArray input = nibble::read_npy(args.in_path);
  NIBBLE_CHECK(!input.shape.empty(), "{}: a 0-d array has no vectors to quantize", args.in_path);
  NIBBLE_CHECK(input.numel() > 0, "{}: the array of shape {} is empty", args.in_path, shape_text(input.shape));
  const int64_t vector_dim = input.shape.back();
  const nibble::quant::RoundtripOptions options{.format = format, .global_scale = global_scale, .rotation = rotation};
  try {
    nibble::quant::validate_roundtrip(options, vector_dim);
  } catch (const nibble::Error& e) {
    throw nibble::Error(fmt::format("{} (shape {}): {}", args.in_path, shape_text(input.shape), e.what()));
  }

  const std::vector<float> output = nibble::quant::roundtrip_vectors(input.data, vector_dim, options);
  nibble::write_npy(args.out_path, input.shape, output);
  const nibble::quant::ErrorStats stats = nibble::quant::error_stats(input.data, output);

  const int64_t n_vectors = input.numel() / vector_dim;
  if (args.json) {
    const nlohmann::json report = {
        {"format", nibble::quant::elem_format_name(format)},
        {"global_scale", nibble::quant::uses_global_scale(format) ? json_number(global_scale) : nullptr},
        {"rotation", rotation == Rotation::kHadamard ? "hadamard" : "none"},
        {"in", args.in_path},
        {"out", args.out_path},
        {"shape", input.shape},
        {"vectors", n_vectors},
        {"elements", stats.elements},
        {"nonfinite_inputs", stats.nonfinite_inputs},
        {"rmse", json_number(stats.rmse)},
        {"max_abs_error", json_number(stats.max_abs_error)},
        {"sqnr_db", json_number(stats.sqnr_db)},
    };
    fmt::print("{}\n", report.dump());
    return;
  }
  fmt::print("{} round trip of {}: shape {}, {} vectors of {}{}, rotation {}\n", nibble::quant::elem_format_name(format),
             args.in_path, shape_text(input.shape), n_vectors, vector_dim,
             nibble::quant::uses_global_scale(format) ? fmt::format(", global scale {:.9g}", global_scale) : "",
             rotation == Rotation::kHadamard ? "hadamard" : "none");
  fmt::print("rmse            {:.9g}\n", stats.rmse);
  fmt::print("max_abs_error   {:.9g}\n", stats.max_abs_error);
  fmt::print("sqnr_db         {:.9g}\n", stats.sqnr_db);
  if (stats.nonfinite_inputs > 0) {
    fmt::print("nonfinite_inputs {} (NaN/Inf inputs, left out of the statistics)\n", stats.nonfinite_inputs);
  }
  fmt::print("wrote {}\n", args.out_path);
}

}  // namespace

void add_kvq_command(CLI::App& app) {
  CLI::App* kvq = app.add_subcommand("kvq", "What a KV number format does to a tensor");
  kvq->require_subcommand(1);

  auto args = std::make_shared<KvqRoundtripArgs>();
  CLI::App* roundtrip = kvq->add_subcommand(
      "roundtrip", "Quantize each last-dimension vector of a float32 .npy and write the dequantized tensor");
  roundtrip->add_option("--format", args->format, "f32 | bf16 | fp8 | nvfp4")->required();
  CLI::Option* scale =
      roundtrip->add_option("--scale", args->scale_text, "global dequant multiplier g of fp8 / nvfp4 (default 1)");
  roundtrip->add_option("--rotate", args->rotate, "none | hadamard (last dim a power of two)");
  roundtrip->add_option("--in", args->in_path, "input .npy: float32, C order, last dim a multiple of 16")->required();
  roundtrip->add_option("--out", args->out_path, "output .npy: the dequantized float32 tensor, same shape")
      ->required();
  roundtrip->add_flag("--json", args->json, "print one JSON object instead of text");
  roundtrip->callback([args, scale] {
    args->has_scale = scale->count() > 0;
    run_kvq_roundtrip(*args);
  });
}
