// nibble bench: a serving benchmark against any OpenAI-compatible server (nibble serve, vLLM, SGLang)
// that reports what limited the run: the server's capacity, its HTTP front, the client's own
// concurrency cap, or the arrival rate. The library is src/bench/; this file reads flags, runs one
// load or a concurrency sweep, and writes the table, JSON and the Pareto SVG.
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "bench/load_runner.h"
#include "bench/pareto_svg.h"
#include "bench/report.h"
#include "bench/workload.h"
#include "common/error.h"

namespace {

using namespace nibble::bench;

struct BenchOptions {
  std::string base_url;
  std::string model;
  std::string endpoint = "completions";
  std::string prompt_format;  // "" -> ids for completions, words for chat
  std::string workload = "random";
  std::string input_len, input_len_range, output_len, output_len_range;
  int64_t prefix_len = 0, num_groups = 1, turns = 1;
  double think_time_s = 0;
  int max_concurrency = 0;
  double request_rate = std::numeric_limits<double>::infinity();
  int64_t num_requests = 100;
  int64_t warmup = 0;
  double duration_s = 0;
  uint64_t seed = 0;
  std::string token_ids = "3:499";
  bool no_ignore_eos = false;
  double metrics_interval_s = 0.1;
  double request_timeout_s = 600;
  int num_gpus = 1;
  std::string json_path, svg_path, label;
  std::vector<int> sweep;
  std::vector<std::string> svg_add;
  bool no_progress = false;
  std::string command;  // the command line, rebuilt from the parsed flags
};

LengthRange length_flag(const std::string& fixed, const std::string& range, const char* name, LengthRange fallback) {
  NIBBLE_CHECK(fixed.empty() || range.empty(), "give --{0} or --{0}-range, not both", name);
  if (!fixed.empty()) {
    NIBBLE_CHECK(fixed.find(':') == std::string::npos, "--{0} takes one number; use --{0}-range A:B", name);
    return parse_length_range(fixed, std::string("--") + name);
  }
  if (!range.empty()) return parse_length_range(range, std::string("--") + name + "-range");
  return fallback;
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  NIBBLE_CHECK(out.good(), "cannot open {} for writing", path);
  out << text;
  NIBBLE_CHECK(out.good(), "writing {} failed", path);
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  NIBBLE_CHECK(in.good(), "cannot open {}", path);
  std::stringstream text;
  text << in.rdbuf();
  try {
    return nlohmann::json::parse(text.str());
  } catch (const nlohmann::json::exception& e) {
    NIBBLE_FAIL("{} is not JSON: {}", path, e.what());
  }
}

// A progress bar on stderr when it is a terminal; nothing otherwise (logs stay clean).
std::function<void(size_t, size_t)> progress_bar(bool enabled, const std::string& what) {
  if (!enabled || !::isatty(STDERR_FILENO)) return nullptr;
  return [what](size_t done, size_t total) {
    constexpr size_t kBarWidth = 40;
    const size_t filled = total ? done * kBarWidth / total : kBarWidth;
    fmt::print(stderr, "\r{} [{}{}] {}/{}{}", what, std::string(filled, '#'), std::string(kBarWidth - filled, '.'), done,
               total, done == total ? "\n" : "");
    std::fflush(stderr);
  };
}

void run_bench(const BenchOptions& o) {
  WorkloadSpec spec{
      .kind = parse_workload_kind(o.workload),
      .input_len = length_flag(o.input_len, o.input_len_range, "input-len", {128, 128}),
      .output_len = length_flag(o.output_len, o.output_len_range, "output-len", {128, 128}),
      .prefix_len = o.prefix_len,
      .num_groups = o.num_groups,
      .turns = o.turns,
      .num_requests = o.num_requests,
      .seed = o.seed,
      .token_ids = parse_length_range(o.token_ids, "--token-ids"),
  };
  NIBBLE_CHECK(o.endpoint == "completions" || o.endpoint == "chat", "--endpoint must be completions or chat, got '{}'",
               o.endpoint);
  const std::string format = o.prompt_format.empty() ? (o.endpoint == "chat" ? "words" : "ids") : o.prompt_format;
  NIBBLE_CHECK(format == "ids" || format == "words", "--prompt-format must be ids or words, got '{}'", format);
  NIBBLE_CHECK(o.num_gpus >= 1, "--num-gpus must be >= 1, got {}", o.num_gpus);
  NIBBLE_CHECK(o.warmup >= 0, "--warmup must be >= 0, got {}", o.warmup);
  for (int c : o.sweep) NIBBLE_CHECK(c >= 1, "--sweep concurrencies must be >= 1, got {}", c);
  NIBBLE_CHECK(o.sweep.empty() || o.max_concurrency == 0, "give --sweep or --max-concurrency, not both");
  const std::vector<Session> sessions = generate_workload(spec);

  LoadConfig load{
      .base_url = o.base_url,
      .model = o.model,
      .endpoint = o.endpoint == "chat" ? Endpoint::kChat : Endpoint::kCompletions,
      .prompt_format = format == "ids" ? PromptFormat::kTokenIds : PromptFormat::kWords,
      .max_concurrency = o.max_concurrency,
      .request_rate = o.request_rate,
      .think_time_s = o.think_time_s,
      .duration_s = o.duration_s,
      .ignore_eos = !o.no_ignore_eos,
      .metrics_interval_s = o.metrics_interval_s,
      .request_timeout_s = o.request_timeout_s,
      .seed = o.seed,
      .on_progress = nullptr,
  };
  if (load.model.empty()) {
    if (auto served = first_served_model(o.base_url)) {
      load.model = *served;
    } else {
      fmt::print(stderr, "nibble bench: no --model and {}/v1/models did not name one; requests carry no \"model\"\n",
                 o.base_url);
    }
  }
  if (o.warmup > 0) {
    WorkloadSpec warm = spec;
    warm.seed = spec.seed ^ kWarmupSeedMix;  // other prompts, so warm-up does not pre-fill the prefix cache
    warm.num_requests = o.warmup;
    LoadConfig warm_load = load;
    warm_load.metrics_interval_s = 0;
    warm_load.duration_s = 0;
    warm_load.on_progress = progress_bar(!o.no_progress, "warm-up");
    const LoadResult w = run_load(warm_load, generate_workload(warm));
    size_t failed = 0;
    for (const RequestRecord& r : w.records) failed += !r.ok;
    NIBBLE_CHECK(failed == 0, "{} of {} warm-up requests failed; first: {}", failed, w.records.size(),
                 [&] { for (const auto& r : w.records) if (!r.ok) return r.error; return std::string(); }());
  }

  const std::vector<int> concurrencies = o.sweep.empty() ? std::vector<int>{o.max_concurrency} : o.sweep;
  std::vector<RunSummary> summaries;
  for (size_t point = 0; point < concurrencies.size(); ++point) {
    const int c = concurrencies[point];
    LoadConfig run_load_config = load;
    run_load_config.max_concurrency = c;
    run_load_config.on_progress = progress_bar(!o.no_progress, c > 0 ? fmt::format("c={}", c) : "run");
    WorkloadSpec point_spec = spec;
    point_spec.seed = sweep_point_seed(spec.seed, point);
    const LoadResult result = run_load(run_load_config, point == 0 ? sessions : generate_workload(point_spec));
    RunDescription description{
        .label = o.label,
        .base_url = o.base_url,
        .model = load.model,
        .endpoint = o.endpoint,
        .workload = fmt::format("{}, {} requests in {} sessions, input {}:{}, output {}:{}{}", o.workload,
                                o.num_requests, sessions.size(), spec.input_len.min, spec.input_len.max,
                                spec.output_len.min, spec.output_len.max,
                                spec.kind == WorkloadKind::kSharedPrefix
                                    ? fmt::format(", prefix {} x {} groups", spec.prefix_len, spec.num_groups)
                                    : ""),
        .requested_concurrency = c,
        .request_rate = o.request_rate,
        .think_time_s = o.think_time_s,
        .num_gpus = o.num_gpus,
        .command = o.command,
    };
    summaries.push_back(summarize_run(description, result));
    fmt::print("{}\n", format_table(summaries.back()));
    std::fflush(stdout);
  }

  nlohmann::json out;
  if (o.sweep.empty()) {
    out = to_json(summaries.front());
  } else {
    out = {{"kind", "nibble-bench-sweep"}, {"label", o.label}, {"num_gpus", o.num_gpus}, {"command", o.command},
           {"runs", nlohmann::json::array()}};
    for (const RunSummary& s : summaries) out["runs"].push_back(to_json(s));
  }
  if (!o.json_path.empty()) write_file(o.json_path, out.dump(2) + "\n");
  if (!o.svg_path.empty()) {
    std::vector<Curve> curves = {curve_from_json(out)};
    if (curves.front().label.empty()) curves.front().label = o.base_url;
    for (const std::string& path : o.svg_add) {
      curves.push_back(curve_from_json(read_json(path)));
      if (curves.back().label.empty()) curves.back().label = path;
    }
    write_file(o.svg_path, pareto_svg(curves, "output tokens/s per GPU vs per user"));
  }
}

std::string rebuild_command(CLI::App* cmd) {
  std::string line = "nibble bench";
  for (const CLI::Option* opt : cmd->get_options()) {
    if (opt->count() == 0 || opt->get_name() == "--help") continue;
    line += " " + opt->get_name();
    if (opt->get_name() == "--no-progress" || opt->get_name() == "--no-ignore-eos") continue;  // flags take no value
    for (const std::string& r : opt->results()) line += " " + r;
  }
  return line;
}

}  // namespace

