// run_eval on models/stories260k (head_dim 8): f32/bf16/fp8 run, nvfp4 configurations are skipped
// with the reason; both tasks produce summaries and the report files parse.
#include <gtest/gtest.h>

#include <unistd.h>

#include <fstream>

#include "common/error.h"
#include "eval/eval_run.h"

namespace nibble::eval {
namespace {

const std::string kModel = std::string(NIBBLE_SOURCE_DIR) + "/models/stories260k";
const std::string kCorpus = std::string(NIBBLE_SOURCE_DIR) + "/tests/e2e/eval/corpus.txt";

EvalOptions small_run() {
  return {.model_dir = kModel, .configs = "f32,bf16,fp8,nvfp4,nvfp4+hadamard", .reference = "f32",
          .corpus = kCorpus, .context = 64, .documents = 3, .passkey_lengths = {200, 1000},
          .passkey_depths = {0.0, 1.0}, .samples = 2, .max_new_tokens = 6, .chunk = 16, .seed = 5,
          .bootstrap_resamples = 200, .threads = 2};
}

TEST(EvalRun, Stories260kSkipsNvfp4AndReportsBothTasks) {
  const EvalReport r = run_eval(small_run());
  EXPECT_EQ(r.configs, (std::vector<std::string>{"f32", "bf16", "fp8"}));
  ASSERT_EQ(r.skipped.size(), 2u);
  EXPECT_EQ(r.skipped[0].name, "nvfp4");
  EXPECT_NE(r.skipped[0].reason.find("16"), std::string::npos) << r.skipped[0].reason;
  EXPECT_EQ(r.skipped[1].name, "nvfp4+hadamard");
  // Length 1000 exceeds the model's 512-token context: noted, not run.
  ASSERT_FALSE(r.notes.empty());
  EXPECT_NE(r.notes[0].find("1000"), std::string::npos);

  ASSERT_TRUE(r.perplexity.has_value());
  EXPECT_EQ(r.perplexity->documents, 3);
  EXPECT_EQ(r.perplexity->positions, 63);
  const auto& f32 = r.perplexity->configs[0];
  EXPECT_EQ(f32.mean_kl, 0.0);
  EXPECT_EQ(f32.top1_agreement, 1.0);
  EXPECT_GT(r.perplexity->configs[2].mean_kl, 0.0);  // fp8
  // A real (if tiny) language model on English stories: far better than uniform over 512 tokens.
  EXPECT_LT(r.perplexity->reference_perplexity, 100.0);
  EXPECT_GT(r.perplexity->reference_perplexity, 1.0);

  ASSERT_TRUE(r.passkey.has_value());
  ASSERT_EQ(r.passkey_items.size(), 1u * 2u * 2u);  // one length x two depths x two samples
  ASSERT_EQ(r.passkey->configs.size(), 4u);         // the reference, then f32 bf16 fp8
  // The reference run against itself on the same items: no discordant item.
  ASSERT_TRUE(r.passkey->configs[1].vs_reference.has_value());
  EXPECT_EQ(r.passkey->configs[1].vs_reference->discordant(), 0);
  EXPECT_EQ(r.passkey->configs[1].mcnemar_p, 1.0);
  for (const auto& outcomes : r.passkey_outcomes) ASSERT_EQ(outcomes.size(), r.passkey_items.size());
  EXPECT_EQ(r.passkey_outcomes[0][0].output, r.passkey_outcomes[1][0].output);

  const auto out = std::filesystem::temp_directory_path() / ("nibble_eval_run_" + std::to_string(::getpid()));
  const auto files = write_report_files(out, r);
  EXPECT_EQ(files.size(), 2u + 3u + 1u + 2u);  // json, md, 3 npy, kl plot, passkey jsonl + plot
  std::ifstream json_in(out / "report.json");
  const nlohmann::json j = nlohmann::json::parse(json_in);
  EXPECT_EQ(j["skipped"][0]["name"], "nvfp4");
  EXPECT_EQ(j["passkey"]["configs"].size(), 4u);
  std::ifstream lines(out / "passkey_items.jsonl");
  int count = 0;
  for (std::string line; std::getline(lines, line); ++count) {
    const nlohmann::json item = nlohmann::json::parse(line);
    EXPECT_EQ(item["key"].get<std::string>().size(), 5u);
  }
  EXPECT_EQ(count, 4 * 4);  // 4 configurations x 4 items
  std::ifstream md_in(out / "report.md");
  const std::string md{std::istreambuf_iterator<char>(md_in), {}};
  EXPECT_NE(md.find("| fp8 |"), std::string::npos);
  EXPECT_NE(md.find("nvfp4**: "), std::string::npos);
  std::filesystem::remove_all(out);
}

TEST(EvalRun, RejectsBadOptions) {
  EvalOptions o = small_run();
  o.tasks = {"perplexity", "mmlu"};
  EXPECT_THROW(run_eval(o), Error);
  o = small_run();
  o.corpus.clear();
  EXPECT_THROW(run_eval(o), Error);
  o = small_run();
  o.reference = "nvfp4";  // cannot run on head_dim 8
  EXPECT_THROW(run_eval(o), Error);
  o = small_run();
  o.context = 4096;
  o.tasks = {"perplexity"};
  EXPECT_THROW(run_eval(o), Error);
}

}  // namespace
}  // namespace nibble::eval
