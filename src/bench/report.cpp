#include "bench/report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

namespace nibble::bench {

std::string_view verdict_name(Verdict v) {
  switch (v) {
    case Verdict::kCapacityLimited: return "capacity-limited";
    case Verdict::kComputeLimited: return "compute-limited";
    case Verdict::kServerLimited: return "server-limited";
    case Verdict::kClientLimited: return "client-limited";
    case Verdict::kRateLimited: return "rate-limited";
    case Verdict::kWorkloadLimited: return "workload-limited";
  }
  return "?";
}

namespace {

// A queue the verdict has found (see decide_verdict): capacity or compute, from the server's reasons
// where it gives them, else from its KV usage, else capacity as the only reading left.
VerdictResult queued_verdict(const VerdictInputs& in) {
  const int queued = in.queued_samples;
  const auto half = [&](int n) { return 2 * n >= queued; };
  const std::string preempted =
      in.preemptions > 0 ? fmt::format("; {:g} {} preempted for KV pages", in.preemptions,
                                       in.preemptions == 1 ? "request was" : "requests were")
                         : "";
  const std::string queue = fmt::format("the server queued up to {:g} requests while the client had requests in flight",
                                        in.max_waiting_while_busy);
  if (half(in.queued_with_reasons)) {
    const int memory = in.queued_for_pages + in.queued_for_running_cap;
    if (half(memory)) {
      const bool pages = half(in.queued_for_pages), cap = !pages && half(in.queued_for_running_cap);
      const char* held = pages ? "for lack of KV pages" : cap ? "at its cap on running requests"
                                                               : "for KV pages or at its running cap";
      return {Verdict::kCapacityLimited,
              fmt::format("{}, held {} in {} of {} such samples{}: this is the server's capacity at this load", queue,
                          held, pages ? in.queued_for_pages : cap ? in.queued_for_running_cap : memory, queued,
                          preempted)};
    }
    return {Verdict::kComputeLimited,
            fmt::format("{}, but held for KV pages or at its running cap in only {} of {} such samples{}: mostly they "
                        "waited for compute (the prefills ahead of them took each step's token budget), so at this "
                        "load the server's throughput is its compute more than its KV memory",
                        queue, memory, queued, preempted)};
  }
  if (half(in.queued_with_usage)) {
    if (half(in.queued_pool_full)) {
      return {Verdict::kCapacityLimited,
              fmt::format("{}, with its KV pool at least {:.0f}% held in {} of {} such samples{}: this is the "
                          "server's memory capacity at this load",
                          queue, 100 * kFullPoolUsage, in.queued_pool_full, queued, preempted)};
    }
    return {Verdict::kComputeLimited,
            fmt::format("{}, but its KV pool was at least {:.0f}% held in only {} of {} such samples (at most {:.0f}%){}: "
                        "they waited for compute, or for a cap on running requests (its metrics do not say which), "
                        "not for KV memory",
                        queue, 100 * kFullPoolUsage, in.queued_pool_full, queued, 100 * in.max_usage_queued, preempted)};
  }
  return {Verdict::kCapacityLimited,
          fmt::format("{}: its KV pool, running cap or compute was full (its metrics say neither why requests waited "
                      "nor how full its KV pool was), so this is the server's capacity at this load{}",
                      queue, preempted)};
}

}  // namespace

VerdictResult decide_verdict(const VerdictInputs& in) {
  if (in.metrics_found && in.max_waiting_while_busy > 0 && in.queued_samples >= kMinQueuedSamples &&
      in.queued_samples >= kMinQueuedFraction * in.busy_samples) {
    return queued_verdict(in);
  }
  if (in.metrics_found && in.unaccounted_samples >= kMinSamplesForServerLimited &&
      in.mean_unaccounted >= std::max(1.0, 0.25 * in.peak_in_flight)) {
    return {Verdict::kServerLimited,
            fmt::format("on average {:.1f} of the client's in-flight requests were neither running nor waiting in the "
                        "server: they waited outside its scheduler (HTTP threads, accept queue, or bytes held back by TCP, e.g. no TCP_NODELAY)",
                        in.mean_unaccounted)};
  }
  if (in.concurrency_cap > 0 && in.peak_in_flight >= in.concurrency_cap) {
    return {Verdict::kClientLimited,
            in.metrics_found
                ? fmt::format("achieved concurrency reached the cap of {} and the server never queued: this measured "
                              "the client's cap, not the server's capacity; raise --max-concurrency",
                              in.concurrency_cap)
                : fmt::format("achieved concurrency reached the cap of {}; the server exposes no running/waiting "
                              "counts on /metrics, so whether it could take more is unknown; raise --max-concurrency",
                              in.concurrency_cap)};
  }
  if (in.paced_arrivals) {
    return {Verdict::kRateLimited,
            fmt::format("in-flight requests peaked at {} below the cap ({}): the arrival rate / think time set the "
                        "load and the server kept up",
                        in.peak_in_flight, in.concurrency_cap > 0 ? std::to_string(in.concurrency_cap) : "none")};
  }
  return {Verdict::kWorkloadLimited,
          fmt::format("every request was in flight at once (peak {}) without reaching the cap ({}): the workload is "
                      "smaller than the cap",
                      in.peak_in_flight, in.concurrency_cap > 0 ? std::to_string(in.concurrency_cap) : "none")};
}

RunSummary summarize_run(const RunDescription& run, const LoadResult& load) {
  int64_t prompt_units = 0, reusable_units = 0;  // of the completed requests
  RunSummary s;
  s.run = run;
  s.not_sent = load.not_sent;
  s.request_slots = load.request_slots;
  std::vector<double> ttft, tpot, itl, e2e;
  std::vector<Interval> intervals;  // every sent request, failed or not: all occupied a slot
  double first_start = std::numeric_limits<double>::infinity(), last_end = 0;
  for (const RequestRecord& r : load.records) {
    intervals.push_back({r.start_s, r.end_s});
    first_start = std::min(first_start, r.start_s);
    last_end = std::max(last_end, r.end_s);
    if (!r.ok) {
      ++s.failed;
      if (s.first_errors.size() < 3) s.first_errors.push_back(r.error);
      continue;
    }
    ++s.completed;
    if (!r.usage_reported) ++s.without_usage;
    s.prompt_tokens += r.prompt_tokens;
    s.output_tokens += r.output_tokens;
    s.cached_tokens += r.cached_tokens;
    prompt_units += r.prompt_units;
    reusable_units += r.reusable_units;
    e2e.push_back((r.end_s - r.start_s) * 1e3);
    if (r.first_token_s >= 0) {
      ttft.push_back((r.first_token_s - r.start_s) * 1e3);
      if (r.output_tokens >= 2) tpot.push_back((r.end_s - r.first_token_s) * 1e3 / static_cast<double>(r.output_tokens - 1));
    }
    for (size_t i = 1; i < r.chunk_times_s.size(); ++i) itl.push_back((r.chunk_times_s[i] - r.chunk_times_s[i - 1]) * 1e3);
  }
  s.ttft_ms = summarize(ttft);
  s.tpot_ms = summarize(tpot);
  s.itl_ms = summarize(itl);
  s.e2e_ms = summarize(e2e);
  if (!intervals.empty() && last_end > first_start) {
    s.duration_s = last_end - first_start;
    s.achieved = concurrency_of(intervals, first_start, last_end);
    s.request_throughput = static_cast<double>(s.completed) / s.duration_s;
    s.input_tokens_per_s = static_cast<double>(s.prompt_tokens) / s.duration_s;
    s.output_tokens_per_s = static_cast<double>(s.output_tokens) / s.duration_s;
    s.output_tokens_per_s_per_gpu = s.output_tokens_per_s / std::max(1, run.num_gpus);
  }
  if (s.tpot_ms.count > 0 && s.tpot_ms.mean > 0) s.output_tokens_per_s_per_user = 1e3 / s.tpot_ms.mean;
  if (s.prompt_tokens > 0) s.prefix_cache_hit_rate = static_cast<double>(s.cached_tokens) / static_cast<double>(s.prompt_tokens);
  if (prompt_units > 0) s.prefix_cache_ceiling = static_cast<double>(reusable_units) / static_cast<double>(prompt_units);

  // The server's view, each sample set against the client's own in-flight count at that instant.
  s.metrics_found = load.metrics_found;
  s.metrics_samples = load.samples.size();
  VerdictInputs& v = s.verdict_inputs;
  v.metrics_found = load.metrics_found;
  double running_sum = 0, waiting_sum = 0, unaccounted_sum = 0, usage_sum = 0;
  size_t unaccounted_n = 0, usage_n = 0;
  std::optional<double> first_preemptions, last_preemptions;
  for (const MetricsSample& m : load.samples) {
    const int client = in_flight_at(intervals, m.t_s);
    const double running = m.running.value_or(0), waiting = m.waiting.value_or(0);
    s.server_running_max = std::max(s.server_running_max, running);
    s.server_waiting_max = std::max(s.server_waiting_max, waiting);
    running_sum += running;
    waiting_sum += waiting;
    if (m.kv_usage) {
      s.kv_usage_max = std::max(s.kv_usage_max, *m.kv_usage);
      usage_sum += *m.kv_usage;
      ++usage_n;
    }
    if (m.preemptions) {
      if (!first_preemptions) first_preemptions = m.preemptions;
      last_preemptions = m.preemptions;
    }
    if (client > 0) v.max_waiting_while_busy = std::max(v.max_waiting_while_busy, waiting);
    if (client > 0) ++v.busy_samples;
    if (client > 0 && waiting > 0) {
      ++v.queued_samples;
      if (m.waiting_for_pages && m.waiting_for_running_cap) {
        ++v.queued_with_reasons;
        if (*m.waiting_for_pages > 0) ++v.queued_for_pages;
        if (*m.waiting_for_running_cap > 0) ++v.queued_for_running_cap;
      }
      if (m.kv_usage) {
        ++v.queued_with_usage;
        if (*m.kv_usage >= kFullPoolUsage) ++v.queued_pool_full;
        v.max_usage_queued = std::max(v.max_usage_queued, *m.kv_usage);
      }
    }
    if (m.running && m.waiting) {
      unaccounted_sum += std::max(0.0, client - running - waiting);
      ++unaccounted_n;
    }
  }
  if (!load.samples.empty()) {
    s.server_running_mean = running_sum / static_cast<double>(load.samples.size());
    s.server_waiting_mean = waiting_sum / static_cast<double>(load.samples.size());
  }
  if (unaccounted_n) v.mean_unaccounted = unaccounted_sum / static_cast<double>(unaccounted_n);
  if (usage_n) s.kv_usage_mean = usage_sum / static_cast<double>(usage_n);
  if (first_preemptions) v.preemptions = *last_preemptions - *first_preemptions;
  v.unaccounted_samples = static_cast<int>(unaccounted_n);
  v.concurrency_cap = run.requested_concurrency > 0 ? std::min(run.requested_concurrency, load.request_slots)
                      : load.request_slots >= kMaxRequestThreads ? load.request_slots
                                                                 : 0;
  v.peak_in_flight = s.achieved.peak;
  v.paced_arrivals = std::isfinite(run.request_rate) || run.think_time_s > 0;
  s.verdict = decide_verdict(v);
  return s;
}

namespace {

nlohmann::json dist_json(const Distribution& d) {
  return {{"count", d.count}, {"mean", d.mean}, {"p50", d.p50}, {"p90", d.p90}, {"p99", d.p99}, {"min", d.min}, {"max", d.max}};
}

// JSON has no infinity: an unpaced rate is written as null.
nlohmann::json rate_json(double rate) { return std::isfinite(rate) ? nlohmann::json(rate) : nlohmann::json(nullptr); }

}  // namespace

nlohmann::json to_json(const RunSummary& s) {
  return {
      {"kind", "nibble-bench-run"},
      {"label", s.run.label},
      {"command", s.run.command},
      {"base_url", s.run.base_url},
      {"model", s.run.model},
      {"endpoint", s.run.endpoint},
      {"workload", s.run.workload},
      {"requested_concurrency", s.run.requested_concurrency},
      {"request_rate", rate_json(s.run.request_rate)},
      {"think_time_s", s.run.think_time_s},
      {"num_gpus", s.run.num_gpus},
      {"completed", s.completed},
      {"failed", s.failed},
      {"not_sent", s.not_sent},
      {"errors", s.first_errors},
      {"without_usage", s.without_usage},
      {"duration_s", s.duration_s},
      {"request_throughput", s.request_throughput},
      {"input_tokens_per_s", s.input_tokens_per_s},
      {"output_tokens_per_s", s.output_tokens_per_s},
      {"output_tokens_per_s_per_gpu", s.output_tokens_per_s_per_gpu},
      {"output_tokens_per_s_per_user", s.output_tokens_per_s_per_user},
      {"prompt_tokens", s.prompt_tokens},
      {"output_tokens", s.output_tokens},
      {"cached_tokens", s.cached_tokens},
      {"prefix_cache_hit_rate", s.prefix_cache_hit_rate},
      {"prefix_cache_ceiling", s.prefix_cache_ceiling},
      {"ttft_ms", dist_json(s.ttft_ms)},
      {"tpot_ms", dist_json(s.tpot_ms)},
      {"itl_ms", dist_json(s.itl_ms)},
      {"e2e_ms", dist_json(s.e2e_ms)},
      {"concurrency",
       {{"requested", s.run.requested_concurrency},
        {"request_slots", s.request_slots},
        {"achieved_peak", s.achieved.peak},
        {"achieved_time_average", s.achieved.time_average}}},
      {"server",
       {{"metrics_found", s.metrics_found},
        {"samples", s.metrics_samples},
        {"running_max", s.server_running_max},
        {"running_mean", s.server_running_mean},
        {"waiting_max", s.server_waiting_max},
        {"waiting_mean", s.server_waiting_mean},
        {"mean_unaccounted", s.verdict_inputs.mean_unaccounted},
        {"kv_usage_max", s.kv_usage_max >= 0 ? nlohmann::json(s.kv_usage_max) : nlohmann::json(nullptr)},
        {"kv_usage_mean", s.kv_usage_mean >= 0 ? nlohmann::json(s.kv_usage_mean) : nlohmann::json(nullptr)},
        {"preemptions", s.verdict_inputs.preemptions >= 0 ? nlohmann::json(s.verdict_inputs.preemptions)
                                                          : nlohmann::json(nullptr)},
        {"queued_samples", s.verdict_inputs.queued_samples},
        {"queued_for_pages", s.verdict_inputs.queued_for_pages},
        {"queued_for_running_cap", s.verdict_inputs.queued_for_running_cap},
        {"queued_with_reasons", s.verdict_inputs.queued_with_reasons}}},
      {"verdict", verdict_name(s.verdict.verdict)},
      {"verdict_reason", s.verdict.reason},
  };
}

std::string format_table(const RunSummary& s) {
  std::string out;
  auto line = [&](std::string_view name, const std::string& value) { out += fmt::format("{:<34}{}\n", name, value); };
  auto dist = [&](std::string_view name, const Distribution& d) {
    if (d.count == 0) return line(name, "n/a");
    line(name, fmt::format("mean {:9.2f}  p50 {:9.2f}  p90 {:9.2f}  p99 {:9.2f}", d.mean, d.p50, d.p90, d.p99));
  };
  out += fmt::format("==== nibble bench{} ====\n", s.run.label.empty() ? "" : ": " + s.run.label);
  line("server", fmt::format("{} ({}, {})", s.run.base_url, s.run.endpoint, s.run.model.empty() ? "model unset" : s.run.model));
  line("workload", s.run.workload);
  line("requests completed / failed", fmt::format("{} / {}{}", s.completed, s.failed,
                                                   s.not_sent ? fmt::format(" ({} not sent: --duration)", s.not_sent) : ""));
  line("duration (s)", fmt::format("{:.3f}", s.duration_s));
  line("request throughput (req/s)", fmt::format("{:.3f}", s.request_throughput));
  line("input tokens/s", fmt::format("{:.1f}", s.input_tokens_per_s));
  line("output tokens/s", fmt::format("{:.1f} ({:.1f} per GPU, {:.1f} per user)", s.output_tokens_per_s,
                                      s.output_tokens_per_s_per_gpu, s.output_tokens_per_s_per_user));
  line("tokens in / out / cached", fmt::format("{} / {} / {}", s.prompt_tokens, s.output_tokens, s.cached_tokens));
  line("prefix cache hit rate",
       s.prefix_cache_ceiling > 0
           ? fmt::format("{:.1f}% (ceiling {:.1f}%: the prompt tokens an earlier request had sent first)",
                         100 * s.prefix_cache_hit_rate, 100 * s.prefix_cache_ceiling)
           : fmt::format("{:.1f}%", 100 * s.prefix_cache_hit_rate));
  dist("TTFT (ms)", s.ttft_ms);
  dist("TPOT (ms)", s.tpot_ms);
  dist("ITL (ms)", s.itl_ms);
  dist("E2E latency (ms)", s.e2e_ms);
  line("concurrency requested", s.run.requested_concurrency > 0 ? std::to_string(s.run.requested_concurrency) : "no cap");
  line("concurrency achieved", fmt::format("peak {}, time-average {:.2f}", s.achieved.peak, s.achieved.time_average));
  if (s.metrics_found) {
    line("server running (max / mean)", fmt::format("{:g} / {:.2f}", s.server_running_max, s.server_running_mean));
    line("server waiting (max / mean)", fmt::format("{:g} / {:.2f}  ({} samples)", s.server_waiting_max,
                                                    s.server_waiting_mean, s.metrics_samples));
    const VerdictInputs& v = s.verdict_inputs;
    if (v.queued_with_reasons > 0) {
      line("server queue held by", fmt::format("KV pages {}, running cap {}, compute {} (of {} queued samples)",
                                               v.queued_for_pages, v.queued_for_running_cap,
                                               v.queued_with_reasons - v.queued_for_pages - v.queued_for_running_cap,
                                               v.queued_samples));
    }
    if (s.kv_usage_max >= 0) {
      line("server KV pool held (max / mean)", fmt::format("{:.1f}% / {:.1f}%", 100 * s.kv_usage_max, 100 * s.kv_usage_mean));
    }
    if (v.preemptions >= 0) line("server preemptions", fmt::format("{:g}", v.preemptions));
  } else {
    line("server running / waiting", "unknown (no /metrics with known names)");
  }
  if (s.without_usage) line("note", fmt::format("{} streams had no usage chunk; their tokens were counted as chunks", s.without_usage));
  for (const std::string& e : s.first_errors) line("error", e);
  line("verdict", fmt::format("{}: {}", verdict_name(s.verdict.verdict), s.verdict.reason));
  if (!s.run.command.empty()) line("command", s.run.command);
  return out;
}

}  // namespace nibble::bench
