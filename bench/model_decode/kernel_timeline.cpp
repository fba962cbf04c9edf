#include "kernel_timeline.h"

#include <cupti.h>
#include <cuda_runtime.h>
#include <cxxabi.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>

#include "common/error.h"

namespace nibble::bench {

namespace {

void check_cupti(CUptiResult r, const char* what) {
  if (r != CUPTI_SUCCESS) {
    const char* text = nullptr;
    cuptiGetResultString(r, &text);
    NIBBLE_FAIL("CUPTI {} failed: {}", what, text ? text : "unknown error");
  }
}

// "void nibble::cuda::detail::gemv_kernel<4, true>(nibble::cuda::GemvParams)" -> "gemv_kernel".
std::string short_name(const char* mangled) {
  if (mangled == nullptr) return "?";
  int status = 0;
  char* demangled = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  std::string s = status == 0 && demangled ? demangled : mangled;
  std::free(demangled);
  // Drop "(anonymous namespace)::", cut the parameter list and the template arguments (from the
  // first '<' or '(' on), then the return type and the namespaces.
  for (size_t at; (at = s.find("(anonymous namespace)::")) != std::string::npos;) s.erase(at, 23);
  const size_t cut = s.find_first_of("<(");
  if (cut != std::string::npos) s.resize(cut);
  const size_t space = s.rfind(' ');
  if (space != std::string::npos) s.erase(0, space + 1);
  const size_t colons = s.rfind("::");
  if (colons != std::string::npos) s.erase(0, colons + 2);
  return s;
}

// CUPTI hands its buffers back on its own thread.
std::mutex g_mutex;
std::vector<KernelRecord> g_records;

constexpr size_t kBufferBytes = size_t{8} << 20;

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = *buffer ? kBufferBytes : 0;
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* record = nullptr;
  std::vector<KernelRecord> got;
  while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
    if (record->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) continue;
    const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
    got.push_back({.name = short_name(k->name),
                   .start = k->start,
                   .end = k->end,
                   .correlation = k->correlationId,
                   .graph = k->graphId,
                   .grid = k->gridX * k->gridY * k->gridZ,
                   .block = k->blockX * k->blockY * k->blockZ});
  }
  std::free(buffer);
  std::lock_guard lock(g_mutex);
  g_records.insert(g_records.end(), got.begin(), got.end());
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Total length of the union of [start, end) intervals (ns).
double busy_ns(std::vector<std::pair<uint64_t, uint64_t>> spans) {
  std::sort(spans.begin(), spans.end());
  double total = 0;
  uint64_t open = 0, close = 0;
  bool any = false;
  for (const auto& [s, e] : spans) {
    if (!any || s > close) {
      if (any) total += static_cast<double>(close - open);
      open = s, close = e, any = true;
    } else {
      close = std::max(close, e);
    }
  }
  if (any) total += static_cast<double>(close - open);
  return total;
}

}  // namespace

KernelTimeline::KernelTimeline() {
  check_cupti(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed), "activity callbacks");
}

KernelTimeline::~KernelTimeline() {
  cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  cuptiActivityFlushAll(1);
}

void KernelTimeline::start() {
  cudaDeviceSynchronize();
  check_cupti(cuptiActivityFlushAll(1), "flush");
  {
    std::lock_guard lock(g_mutex);
    g_records.clear();
  }
  check_cupti(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "enable kernel activity");
}

std::vector<KernelRecord> KernelTimeline::stop() {
  cudaDeviceSynchronize();
  check_cupti(cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "disable kernel activity");
  check_cupti(cuptiActivityFlushAll(1), "flush");
  std::vector<KernelRecord> out;
  {
    std::lock_guard lock(g_mutex);
    out.swap(g_records);
  }
  std::sort(out.begin(), out.end(), [](const KernelRecord& a, const KernelRecord& b) { return a.start < b.start; });
  return out;
}

namespace {

// The layers in a step's kernel sequence: the period P and first index a for which the most kernels
// lie in consecutive repeats of labels[a, a + P) (P = kernels per layer, a = kernels before the
// first layer); count = the number of repeats.
struct Layers {
  size_t period = 0, first = 0, count = 0;
};
Layers find_layers(const std::vector<std::string>& labels) {
  Layers best;
  const size_t n = labels.size();
  for (size_t p = 2; p <= std::min<size_t>(64, n / 2); ++p) {
    for (size_t a = 0; a < std::min<size_t>(16, n); ++a) {
      size_t count = 0;
      while (a + (count + 1) * p <= n &&
             std::equal(labels.begin() + a, labels.begin() + a + p, labels.begin() + a + count * p)) {
        ++count;
      }
      if (count >= 2 && count * p > best.count * best.period) best = {p, a, count};
    }
  }
  return best;
}

}  // namespace

