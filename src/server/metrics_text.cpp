#include "server/metrics_text.h"

#include <fmt/format.h>

namespace nibble::server {

namespace {

// Label values escape backslash, double quote and newline.
std::string escape_label(const std::string& value) {
  std::string out;
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

void scalar(std::string& out, const char* name, const char* type, const char* help, const std::string& labels,
            double value) {
  out += fmt::format("# HELP {} {}\n# TYPE {} {}\n{}{{{}}} {}\n", name, help, name, type, name, labels, value);
}

void histogram(std::string& out, const char* name, const char* help, const std::string& labels,
               const engine::Histogram& h) {
  out += fmt::format("# HELP {} {}\n# TYPE {} histogram\n", name, help, name);
  int64_t cumulative = 0;
  for (size_t i = 0; i < h.upper_bounds().size(); ++i) {
    cumulative += h.counts()[i];
    out += fmt::format("{}_bucket{{{},le=\"{}\"}} {}\n", name, labels, h.upper_bounds()[i], cumulative);
  }
  cumulative += h.counts().back();
  out += fmt::format("{}_bucket{{{},le=\"+Inf\"}} {}\n", name, labels, cumulative);
  out += fmt::format("{}_sum{{{}}} {}\n{}_count{{{}}} {}\n", name, labels, h.sum(), name, labels, h.count());
}

}  // namespace

std::string metrics_text(const engine::EngineMetrics& m, const std::string& model_name) {
  const std::string labels = fmt::format("model=\"{}\"", escape_label(model_name));
  std::string out;
  const auto gauge = [&](const char* name, const char* help, int64_t v) {
    scalar(out, name, "gauge", help, labels, static_cast<double>(v));
  };
  const auto counter = [&](const char* name, const char* help, int64_t v) {
    scalar(out, name, "counter", help, labels, static_cast<double>(v));
  };
  gauge("nibble_kv_pages_total", "KV cache pages in the pool.", m.kv_pages_total);
  gauge("nibble_kv_pages_used", "KV cache pages held by running requests (prefix cache excluded).",
        m.kv_pages_requests);
  gauge("nibble_kv_pages_cached", "KV cache pages held by the prefix cache.", m.kv_pages_cached);
  gauge("nibble_kv_pages_evictable", "Prefix-cache pages no running request uses: freed on demand.",
        m.kv_pages_evictable);
  gauge("nibble_kv_pages_free", "KV cache pages free.", m.kv_pages_free);
  gauge("nibble_kv_page_size_tokens", "Tokens per KV cache page.", m.page_size);
  gauge("nibble_requests_running", "Requests admitted to the running batch.", m.running_requests);
  gauge("nibble_requests_waiting", "Requests queued, not yet admitted.", m.waiting_requests);
  gauge("nibble_requests_waiting_for_pages",
        "Queued requests the last step could not admit for lack of KV pages (0 when it stopped for another reason).",
        m.waiting_for_pages);
  gauge("nibble_requests_waiting_for_running_cap",
        "Queued requests the last step could not admit because --max-running requests were running.",
        m.waiting_for_running_cap);
  counter("nibble_requests_finished_total", "Requests finished by a stop condition or max_tokens.",
          m.requests_finished);
  counter("nibble_requests_cancelled_total", "Requests cancelled (client gone or shutdown).", m.requests_cancelled);
  counter("nibble_requests_failed_total", "Requests ended by an engine error.", m.requests_failed);
  counter("nibble_prefix_cache_hit_tokens_total", "Prompt tokens served from the prefix cache.",
          m.prefix_cache_hit_tokens);
  counter("nibble_prompt_tokens_total", "Prompt tokens of accepted requests.", m.prompt_tokens);
  counter("nibble_generation_tokens_total", "Tokens generated.", m.generated_tokens);
  counter("nibble_preemptions_total", "Requests preempted for lack of KV pages.", m.preemptions);
  counter("nibble_engine_steps_total", "Engine steps run.", m.steps);
  counter("nibble_engine_overlapped_steps_total",
          "Engine steps launched while the previous step's tokens were still being drawn.", m.overlapped_steps);
  histogram(out, "nibble_time_to_first_token_seconds", "Time from submission to the first generated token.", labels,
            m.time_to_first_token);
  histogram(out, "nibble_inter_token_latency_seconds", "Time between consecutive generated tokens of a request.",
            labels, m.inter_token_latency);
  return out;
}

}  // namespace nibble::server
