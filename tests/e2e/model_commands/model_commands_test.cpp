// `nibble generate` and `nibble score` as a user runs them, on models/stories260k: outputs checked
// against llama2.c's golden.json, and bad input (missing files, too-long or empty prompts) giving a
// clear message and a non-zero exit.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "common/npy.h"
#include "e2e/support/nibble_command.h"

namespace {

namespace fs = std::filesystem;
using nibble::test::CommandRun;
using nibble::test::run_nibble;
using nibble::test::scratch_path;
using nibble::test::shell_quoted;
using nibble::test::slurp;
const fs::path kModel = fs::path(NIBBLE_SOURCE_DIR) / "models" / "stories260k";

nlohmann::json golden() { return nlohmann::json::parse(slurp(kModel / "golden.json")); }

TEST(GenerateCommand, GreedyTextIsAPrefixOfTheGoldenContinuation) {
  const nlohmann::json g = golden();
  for (const nlohmann::json& c : g["cases"]) {
    if (c["prompt"] != "Once upon a time" && c["prompt"] != "") continue;
    const CommandRun r = run_nibble("generate --model " + kModel.string() + " --prompt " + shell_quoted(c["prompt"]) +
                      " --max-tokens 40 --ignore-eos --kv-dtype f32 --chunk 2");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    ASSERT_FALSE(r.out.empty());
    const std::string text = r.out.substr(0, r.out.size() - 1);  // the final newline
    const std::string expected = c["generated_text"];
    EXPECT_EQ(expected.substr(0, text.size()), text) << "prompt " << c["prompt"];
    EXPECT_GT(text.size(), 100u);
    EXPECT_NE(r.err.find("tok/s"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("decode: 40 tokens"), std::string::npos) << r.err;
  }
}

TEST(GenerateCommand, DefaultKvIsTheAccuracyStudysRecommendation) {
  // No --kv-dtype / --rotate: fp8 with the Hadamard rotation (head_dim 8 is a power of two); score
  // reports the same choice, and explicit flags override it.
  const std::string prompt = " --prompt 'Once upon a time' --max-tokens 8";
  CommandRun r = run_nibble("generate --model " + kModel.string() + prompt);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("kv fp8 + hadamard"), std::string::npos) << r.err;
  r = run_nibble("score --model " + kModel.string() + " --text 'Lily went to the park.' --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["kv_dtype"], "fp8");
  EXPECT_EQ(j["rotate"], "hadamard");
  r = run_nibble("generate --model " + kModel.string() + prompt + " --kv-dtype bf16");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("kv bf16\n"), std::string::npos) << r.err;  // auto rotation leaves bf16 unrotated
  r = run_nibble("generate --model " + kModel.string() + prompt + " --kv-dtype int4");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("int4"), std::string::npos) << r.err;
}

TEST(GenerateCommand, SeededSamplingIsReproducible) {
  const std::string args = "generate --model " + kModel.string() +
                           " --prompt 'Tom had' --max-tokens 30 --temperature 1.0 --top-p 0.9 --seed 11";
  const CommandRun a = run_nibble(args), b = run_nibble(args), c = run_nibble(args + "1");
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_EQ(a.out, b.out);
  EXPECT_NE(a.out, c.out);
}

TEST(ScoreCommand, LogitsAndLogProbsMatchTheGoldenLogits) {
  const nlohmann::json g = golden();
  const nlohmann::json& entry = g["logits"][1];
  const auto ids = entry["input_ids"].get<std::vector<int32_t>>();
  const auto expected = entry["logits"].get<std::vector<std::vector<double>>>();
  const fs::path ids_file = scratch_path("ids.json"), npy = scratch_path("logits.npy");
  std::ofstream(ids_file) << nlohmann::json(ids).dump();
  const CommandRun r = run_nibble("score --model " + kModel.string() + " --ids-json " + ids_file.string() + " --json --chunk 1 --kv-dtype f32 --logits-out " +
                    npy.string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nibble::NpyArray logits = nibble::read_npy(npy);
  ASSERT_EQ(logits.shape, (std::vector<int64_t>{3, 512}));
  for (int p = 0; p < 3; ++p)
    for (int v = 0; v < 512; ++v) ASSERT_NEAR(logits.data[p * 512 + v], expected[p][v], 1e-4) << p << " " << v;
  const nlohmann::json out = nlohmann::json::parse(r.out);
  ASSERT_EQ(out["logprobs"].size(), 2u);
  double nll = 0;
  for (int p = 0; p < 2; ++p) {
    // log softmax of run.c's logits, computed here in double.
    double m = -1e30, sum = 0;
    for (double x : expected[p]) m = std::max(m, x);
    for (double x : expected[p]) sum += std::exp(x - m);
    const double lp = expected[p][ids[p + 1]] - m - std::log(sum);
    EXPECT_NEAR(out["logprobs"][p].get<double>(), lp, 1e-4);
    nll -= lp;
  }
  EXPECT_NEAR(out["perplexity"].get<double>(), std::exp(nll / 2), 1e-3);
  fs::remove(ids_file);
  fs::remove(npy);
}

TEST(CommandErrors, MissingModelFilesFailWithAMessage) {
  CommandRun r = run_nibble("generate --model /nonexistent/model --prompt hi");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("/nonexistent/model"), std::string::npos) << r.err;
  const fs::path dir = scratch_path("partial_model");
  fs::create_directories(dir);
  fs::copy_file(kModel / "config.json", dir / "config.json");
  r = run_nibble("score --model " + dir.string() + " --text hi");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("safetensors"), std::string::npos) << r.err;
  fs::copy_file(kModel / "model.safetensors", dir / "model.safetensors");
  r = run_nibble("generate --model " + dir.string() + " --prompt hi");  // no tokenizer.json
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("tokenizer.json"), std::string::npos) << r.err;
  fs::remove_all(dir);
}

TEST(CommandErrors, PromptLongerThanTheContext) {
  std::string prompt;
  for (int i = 0; i < 600; ++i) prompt += "ball ";  // > 512 tokens
  CommandRun r = run_nibble("generate --model " + kModel.string() + " --prompt " + shell_quoted(prompt));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("longer than the model's context of 512"), std::string::npos) << r.err;
  r = run_nibble("score --model " + kModel.string() + " --text " + shell_quoted(prompt));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("context of 512"), std::string::npos) << r.err;
}

TEST(CommandErrors, EmptyInputs) {
  // generate: "" is the BOS token alone for this tokenizer (llama2.c's empty-prompt case).
  CommandRun r = run_nibble("generate --model " + kModel.string() + " --prompt '' --max-tokens 5");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "Once upon a time,\n");
  // score: an empty id list is an error.
  const fs::path ids_file = scratch_path("empty.json");
  std::ofstream(ids_file) << "[]";
  r = run_nibble("score --model " + kModel.string() + " --ids-json " + ids_file.string());
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("nothing to score"), std::string::npos) << r.err;
  fs::remove(ids_file);
  r = run_nibble("generate --model " + kModel.string() + " --prompt hi --kv-dtype nvfp4");  // head_dim 8
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("nvfp4"), std::string::npos) << r.err;
  r = run_nibble("generate --model " + kModel.string() + " --prompt hi --top-p 0");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("top-p"), std::string::npos) << r.err;
}

}  // namespace
