#include "timeline_table.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <utility>

#include "common/error.h"

namespace nibble::bench {

namespace {

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
  const size_t full = steps.size() - 1;  // the last step has no next launch to measure its gap to
  // The rows' steps: those whose graph ran the most common number of kernels (the first such count
  // on a tie). A step with another count (its plan launched another kernel set) has no place-by-place
  // match with them: it counts in the step totals, not in the rows.
  std::map<size_t, size_t> step_counts;
  for (size_t i = 0; i < full; ++i) ++step_counts[steps[i].graph.size()];
  size_t reference = steps.front().graph.size();
  for (size_t i = 0; i < full; ++i) {
    const size_t c = steps[i].graph.size();
    if (step_counts[c] > step_counts[reference]) reference = c;
  }
  const size_t reference_steps = step_counts[reference];
  // The layer structure, from the first such step's kernels (by name and block size: the grid of
  // the attention kernels follows the context, which grows over the steps).
  const Step& model = *std::find_if(steps.begin(), steps.end(), [&](const Step& s) { return s.graph.size() == reference; });
  std::vector<std::string> names;
  for (const KernelRecord* r : model.graph) names.push_back(fmt::format("{}/{}", r->name, r->block));
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
  for (size_t i = 0; i < full; ++i) {
    const Step& s = steps[i];
    const uint64_t first = s.graph.front()->start;
    const uint64_t next_first = steps[i + 1].graph.front()->start;
    uint64_t graph_end = 0;
    std::vector<std::pair<uint64_t, uint64_t>> spans;
    const bool in_rows = s.graph.size() == reference;
    for (size_t k = 0; k < s.graph.size(); ++k) {
      const KernelRecord& r = *s.graph[k];
      graph_end = std::max(graph_end, r.end);
      spans.emplace_back(r.start, r.end);
      if (!in_rows) continue;
      std::string key;
      const bool in_layer = layers.count > 0 && k >= layers.first && k < layers.first + layers.count * layers.period;
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
  const double n = static_cast<double>(reference_steps);
  std::string others;
  if (reference_steps < full) {
    others = fmt::format("\n# {} of the {} steps ran another number of kernels than {} (", full - reference_steps, full,
                         reference);
    bool first = true;
    for (const auto& [count, times] : step_counts) {
      if (count == reference) continue;
      others += fmt::format("{}{} kernels in {} step{}", first ? "" : "; ", count, times, times == 1 ? "" : "s");
      first = false;
    }
    others += "): the rows below leave them out; the step figures above include them";
  }
  std::string out = fmt::format(
      "\n# kernel timeline (CUPTI activity records), {} graph-replayed steps: step period {:.3f} ms (median; "
      "{:.3f} ms untraced, wall time), graph {:.3f} ms ({:.0f} kernels, {} layers of {}), kernels after the graph "
      "(sampling) {:.1f} us, GPU idle {:.1f} us per step{}\n"
      "# link = the kernel's end minus the previous kernel's end (how far it moved the chain); run = its end "
      "minus its start; lead = the previous kernel's end minus its start (> 0: started early, programmatic "
      "dependent launch). Medians over calls; us/step = the mean sum of links per step.\n"
      "| kernel (threads per block; blocks) | calls/step | link us | us/step | of graph | run us | lead us |\n"
      "|---|---|---|---|---|---|---|\n",
      full, median(period_ms), untraced_step_ms, median(graph_ms), median(kernels), layers.count, layers.period,
      median(after_us), median(idle_us), others);
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
