#pragma once
// The analysis half of bench_model_decode --timeline (no CUDA: kernel_timeline.h records, this
// reads): from the kernel records of a run of graph-replayed decode steps, a markdown table of
// where a step's time goes. Per kernel of a step's graph, how far the end of the step's kernel chain
// moved while it ran ("link" = its end minus the previous kernel's end), how long it ran, and how
// early it started (programmatic dependent launch lets a kernel start before its predecessor ends);
// kernels that repeat per layer are folded into one row per place in the layer; between steps, the
// time the GPU ran nothing.
#include <cstdint>
#include <string>
#include <vector>

namespace nibble::bench {

struct KernelRecord {
  std::string name;       // demangled, without namespaces, template arguments or parameters
  uint64_t start = 0;     // ns, device timestamps on CUPTI's clock
  uint64_t end = 0;
  uint32_t correlation = 0;  // of the launching API call (a graph launch for every node of a graph)
  uint32_t graph = 0;        // graph id, 0 for a kernel launched outside a graph
  int32_t grid = 0;          // blocks (x·y·z) and threads per block: tell kernels of one name apart
  int32_t block = 0;
};

// The table of a run of `records` (by start time) holding whole steps, each one graph launch followed
// by kernels outside the graph (the sampling); `untraced_step_ms` is the same steps' median wall time
// without tracing, for the tracing's own cost. The per-kernel rows come from the steps whose graph
// ran the most common number of kernels; a run whose steps differ (a plan that changes a kernel's
// count, say) says how many steps it left out. Throws nibble::Error when fewer than two graph
// launches were recorded.
std::string timeline_table(const std::vector<KernelRecord>& records, double untraced_step_ms);

}  // namespace nibble::bench
