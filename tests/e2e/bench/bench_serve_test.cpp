// `nibble bench` as a user runs it, against `nibble serve` started here on models/stories260k (CPU,
// 127.0.0.1, --port 0). Both processes are children of the test and are stopped by it.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>
#include <vector>

#include "e2e/support/nibble_command.h"
#include "e2e/support/server_process.h"

namespace {

namespace fs = std::filesystem;
using nibble::test::CommandRun;
using nibble::test::run_nibble;
using nibble::test::scratch_path;
using nibble::test::slurp;
const fs::path kModel = fs::path(NIBBLE_SOURCE_DIR) / "models" / "stories260k";

// `nibble serve --model stories260k --device cpu` in a child process on a free port.
class ServeProcess : public nibble::test::ServerProcess {
 public:
  explicit ServeProcess(std::vector<std::string> extra_args) : ServerProcess(with_model(std::move(extra_args))) {}

 private:
  static std::vector<std::string> with_model(std::vector<std::string> args) {
    args.insert(args.begin(), {"--model", kModel.string(), "--device", "cpu"});
    return args;
  }
};

struct BenchRun {
  int exit_code;
  std::string out, err;
  nlohmann::json json;
};

BenchRun bench(const std::string& base_url, const std::string& args) {
  const fs::path json = scratch_path("run.json");
  const CommandRun run =
      run_nibble("bench --base-url " + base_url + " --no-progress --json " + json.string() + " " + args);
  BenchRun r{run.exit_code, run.out, run.err, nullptr};
  if (fs::exists(json)) r.json = nlohmann::json::parse(slurp(json));
  fs::remove(json);
  return r;
}

// Needs nibble serve to set TCP_NODELAY: without it, on a keep-alive connection each response's first
// bytes wait for the client's delayed ACK of the previous one (Nagle, ~40 ms), the requests spend that
// time outside the scheduler, and the bench rightly reports "server-limited".
TEST(BenchAgainstServe, CapBelowWhatTheServerRunsIsClientLimited) {
  ServeProcess serve({"--kv-pages", "64", "--max-running", "8"});
  ASSERT_FALSE(serve.base_url().empty()) << serve.log();
  // Long enough outputs that the requests spend their time in the scheduler, not in HTTP parsing.
  // Sampled every 20 ms: a request waits for the next engine step only briefly, but under ASan a step
  // is slow enough that 5 ms sampling caught that wait in 3+ samples (the capacity rule's minimum).
  const BenchRun r = bench(serve.base_url(), "--workload random --input-len 8 --output-len 96 --num-requests 8 "
                                             "--max-concurrency 2 --metrics-interval 0.02 --seed 1");
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  EXPECT_EQ(r.json["completed"], 8) << r.out;
  EXPECT_EQ(r.json["failed"], 0) << r.out;
  EXPECT_EQ(r.json["output_tokens"], 8 * 96);
  EXPECT_EQ(r.json["prompt_tokens"], 64);
  EXPECT_EQ(r.json["concurrency"]["achieved_peak"], 2);
  EXPECT_TRUE(r.json["server"]["metrics_found"]);
  // A request counts as waiting from its arrival until the next engine step admits it, so a sample
  // can catch one; a persistent queue (kMinQueuedSamples) would make the verdict capacity-limited.
  EXPECT_LE(r.json["server"]["waiting_max"].get<double>(), 1) << r.out;
  EXPECT_LE(r.json["server"]["running_max"].get<double>(), 2);
  EXPECT_EQ(r.json["verdict"], "client-limited") << r.out;
  EXPECT_NE(r.out.find("verdict"), std::string::npos);
}

TEST(BenchAgainstServe, TinyKvPoolIsCapacityLimited) {
  // 4 pages of 16 tokens; each request needs 24 + 8 = 32 tokens = 2 pages, so at most 2 run at once.
  ServeProcess serve({"--kv-pages", "4", "--max-running", "8"});
  ASSERT_FALSE(serve.base_url().empty()) << serve.log();
  // Enough requests that the run lasts many /metrics samples (a run of a few ms can miss the queue).
  const BenchRun r = bench(serve.base_url(), "--workload random --input-len 24 --output-len 8 --num-requests 48 "
                                             "--max-concurrency 8 --metrics-interval 0.005 --seed 2");
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  EXPECT_EQ(r.json["completed"], 48) << r.out;
  EXPECT_GT(r.json["server"]["waiting_max"].get<double>(), 0) << r.out;
  EXPECT_LE(r.json["server"]["running_max"].get<double>(), 2) << r.out;
  EXPECT_EQ(r.json["verdict"], "capacity-limited") << r.out;
  // The server said why: its queue waited for KV pages.
  EXPECT_GT(r.json["server"]["queued_for_pages"].get<int>(), 0) << r.out;
  EXPECT_NE(r.out.find("for lack of KV pages"), std::string::npos) << r.out;
}

TEST(BenchAgainstServe, QueueBehindPrefillWithRoomInThePoolIsComputeLimited) {
  // 16 tokens per engine step and prompts of 200: each prompt takes ~13 steps, so the requests queue
  // behind the prefills ahead of them, while the 512-page pool (8192 tokens) holds all 16 at once.
  ServeProcess serve({"--kv-pages", "512", "--max-running", "64", "--max-batch-tokens", "16"});
  ASSERT_FALSE(serve.base_url().empty()) << serve.log();
  const BenchRun r = bench(serve.base_url(), "--workload random --input-len 200 --output-len 8 --num-requests 16 "
                                             "--max-concurrency 16 --metrics-interval 0.005 --seed 4");
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  EXPECT_EQ(r.json["completed"], 16) << r.out;
  EXPECT_GT(r.json["server"]["waiting_max"].get<double>(), 4) << r.out;
  EXPECT_EQ(r.json["server"]["queued_for_pages"], 0) << r.out;
  EXPECT_EQ(r.json["server"]["queued_for_running_cap"], 0) << r.out;
  EXPECT_EQ(r.json["server"]["preemptions"], 0.0) << r.out;
  EXPECT_LT(r.json["server"]["kv_usage_max"].get<double>(), 0.5) << r.out;
  EXPECT_EQ(r.json["verdict"], "compute-limited") << r.out;
  EXPECT_NE(r.out.find("server queue held by"), std::string::npos) << r.out;
}

TEST(BenchAgainstServe, SharedPrefixReportsCacheHitsAndSweepWritesSvg) {
  ServeProcess serve({"--kv-pages", "64", "--max-running", "8"});
  ASSERT_FALSE(serve.base_url().empty()) << serve.log();
  const fs::path svg = scratch_path("plot.svg");
  const BenchRun r = bench(serve.base_url(), "--workload shared-prefix --prefix-len 48 --num-groups 1 --input-len 4 "
                                             "--output-len 4 --num-requests 6 --sweep 1,2 --svg " + svg.string() +
                                             " --label stories --seed 3");
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  ASSERT_EQ(r.json["kind"], "nibble-bench-sweep");
  ASSERT_EQ(r.json["runs"].size(), 2u);
  // One request at a time: after the first, each request can reuse the 48-token prefix (whole pages
  // of it at least: 3 pages of 16).
  EXPECT_GE(r.json["runs"][0]["cached_tokens"].get<int64_t>(), 5 * 32) << r.out;
  EXPECT_GT(r.json["runs"][0]["prefix_cache_hit_rate"].get<double>(), 0.3);
  // The workload's ceiling: the 48-token prefix of requests 2..6 out of 6 prompts of 52.
  EXPECT_DOUBLE_EQ(r.json["runs"][0]["prefix_cache_ceiling"].get<double>(), 5.0 * 48 / (6 * 52)) << r.out;
  EXPECT_LE(r.json["runs"][0]["prefix_cache_hit_rate"].get<double>(),
            r.json["runs"][0]["prefix_cache_ceiling"].get<double>());
  const std::string plot = slurp(svg);
  EXPECT_NE(plot.find("<svg"), std::string::npos);
  EXPECT_NE(plot.find("stories"), std::string::npos);
  fs::remove(svg);
}

// Each point of a sweep draws its own prompts: the second point finds none of the first's in the
// server's prefix cache (40-token prompts: 2 whole 16-token pages each would be hits otherwise).
TEST(BenchAgainstServe, SweepPointsDoNotReuseEachOthersPrompts) {
  ServeProcess serve({"--kv-pages", "64", "--max-running", "8"});
  ASSERT_FALSE(serve.base_url().empty()) << serve.log();
  const BenchRun r = bench(serve.base_url(), "--workload random --input-len 40 --output-len 2 --num-requests 4 "
                                             "--sweep 1,2 --seed 5");
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  ASSERT_EQ(r.json["runs"].size(), 2u);
  EXPECT_EQ(r.json["runs"][0]["cached_tokens"], 0) << r.out;
  EXPECT_EQ(r.json["runs"][1]["cached_tokens"], 0) << r.out;
  EXPECT_EQ(r.json["runs"][1]["completed"], 4) << r.out;
}

TEST(BenchAgainstServe, BadFlagsFailWithAMessage) {
  const BenchRun r = bench("http://127.0.0.1:1", "--workload nope");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--workload"), std::string::npos) << r.err;
}

}  // namespace