std::string timeline_table(const std::vector<KernelRecord>& records, double untraced_step_ms) {
  // Steps: each graph launch (one correlation id for all its nodes) and the kernels outside any
  // graph that start after it and before the next launch.
  struct Step {
    std::vector<const KernelRecord*> graph, after;
  };
  std::vector<Step> steps;
  uint32_t current = 0;
  bool open = false;
  for (const KernelRecord& r : records) {
    if (r.graph != 0) {
      if (!open || r.correlation != current) {
        steps.emplace_back();
        current = r.correlation;
        open = true;
      }
      steps.back().graph.push_back(&r);
    } else if (open) {
      steps.back().after.push_back(&r);
    }
  }
  NIBBLE_CHECK(steps.size() >= 2, "timeline: {} graph launches recorded, need at least 2 (CUDA graphs on?)",
               steps.size());
  const auto label_of = [](const KernelRecord& r) { return fmt::format("{} ({} x {})", r.name, r.block, r.grid); };
  // The layer structure, from the first step's kernels (by name and block size: the grid of the
  // attention kernels follows the context, which grows over the steps).
  std::vector<std::string> names;
  for (const KernelRecord* r : steps.front().graph) names.push_back(fmt::format("{}/{}", r->name, r->block));
  const Layers layers = find_layers(names);

  // Per slot (a kernel's place in a layer, or outside the layers), in chain order: the chain's
  // advance while it ran (end minus the previous kernel's end), its duration and its lead (the
  // previous kernel's end minus its start: > 0 when it started early).
  struct Slot {
    std::string label;
    std::vector<double> link_us, run_us, lead_us;
    double link_sum_us = 0;
    int64_t calls = 0;
  };
  std::vector<Slot> slots;
  std::map<std::string, size_t> index;
  std::vector<double> period_ms, graph_ms, after_us, idle_us, kernels;
  const size_t full = steps.size() - 1;  // the last step has no next launch to measure its gap to
  for (size_t i = 0; i < full; ++i) {
    const Step& s = steps[i];
    const uint64_t first = s.graph.front()->start;
    const uint64_t next_first = steps[i + 1].graph.front()->start;
    uint64_t graph_end = 0;
    std::vector<std::pair<uint64_t, uint64_t>> spans;
    for (size_t k = 0; k < s.graph.size(); ++k) {
      const KernelRecord& r = *s.graph[k];
      graph_end = std::max(graph_end, r.end);
      spans.emplace_back(r.start, r.end);
      std::string key;
      const bool in_layer = layers.count > 0 && s.graph.size() == steps.front().graph.size() && k >= layers.first &&
                            k < layers.first + layers.count * layers.period;
      if (in_layer) {
        key = fmt::format("layer, kernel {}: {} x {}", (k - layers.first) % layers.period + 1, r.name, r.block);
      } else {
        key = fmt::format("{} #{}: {}", k < layers.first ? "before the layers" : "after the layers", k, label_of(r));
      }
      auto [it, added] = index.try_emplace(key, slots.size());
      if (added) slots.push_back({.label = key});
      Slot& c = slots[it->second];
      const uint64_t prev_end = k == 0 ? r.start : s.graph[k - 1]->end;
      c.link_us.push_back((static_cast<double>(r.end) - static_cast<double>(prev_end)) * 1e-3);
      c.run_us.push_back(static_cast<double>(r.end - r.start) * 1e-3);
      c.lead_us.push_back((static_cast<double>(prev_end) - static_cast<double>(r.start)) * 1e-3);
      c.link_sum_us += c.link_us.back();
      ++c.calls;
    }
    double after = 0;
    for (const KernelRecord* r : s.after) {
      spans.emplace_back(r->start, r->end);
      after += static_cast<double>(r->end - r->start);
    }
    period_ms.push_back(static_cast<double>(next_first - first) * 1e-6);
    graph_ms.push_back(static_cast<double>(graph_end - first) * 1e-6);
    after_us.push_back(after * 1e-3);
    idle_us.push_back((static_cast<double>(next_first - first) - busy_ns(spans)) * 1e-3);
    kernels.push_back(static_cast<double>(s.graph.size()));
  }
  const double n = static_cast<double>(full);
  std::string out = fmt::format(
      "\n# kernel timeline (CUPTI activity records), {} graph-replayed steps: step period {:.3f} ms (median; "
      "{:.3f} ms untraced, wall time), graph {:.3f} ms ({:.0f} kernels, {} layers of {}), kernels after the graph "
      "(sampling) {:.1f} us, GPU idle {:.1f} us per step\n"
      "# link = the kernel's end minus the previous kernel's end (how far it moved the chain); run = its end "
      "minus its start; lead = the previous kernel's end minus its start (> 0: started early, programmatic "
      "dependent launch). Medians over calls; us/step = the mean sum of links per step.\n"
      "| kernel (threads per block; blocks) | calls/step | link us | us/step | of graph | run us | lead us |\n"
      "|---|---|---|---|---|---|---|\n",
      full, median(period_ms), untraced_step_ms, median(graph_ms), median(kernels), layers.count, layers.period,
      median(after_us), median(idle_us));
  const double graph_us = median(graph_ms) * 1e3;
  for (const Slot& c : slots) {
    const double per_step = c.link_sum_us / n;
    out += fmt::format("| {} | {:.0f} | {:.2f} | {:.1f} | {:.1f}% | {:.2f} | {:.2f} |\n", c.label,
                       static_cast<double>(c.calls) / n, median(c.link_us), per_step, 100.0 * per_step / graph_us,
                       median(c.run_us), median(c.lead_us));
  }
  return out;
}

}  // namespace nibble::bench
