#pragma once
// Kernel start/end times of the real decode step, taken by CUPTI's activity API (the way Nsight
// Systems traces, without it): every kernel the process runs between start() and stop(), graph
// nodes included, with its device timestamps. bench_model_decode --timeline turns the records of
// a run of graph-replayed steps into a table of where a step's time goes: per kernel, how far the
// end of the step's kernel chain moved while it ran ("link" = its end minus the previous kernel's
// end), how long it ran, and how early it started (programmatic dependent launch lets a kernel
// start before its predecessor ends); and between steps, the time the GPU ran nothing.
//
// One collector per process (CUPTI's activity callbacks are process-wide).
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

class KernelTimeline {
 public:
  KernelTimeline();
  ~KernelTimeline();
  KernelTimeline(const KernelTimeline&) = delete;
  KernelTimeline& operator=(const KernelTimeline&) = delete;

  // Starts recording (drops what an earlier start() kept).
  void start();
  // Stops recording (waits for the device and flushes CUPTI's buffers); the kernels since start(),
  // by start time.
  std::vector<KernelRecord> stop();
};

// The table (markdown) of a run of `records` holding whole steps, each one graph launch followed by
// kernels outside the graph (the sampling); `step_ms` is the same steps' median wall time without
// tracing, for the tracing's own cost. Throws nibble::Error when no graph launch was recorded.
std::string timeline_table(const std::vector<KernelRecord>& records, double untraced_step_ms);

}  // namespace nibble::bench
