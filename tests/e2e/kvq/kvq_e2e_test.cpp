// `nibble kvq roundtrip` end to end: writes .npy inputs, runs the built binary, and checks the
// output tensor bit for bit against the head-vector definitions in src/quant, the printed
// statistics against sums computed here, and every error case's exit code and message.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "common/npy.h"
#include "e2e/support/nibble_command.h"
#include "quant/kv_format.h"

namespace nibble {
namespace {

namespace fs = std::filesystem;
using quant::ElemFormat;

using RunResult = test::CommandRun;

class KvqTest : public testing::Test {
 protected:
  void SetUp() override {
    const auto* info = testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::path(NIBBLE_BINARY_DIR) / "tests/e2e/kvq/work" / info->name();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    ASSERT_TRUE(fs::exists(test::nibble_binary())) << test::nibble_binary() << " is not built";
  }

  fs::path path(const std::string& name) const { return dir_ / name; }

  RunResult run(const std::string& args) const { return test::run_nibble(args); }

  // Runs `kvq roundtrip` on in.npy -> out.npy with extra flags.
  RunResult roundtrip(const std::string& flags) const {
    return run("kvq roundtrip " + flags + " --in '" + path("in.npy").string() + "' --out '" +
               path("out.npy").string() + "'");
  }

  fs::path dir_;
};

std::vector<float> random_values(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> x(n);
  for (float& v : x) v = normal(rng);
  for (size_t i = 0; i < n; i += 37) x[i] *= 25.0f;  // outliers
  return x;
}

// The definition: every last-dim vector through quantize_head_vector / dequantize_head_vector.
std::vector<float> expected_roundtrip(ElemFormat f, const std::vector<float>& x, int d, float g, bool rotate) {
  std::vector<float> out(x.size());
  std::vector<float> data_words(d);     // [data_bytes] (at most 4d), float-aligned
  std::vector<uint8_t> scales(d / 16);  // [d/16]
  auto* data = reinterpret_cast<uint8_t*>(data_words.data());
  for (size_t v = 0; v < x.size() / d; ++v) {
    std::vector<float> vec(x.begin() + v * d, x.begin() + (v + 1) * d);
    if (rotate) quant::hadamard_inplace(vec.data(), d);
    quant::quantize_head_vector(f, vec.data(), d, g, data, scales.data());
    quant::dequantize_head_vector(f, data, scales.data(), d, g, out.data() + v * d);
    if (rotate) quant::hadamard_inplace(out.data() + v * d, d);
  }
  return out;
}

struct Stats {
  double rmse, max_abs_error, sqnr_db;
};

Stats stats_of(const std::vector<float>& x, const std::vector<float>& y) {
  double noise = 0, signal = 0, max_err = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double e = static_cast<double>(x[i]) - y[i];
    noise += e * e;
    signal += static_cast<double>(x[i]) * x[i];
    max_err = std::max(max_err, std::fabs(e));
  }
  return {std::sqrt(noise / x.size()), max_err,
          noise == 0 ? std::numeric_limits<double>::infinity() : 10 * std::log10(signal / noise)};
}

// "name   value" line of the text report.
double printed(const std::string& out, const std::string& name) {
  std::istringstream lines(out);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind(name + " ", 0) == 0) return std::stod(line.substr(name.size()));
  }
  ADD_FAILURE() << "no line '" << name << "' in:\n" << out;
  return std::nan("");
}

void expect_close(double got, double want, const char* what) {
  if (std::isinf(want)) {
    EXPECT_EQ(got, want) << what;
  } else {
    EXPECT_NEAR(got, want, 1e-7 * std::max(1.0, std::fabs(want))) << what;
  }
}

