// `nibble calibrate` and `--kv-scales` as a user runs them on models/stories260k: the written file
// is valid and matches a second run; score accepts it and rejects a file for another rotation or
// another layer count, and a bad --nvfp4-scale-rule, with a clear message and a non-zero exit.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "cache/kv_scales_file.h"
#include "e2e/support/nibble_command.h"

namespace {

namespace fs = std::filesystem;
using nibble::test::CommandRun;
using nibble::test::run_nibble;
using nibble::test::scratch_path;
using nibble::test::slurp;
const fs::path kModel = fs::path(NIBBLE_SOURCE_DIR) / "models" / "stories260k";

fs::path corpus() {
  const fs::path p = scratch_path("corpus.txt");
  std::ofstream f(p);
  for (int i = 0; i < 6; ++i) {
    f << "Once upon a time, there was a little girl named Lily. She loved to play in the park with her dog.\n\n"
         "One day, the sun was hot and the sky was blue. Tom and Lily went to the river to swim.\n\n";
  }
  return p;
}

TEST(CalibrateCommand, WritesAValidFileThatScoreAccepts) {
  const fs::path text = corpus(), out = scratch_path("scales.json"), again = scratch_path("again.json");
  const std::string common = "calibrate --model " + kModel.string() + " --corpus " + text.string() +
                             " --context 32 --docs 3 --threads 2 --rotate hadamard --out ";
  CommandRun r = run_nibble(common + out.string());
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
  ASSERT_EQ(run_nibble(common + again.string()).exit_code, 0);
  EXPECT_EQ(slurp(out), slurp(again));

  const std::string score = "score --model " + kModel.string() + " --text 'Lily went to the park.' --threads 2 ";
  r = run_nibble(score + "--kv-dtype fp8 --rotate hadamard --kv-scales " + out.string());
  EXPECT_EQ(r.exit_code, 0) << r.err;
  r = run_nibble(score + "--kv-dtype fp8 --rotate none --kv-scales " + out.string());
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("calibrated with rotation 'hadamard', this run uses 'none'"), std::string::npos) << r.err;
  r = run_nibble(score + "--kv-dtype fp8 --rotate hadamard --nvfp4-scale-rule 5over6");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("unknown rule '5over6'"), std::string::npos) << r.err;

  // Another layer count.
  nlohmann::json j = nlohmann::json::parse(slurp(out));
  j["layers"].erase(j["layers"].size() - 1);
  const fs::path four = scratch_path("four.json");
  std::ofstream(four) << j.dump();
  r = run_nibble(score + "--kv-dtype fp8 --rotate hadamard --kv-scales " + four.string());
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("has scales for 4 layers, the model has 5 full-attention layers"), std::string::npos) << r.err;
  // eval applies the file to every configuration with a global scale, checking its rotation.
  const std::string eval = "eval --model " + kModel.string() + " --tasks perplexity --corpus " + text.string() +
                           " --context 32 --docs 2 --bootstrap 50 --threads 2 --json --out " +
                           scratch_path("eval_out").string() + " --kv-scales " + out.string();
  r = run_nibble(eval + " --configs fp8+hadamard,bf16");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json report = nlohmann::json::parse(r.out);
  EXPECT_EQ(report["settings"]["kv_scales"], out.string());
  r = run_nibble(eval + " --configs fp8");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("was calibrated for another rotation than configuration fp8"), std::string::npos) << r.err;
  fs::remove_all(scratch_path("eval_out"));
  for (const fs::path& p : {text, out, again, four}) fs::remove(p);
}

TEST(CalibrateCommand, RejectsACorpusShorterThanOneDocument) {
  const fs::path text = scratch_path("short.txt");
  std::ofstream(text) << "Lily.\n";
  const CommandRun r = run_nibble("calibrate --model " + kModel.string() + " --corpus " + text.string() +
                                  " --context 64 --out " + scratch_path("x.json").string());
  EXPECT_NE(r.exit_code, 0);
  EXPECT_FALSE(r.err.empty());
  fs::remove(text);
}

}  // namespace
