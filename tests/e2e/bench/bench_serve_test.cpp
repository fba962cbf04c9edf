// `nibble bench` as a user runs it, against `nibble serve` started here on models/stories260k (CPU,
// 127.0.0.1, --port 0). Both processes are children of the test and are stopped by it.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>
#include <thread>

namespace {

namespace fs = std::filesystem;
const fs::path kNibble = fs::path(NIBBLE_BINARY_DIR) / "apps" / "nibble" / "nibble";
const fs::path kModel = fs::path(NIBBLE_SOURCE_DIR) / "models" / "stories260k";

fs::path scratch(const std::string& name) {
  return fs::temp_directory_path() / ("nibble_bench_e2e_" + std::to_string(::getpid()) + "_" + name);
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

// `nibble serve` in a child process; its stderr goes to a file, read for the "listening on" line.
class ServeProcess {
 public:
  explicit ServeProcess(const std::vector<std::string>& extra_args) : log_(scratch("serve_" + std::to_string(++count_) + ".log")) {
    std::vector<std::string> args = {kNibble.string(), "serve", "--model", kModel.string(), "--device", "cpu",
                                     "--host", "127.0.0.1", "--port", "0", "--threads", "1"};
    args.insert(args.end(), extra_args.begin(), extra_args.end());
    pid_ = ::fork();
    if (pid_ == 0) {
      const int fd = ::open(log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(fd, STDERR_FILENO);
      ::dup2(fd, STDOUT_FILENO);
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    const std::regex listening(R"(listening on (http://127\.0\.0\.1:[0-9]+))");
    for (int i = 0; i < 600 && base_url_.empty(); ++i) {  // up to 60 s
      std::smatch m;
      const std::string text = slurp(log_);
      if (std::regex_search(text, m, listening)) base_url_ = m[1];
      int status = 0;
      if (base_url_.empty() && ::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        break;
      }
      if (base_url_.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  ~ServeProcess() {
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      int status = 0;
      for (int i = 0; i < 100 && ::waitpid(pid_, &status, WNOHANG) == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
      if (::waitpid(pid_, &status, WNOHANG) == 0) {
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, &status, 0);
      }
    }
    fs::remove(log_);
  }
  const std::string& base_url() const { return base_url_; }
  std::string log() const { return slurp(log_); }

 private:
  static inline int count_ = 0;
  fs::path log_;
  pid_t pid_ = -1;
  std::string base_url_;
};

struct BenchRun {
  int exit_code;
  std::string out, err;
  nlohmann::json json;
};

BenchRun bench(const std::string& base_url, const std::string& args) {
  const fs::path out = scratch("out"), err = scratch("err"), json = scratch("run.json");
  const std::string cmd = kNibble.string() + " bench --base-url " + base_url + " --no-progress --json " + json.string() +
                          " " + args + " > " + out.string() + " 2> " + err.string();
  const int status = std::system(cmd.c_str());
  BenchRun r{WIFEXITED(status) ? WEXITSTATUS(status) : -1, slurp(out), slurp(err), nullptr};
  if (fs::exists(json)) r.json = nlohmann::json::parse(slurp(json));
  for (const fs::path& p : {out, err, json}) fs::remove(p);
  return r;
}

// Needs nibble serve to set TCP_NODELAY: without it, on a keep-alive connection each response's first
// bytes wait for the client's delayed ACK of the previous one (Nagle, ~40 ms), the requests spend that
// time outside the scheduler, and the bench rightly reports "server-limited".
TEST(BenchAgainstServe, CapBelowWhatTheServerRunsIsClientLimited) {
  ServeProcess serve({"--kv-pages", "64", "--max-running", "8"});
  ASSERT_FALSE(serve.base_url().empty()) << serve.log();
  // Long enough outputs that the requests spend their time in the scheduler, not in HTTP parsing.
  const BenchRun r = bench(serve.base_url(), "--workload random --input-len 8 --output-len 96 --num-requests 8 "
                                             "--max-concurrency 2 --metrics-interval 0.005 --seed 1");
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
}

TEST(BenchAgainstServe, SharedPrefixReportsCacheHitsAndSweepWritesSvg) {
  ServeProcess serve({"--kv-pages", "64", "--max-running", "8"});
  ASSERT_FALSE(serve.base_url().empty()) << serve.log();
  const fs::path svg = scratch("plot.svg");
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
  const std::string plot = slurp(svg);
  EXPECT_NE(plot.find("<svg"), std::string::npos);
  EXPECT_NE(plot.find("stories"), std::string::npos);
  fs::remove(svg);
}

TEST(BenchAgainstServe, BadFlagsFailWithAMessage) {
  const BenchRun r = bench("http://127.0.0.1:1", "--workload nope");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--workload"), std::string::npos) << r.err;
}

}  // namespace
