#include "write_case.h"

#include <numeric>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kv_write.h"
#include "cache/page_layout.h"
#include "decode_bench_arena.h"
#include "event_timing.h"

namespace nibble::bench {

namespace {

cache::PageLayout write_layout(const DecodeBenchOptions& o, quant::KvDtype dtype) {
  return cache::PageLayout({.num_layers = 1, .kv_heads = o.kv_heads, .head_dim = o.head_dim}, dtype, o.page_size);
}

}  // namespace

std::vector<int64_t> write_region_bytes(const DecodeBenchOptions& o, quant::KvDtype dtype, int64_t tokens) {
  const int64_t pages = (tokens + o.page_size - 1) / o.page_size;
  std::vector<int64_t> b(kNumRegions, 0);
  b[kPool] = pages * write_layout(o, dtype).page_bytes();
  b[kWriteK] = b[kWriteV] = tokens * o.kv_heads * o.head_dim * 4;
  b[kWritePositions] = b[kWriteSeqs] = tokens * 4;
  b[kWriteTable] = pages * 4;
  return b;
}

double bench_write(const DecodeBenchOptions& o, const DeviceArena& arena, quant::KvDtype dtype, const WriteShape& w) {
  const cache::PageLayout layout = write_layout(o, dtype);
  const int64_t tokens = w.tokens;
  const int64_t pages = (tokens + o.page_size - 1) / o.page_size;
  const std::vector<int64_t> bytes = write_region_bytes(o, dtype, tokens);
  const int64_t elems = tokens * o.kv_heads * o.head_dim;
  float* k = arena.at<float>(kWriteK, bytes[kWriteK]);
  float* v = arena.at<float>(kWriteV, bytes[kWriteV]);
  int32_t* d_pos = arena.at<int32_t>(kWritePositions, bytes[kWritePositions]);
  int32_t* d_seq = arena.at<int32_t>(kWriteSeqs, bytes[kWriteSeqs]);
  int32_t* d_table = arena.at<int32_t>(kWriteTable, bytes[kWriteTable]);
  NIBBLE_CUDA_CHECK(cudaMemset(k, 0x3C, elems * 4));
  NIBBLE_CUDA_CHECK(cudaMemset(v, 0xBC, elems * 4));
  std::vector<int32_t> positions(tokens), seqs(tokens, 0), table(pages);
  std::iota(positions.begin(), positions.end(), 0);
  std::iota(table.begin(), table.end(), 0);
  NIBBLE_CUDA_CHECK(cudaMemcpy(d_pos, positions.data(), tokens * 4, cudaMemcpyHostToDevice));
  NIBBLE_CUDA_CHECK(cudaMemcpy(d_seq, seqs.data(), tokens * 4, cudaMemcpyHostToDevice));
  NIBBLE_CUDA_CHECK(cudaMemcpy(d_table, table.data(), pages * 4, cudaMemcpyHostToDevice));
  const cuda::KvWriteParams params{.k = k, .v = v, .positions = d_pos, .row_sequence = d_seq, .page_tables = d_table,
                                   .pool = arena.at<uint8_t>(kPool, bytes[kPool]), .num_tokens = tokens,
                                   .max_pages_per_seq = pages, .page_bytes = layout.page_bytes(),
                                   .k_layout = layout.k(0), .v_layout = layout.v(0), .k_global_scale = w.g,
                                   .v_global_scale = w.g, .nvfp4_scale_rule = w.rule};
  return median_seconds_per_call([&](int) { cuda::kv_write(params, nullptr); }, 0.3, 200, 3);
}

double write_io_bytes(const DecodeBenchOptions& o, quant::KvDtype dtype, int64_t tokens) {
  return 2.0 * tokens * o.kv_heads * o.head_dim * 4 +
         static_cast<double>(tokens) * write_layout(o, dtype).bytes_per_token_per_layer();
}

}  // namespace nibble::bench
