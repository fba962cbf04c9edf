// `nibble eval` as a user runs it on models/stories260k: exit code, --json on stdout, the files in
// --out, and a clear error for a bad configuration.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace {

namespace fs = std::filesystem;
const fs::path kNibble = fs::path(NIBBLE_BINARY_DIR) / "apps" / "nibble" / "nibble";
const fs::path kModel = fs::path(NIBBLE_SOURCE_DIR) / "models" / "stories260k";
const fs::path kCorpus = fs::path(NIBBLE_SOURCE_DIR) / "tests" / "e2e" / "eval" / "corpus.txt";

fs::path scratch(const std::string& name) {
  return fs::temp_directory_path() / ("nibble_eval_cmd_" + std::to_string(::getpid()) + "_" + name);
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

TEST(EvalCommand, WritesReportsAndPrintsJson) {
  const fs::path out = scratch("out");
  const CommandRun r = run("eval --model " + kModel.string() + " --configs f32,fp8,nvfp4 --corpus " + kCorpus.string() +
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

TEST(EvalCommand, BadConfigurationIsAClearError) {
  const CommandRun r = run("eval --model " + kModel.string() + " --configs f32,fp9 --tasks passkey --out " +
                           scratch("bad").string());
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("fp9"), std::string::npos) << r.err;
  const CommandRun t = run("eval --model " + kModel.string() + " --tasks perplexity --out " + scratch("bad").string());
  EXPECT_NE(t.exit_code, 0);
  EXPECT_NE(t.err.find("--corpus"), std::string::npos) << t.err;
}

}  // namespace
