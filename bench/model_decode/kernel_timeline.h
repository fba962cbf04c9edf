#pragma once
// Kernel start/end times of the real decode step, taken by CUPTI's activity API (the way Nsight
// Systems traces, without it): every kernel the process runs between start() and stop(), graph
// nodes included, with its device timestamps. bench_model_decode --timeline turns the records of
// a run of graph-replayed steps into a table of where a step's time goes: per kernel, how far the
// end of the step's kernel chain moved while it ran ("link" = its end minus the previous kernel's
// end), how long it ran, and how early it started (programmatic dependent launch lets a kernel
// start before its predecessor ends); and between steps, the time the GPU ran nothing.
//
// One collector per process (CUPTI's activity callbacks are process-wide). The table: timeline_table.h.
#include <vector>

#include "timeline_table.h"

namespace nibble::bench {

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

}  // namespace nibble::bench
