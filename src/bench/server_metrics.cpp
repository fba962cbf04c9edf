#include "bench/server_metrics.h"

#include <array>
#include <charconv>
#include <cmath>
#include <map>
#include <string>

namespace nibble::bench {
namespace {

constexpr std::array<std::string_view, 4> kRunningNames = {"nibble_requests_running", "nibble:num_requests_running",
                                                           "vllm:num_requests_running", "sglang:num_running_reqs"};
constexpr std::array<std::string_view, 4> kWaitingNames = {"nibble_requests_waiting", "nibble:num_requests_waiting",
                                                           "vllm:num_requests_waiting", "sglang:num_queue_reqs"};
constexpr std::array<std::string_view, 3> kUsageNames = {"vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc",
                                                         "sglang:token_usage"};
constexpr std::array<std::string_view, 2> kPreemptionNames = {"nibble_preemptions_total", "vllm:num_preemptions_total"};
constexpr std::array<std::string_view, 1> kWaitingForPagesNames = {"nibble_requests_waiting_for_pages"};
constexpr std::array<std::string_view, 1> kWaitingForCapNames = {"nibble_requests_waiting_for_running_cap"};

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

template <size_t N>
std::optional<double> first_found(const std::map<std::string, double, std::less<>>& sums,
                                  const std::array<std::string_view, N>& names) {
  for (std::string_view name : names) {
    // A sum of finite values may still overflow (a hostile or broken server): not a count.
    if (auto it = sums.find(name); it != sums.end()) return std::isfinite(it->second) ? std::optional(it->second) : std::nullopt;
  }
  return std::nullopt;
}

}  // namespace

ServerLoad parse_server_load(std::string_view text) {
  std::map<std::string, double, std::less<>> sums;  // metric name -> sum over its label sets
  while (!text.empty()) {
    const size_t eol = text.find('\n');
    std::string_view line = trim(text.substr(0, eol));
    text = eol == std::string_view::npos ? std::string_view{} : text.substr(eol + 1);
    if (line.empty() || line.front() == '#') continue;
    size_t name_end = line.find_first_of("{ \t");
    if (name_end == std::string_view::npos) continue;
    const std::string_view name = line.substr(0, name_end);
    std::string_view rest = line.substr(name_end);
    if (rest.front() == '{') {
      // Label values are quoted and may contain '}' or escaped quotes: skip to the closing brace outside quotes.
      bool in_quotes = false;
      size_t i = 1;
      for (; i < rest.size(); ++i) {
        if (in_quotes && rest[i] == '\\') ++i;
        else if (rest[i] == '"') in_quotes = !in_quotes;
        else if (!in_quotes && rest[i] == '}') break;
      }
      if (i >= rest.size()) continue;
      rest = rest.substr(i + 1);
    }
    rest = trim(rest);
    const std::string_view number = rest.substr(0, rest.find_first_of(" \t"));
    double value = 0;
    const auto [ptr, ec] = std::from_chars(number.data(), number.data() + number.size(), value);
    if (ec != std::errc() || ptr != number.data() + number.size() || !std::isfinite(value)) continue;
    sums[std::string(name)] += value;
  }
  ServerLoad load{.running = first_found(sums, kRunningNames),
                  .waiting = first_found(sums, kWaitingNames),
                  .waiting_for_pages = first_found(sums, kWaitingForPagesNames),
                  .waiting_for_running_cap = first_found(sums, kWaitingForCapNames),
                  .kv_usage = std::nullopt,  // below
                  .preemptions = first_found(sums, kPreemptionNames)};
  const auto free = sums.find("nibble_kv_pages_free"), evictable = sums.find("nibble_kv_pages_evictable"),
             total = sums.find("nibble_kv_pages_total");
  if (free != sums.end() && evictable != sums.end() && total != sums.end() && total->second > 0) {
    load.kv_usage = 1 - (free->second + evictable->second) / total->second;
  } else {
    load.kv_usage = first_found(sums, kUsageNames);
  }
  // A usage outside [0, 1] is a server's bug or another meaning of the name: not a usage.
  if (load.kv_usage && !(*load.kv_usage >= 0 && *load.kv_usage <= 1)) load.kv_usage.reset();
  return load;
}

}  // namespace nibble::bench
