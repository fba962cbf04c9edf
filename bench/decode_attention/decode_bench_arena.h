#pragma once
// bench_decode_attention's device: what it has (SMs, L2, free memory), and the regions of the one
// device arena every case of a run carves its buffers from (bench/common/device_arena.h: offsets
// fixed for the whole run, sized before the first case is timed).
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "backend/cuda/cuda_check.h"

namespace nibble::bench {

struct BenchDevice {
  int sms = 0;
  int64_t l2_bytes = 0;
  size_t free_bytes = 0;  // at start, before the bandwidth probe
  std::string name;
};

inline BenchDevice query_bench_device() {
  BenchDevice d;
  int dev = 0;
  NIBBLE_CUDA_CHECK(cudaGetDevice(&dev));
  cudaDeviceProp prop{};
  NIBBLE_CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
  d.sms = prop.multiProcessorCount;
  d.l2_bytes = prop.l2CacheSize;
  d.name = prop.name;
  size_t total = 0;
  NIBBLE_CUDA_CHECK(cudaMemGetInfo(&d.free_bytes, &total));
  return d;
}

// The arena's regions. The KV pool is region 0, so every format's pool starts at the arena base.
enum ArenaRegion : size_t {
  kPool,             // u8  decode: [copies][seqs * pages_per_seq] pages; write: [pages] pages
  kTables,           // i32 [copies][seqs][pages_per_seq]
  kPlan,             // i32 DecodeSplitPlan::packed()
  kPartialOut,       // f32 [plan.num_work][num_q_heads][head_dim]
  kPartialLse,       // f32 [plan.num_work][num_q_heads]
  kQ,                // f32 [seqs][num_q_heads][head_dim]
  kOut,              // f32 [seqs][num_q_heads][head_dim]
  kWriteK,           // f32 [tokens][kv_heads][head_dim]
  kWriteV,           // f32 [tokens][kv_heads][head_dim]
  kWritePositions,   // i32 [tokens]
  kWriteSeqs,        // i32 [tokens]
  kWriteTable,       // i32 [pages]
  kNumRegions
};

}  // namespace nibble::bench