void add_bench_command(CLI::App& app) {
  auto o = std::make_shared<BenchOptions>();
  CLI::App* cmd = app.add_subcommand("bench", "Benchmark an OpenAI-compatible server and say what limited the run");
  cmd->add_option("--base-url", o->base_url, "Server, e.g. http://127.0.0.1:8000 (no path)")->required();
  cmd->add_option("--model", o->model, "Model name sent with each request (default: the first of /v1/models)");
  cmd->add_option("--endpoint", o->endpoint, "completions (/v1/completions) or chat (/v1/chat/completions)");
  cmd->add_option("--prompt-format", o->prompt_format,
                  "ids: prompt as a list of token ids (completions only; the default there); words: text, one word "
                  "per unit (the default for chat)");
  cmd->add_option("--workload", o->workload, "random | shared-prefix | agent");
  cmd->add_option("--input-len", o->input_len, "Prompt length in tokens (shared-prefix: after the prefix; agent: "
                                               "new input per turn); default 128");
  cmd->add_option("--input-len-range", o->input_len_range, "A:B: each length uniform on the integers A..B, seeded");
  cmd->add_option("--output-len", o->output_len, "max_tokens per request (default 128; ignore_eos is sent)");
  cmd->add_option("--output-len-range", o->output_len_range, "A:B: each uniform on the integers A..B, seeded");
  cmd->add_option("--prefix-len", o->prefix_len, "shared-prefix: length of each group's common prefix");
  cmd->add_option("--num-groups", o->num_groups, "shared-prefix: distinct prefixes (request i uses group i mod G)");
  cmd->add_option("--turns", o->turns, "agent: turns per session");
  cmd->add_option("--think-time", o->think_time_s, "agent: seconds between a turn's end and the next turn");
  cmd->add_option("--max-concurrency", o->max_concurrency, "Requests in flight at most (0: no cap)");
  cmd->add_option("--request-rate", o->request_rate, "Session arrivals per second, Poisson (default inf: all at once)");
  cmd->add_option("--num-requests", o->num_requests, "Requests (agent: turns over all sessions); default 100");
  cmd->add_option("--warmup", o->warmup, "Requests sent (with other prompts) before measuring; not reported");
  cmd->add_option("--duration", o->duration_s, "Stop sending after this many seconds (in-flight requests finish)");
  cmd->add_option("--seed", o->seed, "Seed of prompts, lengths and arrivals");
  cmd->add_option("--token-ids", o->token_ids, "A:B range of random token ids (default 3:499, valid in any vocab >= 500)");
  cmd->add_flag("--no-ignore-eos", o->no_ignore_eos, "Do not send ignore_eos (outputs may end early)");
  cmd->add_option("--metrics-interval", o->metrics_interval_s, "Seconds between GET /metrics samples (0: off)");
  cmd->add_option("--request-timeout", o->request_timeout_s, "Seconds a request may stay silent before it fails");
  cmd->add_option("--num-gpus", o->num_gpus, "GPUs behind the server (divides tokens/s per GPU)");
  cmd->add_option("--json", o->json_path, "Write the run (or sweep) as JSON");
  cmd->add_option("--sweep", o->sweep,
                  "Concurrencies to run one after another, e.g. 1,2,4,8; each draws its own prompts (seeded from "
                  "--seed), so none finds an earlier one's in the prefix cache")
      ->delimiter(',');
  cmd->add_option("--svg", o->svg_path, "Write the Pareto plot (output tok/s per GPU vs per user)");
  cmd->add_option("--svg-add", o->svg_add, "Overlay another run's or sweep's JSON on the SVG (repeatable)");
  cmd->add_option("--label", o->label, "Name of this run/series in JSON and the SVG legend");
  cmd->add_flag("--no-progress", o->no_progress, "No progress bar even on a terminal");
  cmd->callback([o, cmd] {
    o->command = rebuild_command(cmd);
    run_bench(*o);
  });
}
