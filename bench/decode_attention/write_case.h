#pragma once
// The KV write path's case of bench_decode_attention: one kv_write call quantizing and storing
// `tokens` new f32 K/V rows of one sequence into the paged pool, buffers in the run's arena.
#include <cstdint>
#include <vector>

#include "decode_bench_args.h"
#include "device_arena.h"
#include "quant/kv_format.h"

namespace nibble::bench {

// Bytes per arena region (decode_bench_arena.h) of the write path for `w.tokens` tokens in `dtype`.
std::vector<int64_t> write_region_bytes(const DecodeBenchOptions& o, quant::KvDtype dtype, int64_t tokens);

// Median seconds per kv_write call (event timing of host launches).
double bench_write(const DecodeBenchOptions& o, const DeviceArena& arena, quant::KvDtype dtype, const WriteShape& w);

// Bytes one call moves: the f32 K and V read + the stored cache bytes (scales included).
double write_io_bytes(const DecodeBenchOptions& o, quant::KvDtype dtype, int64_t tokens);

}  // namespace nibble::bench
