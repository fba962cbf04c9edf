// `nibble eval` as a user runs it on models/stories260k: exit code, --json on stdout, the files in
// --out, the multineedle task rescored from its JSONL, and a clear error for a bad configuration.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "e2e/support/nibble_command.h"

namespace {

namespace fs = std::filesystem;
using nibble::test::CommandRun;
using nibble::test::run_nibble;
using nibble::test::scratch_path;
using nibble::test::slurp;
const fs::path kModel = fs::path(NIBBLE_SOURCE_DIR) / "models" / "stories260k";
const fs::path kCorpus = fs::path(NIBBLE_SOURCE_DIR) / "tests" / "e2e" / "eval" / "corpus.txt";

TEST(EvalCommand, WritesReportsAndPrintsJson) {
  const fs::path out = scratch_path("out");
  const CommandRun r = run_nibble("eval --model " + kModel.string() + " --configs f32,fp8,nvfp4 --corpus " + kCorpus.string() +
                                  " --context 48 --docs 2 --chunk 16 --passkey-lengths 180 --passkey-depths 0,0.5 --samples 1"
                                  " --max-new-tokens 4 --bootstrap 100 --threads 2 --seed 3 --json --out " + out.string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["schema"], "nibble-eval/1");
  EXPECT_EQ(j["configs"], nlohmann::json({"f32", "fp8"}));
  EXPECT_EQ(j["skipped"][0]["name"], "nvfp4");
  EXPECT_EQ(j["perplexity"]["documents"], 2);
  EXPECT_EQ(j["perplexity"]["configs"][0]["mean_kl"], 0.0);
  EXPECT_GT(j["perplexity"]["configs"][1]["mean_kl"].get<double>(), 0.0);
  EXPECT_EQ(j["passkey"]["items"], 2);
  for (const char* f : {"report.json", "report.md", "tokens_f32.npy", "tokens_fp8.npy", "kl_by_position.svg",
                        "passkey_items.jsonl", "passkey_by_depth.svg"}) {
    EXPECT_TRUE(fs::exists(out / f)) << f;
  }
  EXPECT_EQ(nlohmann::json::parse(slurp(out / "report.json")), j);
  fs::remove_all(out);
}

TEST(EvalCommand, MultiNeedleTask) {
  const fs::path out = scratch_path("multineedle");
  const CommandRun r = run_nibble("eval --model " + kModel.string() + " --configs f32,fp8 --tasks multineedle --needles 3"
                                  " --passkey-lengths 320 --passkey-depths 0,1 --samples 1 --max-new-tokens 6 --chunk 32"
                                  " --threads 2 --seed 5 --json --out " + out.string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_TRUE(j["passkey"].is_null());
  EXPECT_TRUE(j["perplexity"].is_null());
  const nlohmann::json& m = j["multineedle"];
  EXPECT_EQ(m["items"], 2);
  EXPECT_EQ(m["needles"], 3);
  // The reference runs first, then every --configs entry (f32 again, as for passkey).
  ASSERT_EQ(m["configs"].size(), 3u);
  // Rescore every item from the JSONL (its needles and output) and compare with the report's counts.
  std::map<int, std::pair<int, int>> counts;  // config index -> (passed, confused); rows config-major
  std::istringstream lines(slurp(out / "multineedle_items.jsonl"));
  int rows = 0;
  for (std::string line; std::getline(lines, line); ++rows) {
    const nlohmann::json row = nlohmann::json::parse(line);
    ASSERT_EQ(row["needles"].size(), 3u);
    EXPECT_LE(row["prompt_tokens"].get<int>(), 320);
    EXPECT_EQ(row["config"], m["configs"][rows / 2]["name"]);
    std::set<int> positions;
    for (const nlohmann::json& n : row["needles"]) positions.insert(n["after"].get<int>());
    EXPECT_GE(positions.size(), 2u) << "needles spread through the filler: " << line;
    const std::string output = row["output"];
    const int asked = row["asked"];
    const bool pass = output.find(row["needles"][asked]["value"].get<std::string>()) != std::string::npos;
    bool confused = false;
    for (int k = 0; k < 3; ++k) {
      confused |= !pass && k != asked &&
                  output.find(row["needles"][k]["value"].get<std::string>()) != std::string::npos;
    }
    EXPECT_EQ(row["pass"], pass) << line;
    EXPECT_EQ(row["confused"], confused) << line;
    counts[rows / 2].first += pass;
    counts[rows / 2].second += confused;
  }
  EXPECT_EQ(rows, 6);  // 2 items x 3 configuration runs
  for (int c = 0; c < 3; ++c) {
    EXPECT_EQ(m["configs"][c]["items"], 2);
    EXPECT_EQ(m["configs"][c]["passed"], counts[c].first) << c;
    EXPECT_EQ(m["configs"][c]["confused"], counts[c].second) << c;
  }
  EXPECT_TRUE(m["configs"][0]["vs_reference"].is_null());
  EXPECT_FALSE(m["configs"][1]["vs_reference"].is_null());
  EXPECT_TRUE(fs::exists(out / "multineedle_by_depth.svg"));
  EXPECT_NE(slurp(out / "report.md").find("Multi-needle retrieval (3 needles"), std::string::npos);
  fs::remove_all(out);
}

TEST(EvalCommand, BadConfigurationIsAClearError) {
  const CommandRun r = run_nibble("eval --model " + kModel.string() + " --configs f32,fp9 --tasks passkey --out " +
                                  scratch_path("bad").string());
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("fp9"), std::string::npos) << r.err;
  const CommandRun t = run_nibble("eval --model " + kModel.string() + " --tasks perplexity --out " + scratch_path("bad").string());
  EXPECT_NE(t.exit_code, 0);
  EXPECT_NE(t.err.find("--corpus"), std::string::npos) << t.err;
}

}  // namespace