TEST_F(KvqTest, OutputIsBitExactAndStatisticsAreRight) {
  const std::vector<int64_t> shape = {3, 5, 64};  // 15 vectors of 64
  const std::vector<float> x = random_values(3 * 5 * 64, 1);
  write_npy(path("in.npy"), shape, x);
  const struct {
    ElemFormat format;
    float g;
    const char* flags;
  } cases[] = {{ElemFormat::kF32, 1.0f, "--format f32"},          {ElemFormat::kBF16, 1.0f, "--format bf16"},
               {ElemFormat::kFP8, 1.0f, "--format fp8"},          {ElemFormat::kFP8, 0.05f, "--format fp8 --scale 0.05"},
               {ElemFormat::kNVFP4, 1.0f, "--format nvfp4"},      {ElemFormat::kNVFP4, 0.2f, "--format nvfp4 --scale 0.2"}};
  for (const auto& c : cases) {
    SCOPED_TRACE(c.flags);
    const RunResult r = roundtrip(c.flags);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const NpyArray y = read_npy(path("out.npy"));
    EXPECT_EQ(y.shape, shape);
    const std::vector<float> want = expected_roundtrip(c.format, x, 64, c.g, false);
    ASSERT_EQ(y.data.size(), want.size());
    int64_t differing = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      uint32_t a, b;
      std::memcpy(&a, &y.data[i], 4);
      std::memcpy(&b, &want[i], 4);
      differing += a != b;
    }
    EXPECT_EQ(differing, 0) << "elements not bit-exact to the definition";

    const Stats s = stats_of(x, want);
    expect_close(printed(r.out, "rmse"), s.rmse, "rmse");
    expect_close(printed(r.out, "max_abs_error"), s.max_abs_error, "max_abs_error");
    expect_close(printed(r.out, "sqnr_db"), s.sqnr_db, "sqnr_db");
    if (c.format == ElemFormat::kF32) EXPECT_EQ(s.rmse, 0.0);
    else EXPECT_GT(s.rmse, 0.0);
  }
}

TEST_F(KvqTest, JsonReport) {
  const std::vector<float> x = random_values(2 * 32, 2);
  write_npy(path("in.npy"), std::vector<int64_t>{2, 32}, x);
  const RunResult r = roundtrip("--format nvfp4 --scale 0.5 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["format"], "nvfp4");
  EXPECT_EQ(j["global_scale"], 0.5);
  EXPECT_EQ(j["rotation"], "none");
  EXPECT_EQ(j["shape"], nlohmann::json::array({2, 32}));
  EXPECT_EQ(j["vectors"], 2);
  EXPECT_EQ(j["elements"], 64);
  EXPECT_EQ(j["nonfinite_inputs"], 0);
  const Stats s = stats_of(x, expected_roundtrip(ElemFormat::kNVFP4, x, 32, 0.5f, false));
  EXPECT_NEAR(j["rmse"].get<double>(), s.rmse, 1e-12 * s.rmse);
  EXPECT_NEAR(j["max_abs_error"].get<double>(), s.max_abs_error, 1e-12 * s.max_abs_error);
  EXPECT_NEAR(j["sqnr_db"].get<double>(), s.sqnr_db, 1e-9);

  // f32 is exact: SQNR is infinite, which JSON writes as null.
  const RunResult exact = roundtrip("--format f32 --json");
  ASSERT_EQ(exact.exit_code, 0) << exact.err;
  const nlohmann::json e = nlohmann::json::parse(exact.out);
  EXPECT_TRUE(e["sqnr_db"].is_null());
  EXPECT_EQ(e["rmse"], 0.0);
  EXPECT_TRUE(e["global_scale"].is_null());
}

TEST_F(KvqTest, HadamardRotation) {
  const std::vector<float> x = random_values(4 * 128, 3);
  write_npy(path("in.npy"), std::vector<int64_t>{4, 128}, x);
  const RunResult r = roundtrip("--format nvfp4 --rotate hadamard");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("rotation hadamard"), std::string::npos) << r.out;
  const NpyArray y = read_npy(path("out.npy"));
  const std::vector<float> want = expected_roundtrip(ElemFormat::kNVFP4, x, 128, 1.0f, true);
  ASSERT_EQ(y.data.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(y.data[i], want[i], 1e-5 * (1 + std::fabs(want[i]))) << i;
  // Rotation changes the result (it is not silently ignored).
  const std::vector<float> plain = expected_roundtrip(ElemFormat::kNVFP4, x, 128, 1.0f, false);
  EXPECT_NE(y.data, plain);
}

TEST_F(KvqTest, NonFiniteInputsAreReportedAndNanPropagates) {
  std::vector<float> x = random_values(2 * 16, 4);
  x[3] = std::nanf("");
  x[20] = std::numeric_limits<float>::infinity();
  write_npy(path("in.npy"), std::vector<int64_t>{2, 16}, x);
  const RunResult r = roundtrip("--format nvfp4");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("nonfinite_inputs 2"), std::string::npos) << r.out;
  const NpyArray y = read_npy(path("out.npy"));
  for (int i = 0; i < 16; ++i) EXPECT_TRUE(std::isnan(y.data[i])) << "NaN poisons its block, element " << i;
  EXPECT_EQ(y.data[20], 6.0f * 448.0f);  // +Inf saturates to 6 · 448 · g
}

