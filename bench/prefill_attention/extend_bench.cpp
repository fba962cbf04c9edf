// The extend section of bench_prefill_attention: a chunk of C new tokens over a cached prefix of P
// tokens (one sequence, page size 16 as the engine uses it), head_dim 128 and 64 (--quick) or 64, 128
// and 256, 8 KV heads with 4 query heads each (--extend-gqa for others).
// FLOPs: 4 · head_dim · q_heads · (C · P + C² / 2) (QK^T and PV over the prefix, causal over the
// chunk). Timed: one extend_attention call as an extend-only engine step makes it (the prefix
// already in the pool, q/k/v f32 as the model passes them): the own K/V's bf16 conversion and the
// kernel. The floor is compute: at the cuBLAS GEMM rate measured in the same run (the prefix bytes,
// read once per 64-token query tile of a KV head, are < 10% of the time at 4.5 TB/s for bf16).
#include "extend_bench.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_caps.h"
#include "backend/cuda/extend_attention.h"
#include "backend/cuda/prefill_attention.h"
#include "event_timing.h"
#include "cache/page_layout.h"
#include "device_mem.h"
#include "quant/kv_format.h"

namespace nibble::bench {

namespace {

constexpr int64_t kKvHeads = 8;
constexpr int64_t kPageSize = 16;

// One sequence: prefix P cached in a pool of `dtype`, C new tokens.
struct ExtendStep {
  int64_t prefix, chunk, head_dim, q_heads;
  cache::PageLayout layout;
  int num_sms;
  const DeviceMem& split;  // the run's split workspace (allocated once: no step's allocations move)
  DeviceMem q, k, v, out, seq_info, pool, page_table, work, kv_bf16;
  int64_t num_work = 0;
  ExtendStep(int64_t prefix_, int64_t chunk_, int64_t head_dim_, int64_t q_heads_, quant::KvDtype dtype, int sms,
             const DeviceMem& split_)
      : prefix(prefix_),
        chunk(chunk_),
        head_dim(head_dim_),
        q_heads(q_heads_),
        layout({.num_layers = 1, .kv_heads = kKvHeads, .head_dim = head_dim}, dtype, kPageSize),
        num_sms(sms),
        split(split_),
        q(chunk * q_heads * head_dim * 4),
        k(chunk * kKvHeads * head_dim * 4),
        v(chunk * kKvHeads * head_dim * 4),
        out(chunk * q_heads * head_dim * 4),
        seq_info(cuda::kSeqInfoFields * 4),
        pool(pages() * layout.page_bytes()),
        page_table(pages() * 4),
        work((chunk / cuda::kChunkQueryTile + 1) * 2 * 4),
        kv_bf16(cuda::prefill_workspace_bytes(chunk, kKvHeads, head_dim)) {
    // Constant finite patterns in every format (bf16 0x2222, E4M3 0x22, E2M1 code 2 with scale 0x22).
    NIBBLE_CUDA_CHECK(cudaMemset(q.p, 0x3C, chunk * q_heads * head_dim * 4));
    NIBBLE_CUDA_CHECK(cudaMemset(k.p, 0x3B, chunk * kKvHeads * head_dim * 4));
    NIBBLE_CUDA_CHECK(cudaMemset(v.p, 0xBC, chunk * kKvHeads * head_dim * 4));
    NIBBLE_CUDA_CHECK(cudaMemset(pool.p, 0x22, pages() * layout.page_bytes()));
    const std::vector<int32_t> info{0, static_cast<int32_t>(chunk), static_cast<int32_t>(prefix), 1};
    NIBBLE_CUDA_CHECK(cudaMemcpy(seq_info.p, info.data(), info.size() * 4, cudaMemcpyHostToDevice));
    std::vector<int32_t> table(static_cast<size_t>(pages()));
    for (size_t i = 0; i < table.size(); ++i) table[i] = static_cast<int32_t>(i);
    NIBBLE_CUDA_CHECK(cudaMemcpy(page_table.p, table.data(), table.size() * 4, cudaMemcpyHostToDevice));
    std::vector<int32_t> items;
    for (int64_t q0 = 0; q0 < chunk; q0 += cuda::kChunkQueryTile) items.insert(items.end(), {0, static_cast<int32_t>(q0)});
    num_work = static_cast<int64_t>(items.size() / 2);
    NIBBLE_CUDA_CHECK(cudaMemcpy(work.p, items.data(), items.size() * 4, cudaMemcpyHostToDevice));
  }
  int64_t pages() const { return (prefix + chunk + kPageSize - 1) / kPageSize; }
  double flops() const {
    return 4.0 * head_dim * q_heads * (static_cast<double>(chunk) * prefix + static_cast<double>(chunk) * chunk / 2.0);
  }
  cuda::ExtendAttentionParams extend_params() const {
    return {.q = q.as<float>(), .k = k.as<float>(), .v = v.as<float>(), .out = out.as<float>(),
            .seq_info = seq_info.as<int32_t>(), .num_seqs = 1, .total_tokens = chunk, .max_new_tokens = chunk,
            .pool = pool.as<uint8_t>(), .page_tables = page_table.as<int32_t>(), .max_pages_per_seq = pages(),
            .page_bytes = layout.page_bytes(), .k_layout = layout.k(0), .v_layout = layout.v(0),
            .num_q_heads = q_heads, .num_kv_heads = kKvHeads, .head_dim = head_dim,
            .softmax_scale = 1.0f / std::sqrt(static_cast<float>(head_dim)), .kv_workspace = kv_bf16.p,
            .extend_seqs = 1, .extend_tokens = chunk, .max_prefix_tokens = prefix, .num_sms = num_sms,
            .split_workspace = split.p, .split_workspace_bytes = cuda::extend_split_workspace_bytes(head_dim, num_sms)};
  }
  // The cached prefix's bytes (every KV head's K and V, nvfp4 scales included).
  double prefix_bytes() const { return static_cast<double>(prefix) * layout.page_bytes() / kPageSize; }
  cuda::ChunkAttentionParams chunk_params() const {
    return {.q = q.as<float>(), .k = k.as<float>(), .v = v.as<float>(), .out = out.as<float>(),
            .work = work.as<int32_t>(), .num_work = num_work, .seq_info = seq_info.as<int32_t>(), .num_seqs = 1,
            .pool = pool.as<uint8_t>(), .page_tables = page_table.as<int32_t>(), .max_pages_per_seq = pages(),
            .page_bytes = layout.page_bytes(), .k_layout = layout.k(0), .v_layout = layout.v(0),
            .num_q_heads = q_heads, .num_kv_heads = kKvHeads, .head_dim = head_dim,
            .softmax_scale = 1.0f / std::sqrt(static_cast<float>(head_dim))};
  }
};

}  // namespace

void run_extend_bench(double gemm_tflops, bool quick, const std::vector<quant::KvDtype>& formats,
                      const std::vector<int>& groups, const std::vector<ExtendShape>& shape_list,
                      nlohmann::json& json) {
  const std::vector<ExtendShape> shapes =
      !shape_list.empty() ? shape_list
      : quick             ? std::vector<ExtendShape>{{8192, 2048}, {32768, 8192}}
                          : std::vector<ExtendShape>{{8192, 2048}, {8192, 8192}, {32768, 2048}, {32768, 8192}};
  int device = 0, sms = 0;
  NIBBLE_CUDA_CHECK(cudaGetDevice(&device));
  NIBBLE_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  int64_t split_bytes = 0;
  for (const int64_t d : {64, 128, 256}) split_bytes = std::max(split_bytes, cuda::extend_split_workspace_bytes(d, sms));
  const DeviceMem split(split_bytes);
  for (const int group : groups) {
    const int64_t q_heads = kKvHeads * group;
    for (const int64_t head_dim : quick ? std::vector<int64_t>{128, 64} : std::vector<int64_t>{128, 64, 256}) {
      fmt::print("\nextend (chunk over a cached prefix): head_dim {}, {} q / {} kv heads, one sequence, page {}\n",
                 head_dim, q_heads, kKvHeads, kPageSize);
      fmt::print("FLOPs = 4 * head_dim * q_heads * (chunk * prefix + chunk^2 / 2); floor = FLOPs at the cuBLAS rate "
                 "({:.0f} TFLOP/s)\n",
                 gemm_tflops);
      fmt::print("prefix GB/s = the cached prefix's bytes / time; parts = the launcher's prefix split "
                 "(extend_split.h), and where > 1 the same call unsplit beside it; where the default is the wgmma "
                 "kernel (head_dim 128, unsplit, 9.0 device), the mma.sync kernel's time beside it\n");
      fmt::print("  {:>7} {:>6} {:>6} {:>10} {:>8} {:>8} {:>10} {:>8} {:>5} {:>10} {:>9} {:>8} {:>14} {:>8}\n",
                 "prefix", "chunk", "kv", "tc ms", "TFLOP/s", "%cuBLAS", "floor ms", "GB/s", "parts", "unsplit ms",
                 "mma ms", "TFLOP/s", "chunk_attn ms", "TFLOP/s");
      for (const ExtendShape& shape : shapes) {
        for (const quant::KvDtype dtype : formats) {
          const ExtendStep step(shape.prefix, shape.chunk, head_dim, q_heads, dtype, sms, split);
          const auto params = step.extend_params();
          const int parts = cuda::extend_attention_splits(params);
          const double s = median_seconds([&] { cuda::extend_attention(params, nullptr); });
          const double tflops = step.flops() / s * 1e-12;
          double unsplit_s = 0.0;
          if (parts > 1) {
            auto unsplit = params;
            unsplit.prefix_splits = 1;
            unsplit_s = median_seconds([&] { cuda::extend_attention(unsplit, nullptr); });
          }
          // The mma.sync kernel where the default took the wgmma one (every format but f32).
          double mma_s = 0.0;
          const bool time_mma = head_dim == 128 && parts == 1 && dtype != quant::KvDtype::kF32 && cuda::wgmma_runs();
          if (time_mma) {
            auto mma = params;
            mma.kernel = cuda::kExtendKernelMma;
            mma_s = median_seconds([&] { cuda::extend_attention(mma, nullptr); });
          }
          // chunk_attention (f32, CUDA cores) only on the smallest shape at head_dim 128: ~10 TFLOP/s
          // makes the others seconds.
          double chunk_s = 0.0;
          const bool time_chunk = head_dim == 128 && shape.prefix == 8192 && shape.chunk == 2048 &&
                                  (dtype == quant::KvDtype::kBF16 || dtype == quant::KvDtype::kNVFP4);
          if (time_chunk) {
            const auto cp = step.chunk_params();
            chunk_s = median_seconds([&] { cuda::chunk_attention(cp, nullptr); });
          }
          fmt::print("  {:>7} {:>6} {:>6} {:>10.3f} {:>8.1f} {:>7.1f}% {:>10.3f} {:>8.0f} {:>5} {:>10} {:>9} {:>8} {:>14} "
                     "{:>8}\n",
                     shape.prefix, shape.chunk, quant::kv_dtype_name(dtype), s * 1e3, tflops,
                     100.0 * tflops / gemm_tflops, step.flops() / (gemm_tflops * 1e12) * 1e3,
                     step.prefix_bytes() / s * 1e-9, parts,
                     parts > 1 ? fmt::format("{:.3f}", unsplit_s * 1e3) : std::string("-"),
                     time_mma ? fmt::format("{:.3f}", mma_s * 1e3) : std::string("-"),
                     time_mma ? fmt::format("{:.1f}", step.flops() / mma_s * 1e-12) : std::string("-"),
                     time_chunk ? fmt::format("{:.3f}", chunk_s * 1e3) : std::string("-"),
                     time_chunk ? fmt::format("{:.1f}", step.flops() / chunk_s * 1e-12) : std::string("-"));
          json["extend"].push_back({{"head_dim", head_dim}, {"gqa", group}, {"prefix", shape.prefix},
                                    {"chunk", shape.chunk}, {"kv", quant::kv_dtype_name(dtype)}, {"ms", s * 1e3},
                                    {"tflops", tflops}, {"chunk_attention_ms", chunk_s * 1e3},
                                    {"prefix_gbps", step.prefix_bytes() / s * 1e-9}, {"parts", parts},
                                    {"unsplit_ms", unsplit_s * 1e3}, {"mma_ms", mma_s * 1e3}});
        }
      }
    }
  }
}

}  // namespace nibble::bench
