#pragma once
// The device's practical read bandwidth, the roofline every CUDA benchmark reports against: one
// read-only kernel (16-byte loads, four in flight per thread, a grid of a few waves) over a buffer
// much larger than L2, XOR-folded into a sink so the loads are kept. One kernel for all benchmarks,
// so their "% of read bandwidth" columns share a denominator.
#include <cuda_runtime.h>

#include <cstdint>

namespace nibble::bench {

// Seconds for one read of `bytes` at `data` (fastest of reps - 1 timed runs after a warm-up).
double time_read(const void* data, int64_t bytes, unsigned* sink, int sms, int reps);

// Bytes per second reading a fresh `bytes`-byte device buffer (allocates and frees it).
double measure_read_bandwidth(int64_t bytes, int reps);

// Reads `bytes` of `buffer` on `stream`, evicting what L2 held before with clean lines (a memset
// would leave dirty ones, written back during the next timing).
void read_through(const void* buffer, int64_t bytes, unsigned* sink, cudaStream_t stream);

}  // namespace nibble::bench