// Every error: non-zero exit, a message naming the problem, no output file.
TEST_F(KvqTest, ErrorsExitNonZeroWithAMessage) {
  const std::vector<float> x16 = random_values(32, 5);
  const std::vector<uint8_t> good = serialize_npy(std::vector<int64_t>{2, 16}, x16);
  auto write_bytes = [&](const std::vector<uint8_t>& bytes) {
    std::ofstream(path("in.npy"), std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  };
  auto replaced = [&](const std::string& from, const std::string& to) {
    std::string text(good.begin(), good.end());
    text.replace(text.find(from), from.size(), to);
    return std::vector<uint8_t>(text.begin(), text.end());
  };
  struct Case {
    std::string name;
    std::function<void()> make_input;
    std::string flags;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"not npy", [&] { write_bytes({'h', 'e', 'l', 'l', 'o'}); }, "--format fp8", "not a .npy file"},
      {"truncated", [&] { write_bytes(std::vector<uint8_t>(good.begin(), good.end() - 5)); }, "--format fp8",
       "truncated .npy data"},
      {"float64", [&] { write_bytes(replaced("'<f4'", "'<f8'")); }, "--format fp8", "'<f8' (float64)"},
      {"fortran", [&] { write_bytes(replaced("False", "True ")); }, "--format fp8", "Fortran-order"},
      {"bad header", [&] { write_bytes(replaced("'shape'", "'shapx'")); }, "--format fp8", "malformed .npy header"},
      {"version", [&] { auto b = good; b[6] = 9; write_bytes(b); }, "--format fp8", "version 9.0"},
      {"last dim", [&] { write_npy(path("in.npy"), std::vector<int64_t>{4, 24}, std::vector<float>(96, 1.0f)); },
       "--format bf16", "multiple of 16"},
      {"rotation dim", [&] { write_npy(path("in.npy"), std::vector<int64_t>{2, 48}, std::vector<float>(96, 1.0f)); },
       "--format nvfp4 --rotate hadamard", "power of two, got 48"},
      {"0-d", [&] { write_npy(path("in.npy"), std::vector<int64_t>{}, std::vector<float>{1.0f}); }, "--format fp8",
       "0-d"},
      {"empty", [&] { write_npy(path("in.npy"), std::vector<int64_t>{0, 16}, std::vector<float>{}); }, "--format fp8",
       "empty"},
      {"scale zero", [&] { write_bytes(good); }, "--format nvfp4 --scale 0", "--scale must be positive and finite"},
      {"scale negative", [&] { write_bytes(good); }, "--format fp8 --scale=-2", "--scale must be positive and finite"},
      {"scale nan", [&] { write_bytes(good); }, "--format fp8 --scale nan", "--scale must be positive and finite"},
      {"scale inf", [&] { write_bytes(good); }, "--format fp8 --scale inf", "--scale must be positive and finite"},
      {"scale text", [&] { write_bytes(good); }, "--format fp8 --scale abc", "--scale must be a number, got 'abc'"},
      {"scale for bf16", [&] { write_bytes(good); }, "--format bf16 --scale 2", "--scale applies to fp8 and nvfp4"},
      {"format", [&] { write_bytes(good); }, "--format int4", "unknown format 'int4'"},
      {"k8v4 is a KV dtype", [&] { write_bytes(good); }, "--format k8v4", "unknown format 'k8v4'"},
      {"rotation", [&] { write_bytes(good); }, "--format fp8 --rotate walsh", "unknown rotation 'walsh'"},
      {"missing input", [&] { fs::remove(path("in.npy")); }, "--format fp8", "cannot open"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    fs::remove(path("out.npy"));
    c.make_input();
    const RunResult r = roundtrip(c.flags);
    EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
    EXPECT_NE(r.err.find("nibble: error: "), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(path("out.npy")));
  }

  // Flag errors caught by the command-line parser also exit non-zero and name the flag.
  write_bytes(good);
  RunResult r = run("kvq roundtrip --format fp8 --out '" + path("out.npy").string() + "'");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--in"), std::string::npos) << r.err;
  r = run("kvq");
  EXPECT_NE(r.exit_code, 0);
  // An output path that cannot be written.
  r = run("kvq roundtrip --format fp8 --in '" + path("in.npy").string() + "' --out '" +
          path("no/such/dir/out.npy").string() + "'");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("cannot open"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace nibble
