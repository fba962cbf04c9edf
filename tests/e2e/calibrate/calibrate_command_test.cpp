// `nibble calibrate` and `--kv-scales` as a user runs them on models/stories260k: the written file
// is valid and matches a second run; score accepts it and rejects a file for another rotation or
// another layer count, and a bad --nvfp4-scale-rule, with a clear message and a non-zero exit.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "cache/kv_scales_file.h"

namespace {

namespace fs = std::filesystem;
const fs::path kNibble = fs::path(NIBBLE_BINARY_DIR) / "apps" / "nibble" / "nibble";
const fs::path kModel = fs::path(NIBBLE_SOURCE_DIR) / "models" / "stories260k";

fs::path scratch(const std::string& name) {
  return fs::temp_directory_path() / ("nibble_calib_cmd_" + std::to_string(::getpid()) + "_" + name);
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

struct CommandRun {
  int exit_code;
  std::string out, err;
};

CommandRun run(const std::string& args) {
  const fs::path out = scratch("stdout"), err = scratch("stderr");
  const std::string cmd = kNibble.string() + " " + args + " > " + out.string() + " 2> " + err.string();
  const int status = std::system(cmd.c_str());
  CommandRun r{WIFEXITED(status) ? WEXITSTATUS(status) : -1, slurp(out), slurp(err)};
  fs::remove(out);
  fs::remove(err);
  return r;
}

fs::path corpus() {
  const fs::path p = scratch("corpus.txt");
  std::ofstream f(p);
  for (int i = 0; i < 6; ++i) {
    f << "Once upon a time, there was a little girl named Lily. She loved to play in the park with her dog.\n\n"
         "One day, the sun was hot and the sky was blue. Tom and Lily went to the river to swim.\n\n";
  }
  return p;
}

TEST(CalibrateCommand, WritesAValidFileThatScoreAccepts) {
  const fs::path text = corpus(), out = scratch("scales.json"), again = scratch("again.json");
  const std::string common = "calibrate --model " + kModel.string() + " --corpus " + text.string() +
                             " --context 32 --docs 3 --threads 2 --rotate hadamard --out ";
  CommandRun r = run(common + out.string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("calibrated 5 layers over 3 documents (96 tokens), rotation hadamard"), std::string::npos)
      << r.out;
  const nibble::cache::KvScalesFile f = nibble::cache::read_kv_scales_file(out);  // validates
  EXPECT_EQ(f.model, "stories260k");
  EXPECT_EQ(f.rotation, nibble::quant::Rotation::kHadamard);
  ASSERT_EQ(f.layers.size(), 5u);
  for (const auto& l : f.layers) {
    EXPECT_FLOAT_EQ(l.k_scale_nvfp4, l.k_amax / 2688.0f);
    EXPECT_FLOAT_EQ(l.v_scale_fp8, l.v_amax / 448.0f);
  }
  // Deterministic: a second run writes the same bytes.
  ASSERT_EQ(run(common + again.string()).exit_code, 0);
  EXPECT_EQ(slurp(out), slurp(again));

  const std::string score = "score --model " + kModel.string() + " --text 'Lily went to the park.' --threads 2 ";
  r = run(score + "--kv-dtype fp8 --rotate hadamard --kv-scales " + out.string());
  EXPECT_EQ(r.exit_code, 0) << r.err;
  r = run(score + "--kv-dtype fp8 --kv-scales " + out.string());
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("calibrated with rotation 'hadamard', this run uses 'none'"), std::string::npos) << r.err;
  r = run(score + "--kv-dtype fp8 --rotate hadamard --nvfp4-scale-rule 5over6");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("unknown rule '5over6'"), std::string::npos) << r.err;

  // Another layer count.
  nlohmann::json j = nlohmann::json::parse(slurp(out));
  j["layers"].erase(j["layers"].size() - 1);
  const fs::path four = scratch("four.json");
  std::ofstream(four) << j.dump();
  r = run(score + "--kv-dtype fp8 --rotate hadamard --kv-scales " + four.string());
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("has scales for 4 layers, the model has 5 full-attention layers"), std::string::npos) << r.err;
  // eval applies the file to every configuration with a global scale, checking its rotation.
  const std::string eval = "eval --model " + kModel.string() + " --tasks perplexity --corpus " + text.string() +
                           " --context 32 --docs 2 --bootstrap 50 --threads 2 --json --out " +
                           scratch("eval_out").string() + " --kv-scales " + out.string();
  r = run(eval + " --configs fp8+hadamard,bf16");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json report = nlohmann::json::parse(r.out);
  EXPECT_EQ(report["settings"]["kv_scales"], out.string());
  r = run(eval + " --configs fp8");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("was calibrated for another rotation than configuration fp8"), std::string::npos) << r.err;
  fs::remove_all(scratch("eval_out"));
  for (const fs::path& p : {text, out, again, four}) fs::remove(p);
}

TEST(CalibrateCommand, RejectsACorpusShorterThanOneDocument) {
  const fs::path text = scratch("short.txt");
  std::ofstream(text) << "Lily.\n";
  const CommandRun r = run("calibrate --model " + kModel.string() + " --corpus " + text.string() +
                           " --context 64 --out " + scratch("x.json").string());
  EXPECT_NE(r.exit_code, 0);
  EXPECT_FALSE(r.err.empty());
  fs::remove(text);
}

}  // namespace
