// bench_prefill_attention: causal prefill attention (no cached prefix) on the tensor cores.
// Prints, per shape (sequence length, head_dim; 32 query heads / 8 KV heads; batch so that the
// step holds ~16K tokens), the median time of the whole op (the f32 -> bf16 K/V conversion + the
// attention kernel) and of the kernel alone, its TFLOP/s, and the fraction of the H200's nominal
// dense bf16 peak (989 TFLOP/s, a datasheet figure) and of a cuBLAS bf16 GEMM (8192^3) timed in
// the same run (the practical ceiling). FLOPs are counted causally: 4 · seq² · head_dim ·
// q_heads / 2 per sequence (QK^T and PV, half the square).
//
//   bench_prefill_attention [--quick] [--tiles] [--extend] [--extend-formats bf16,fp8,...]
//                           [--extend-gqa 4,8,...] [--extend-shapes PREFIX:CHUNK,...] [--json FILE]
//
//   --extend-formats  the extend section's prefix formats, in order (default bf16,fp8,nvfp4,k8v4);
//            one format makes the run's extend launches that format's alone (e.g. for ncu)
//   --extend-gqa  the extend section's query heads per KV head (8 KV heads), in order (default 4)
//   --extend-shapes  the extend section's prefix + chunk shapes, in order (default 8192:2048,
//            8192:8192, 32768:2048, 32768:8192); e.g. 32768:64 for an agent's turn over a long context
//   --extend extend (chunk over a cached prefix, extend_bench.cpp) only: tensor-core
//            extend_attention vs the CUDA-core chunk_attention, bf16 / fp8 / nvfp4 / k8v4 prefixes
//   --tiles  also time every tile configuration built (cuda::prefill_tile_name) at 2K and 8K
//   --quick  sequence lengths 1K and 8K only
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "common/error.h"
#include "decode_bench_args.h"  // parse_formats
#include "event_timing.h"
#include "device_mem.h"
#include "extend_bench.h"
#include "backend/cuda/prefill_attention.h"
#include "cache/page_layout.h"
#include "quant/kv_format.h"

namespace {

using namespace nibble;

constexpr int64_t kQHeads = 32;
constexpr int64_t kKvHeads = 8;
constexpr int64_t kStepTokens = 16384;
constexpr double kNominalPeakTflops = 989.0;  // H100/H200 SXM dense bf16, datasheet (nominal)

#define BENCH_CUBLAS_CHECK(call)                                                              \
  do {                                                                                        \
    const cublasStatus_t status_ = (call);                                                    \
    if (status_ != CUBLAS_STATUS_SUCCESS) {                                                   \
      fmt::print(stderr, "cuBLAS error {} at {}:{}\n", static_cast<int>(status_), __FILE__, __LINE__); \
      std::exit(1);                                                                           \
    }                                                                                         \
  } while (0)

using nibble::bench::DeviceMem;

using nibble::bench::median_seconds;

// cuBLAS bf16 GEMM C = A B (8192^3, f32 accumulate, bf16 out): TFLOP/s, the practical ceiling.
double gemm_tflops() {
  constexpr int64_t n = 8192;
  DeviceMem a(n * n * 2), b(n * n * 2), c(n * n * 2);
  NIBBLE_CUDA_CHECK(cudaMemset(a.p, 0x3C, n * n * 2));  // bf16 0x3C3C ~ 0.0115: finite, no overflow
  NIBBLE_CUDA_CHECK(cudaMemset(b.p, 0x3C, n * n * 2));
  cublasHandle_t blas;
  BENCH_CUBLAS_CHECK(cublasCreate(&blas));
  const float alpha = 1.0f, beta = 0.0f;
  const double seconds = median_seconds([&] {
    BENCH_CUBLAS_CHECK(cublasGemmEx(blas, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, a.p, CUDA_R_16BF, n, b.p,
                                    CUDA_R_16BF, n, &beta, c.p, CUDA_R_16BF, n, CUBLAS_COMPUTE_32F,
                                    CUBLAS_GEMM_DEFAULT));
  });
  cublasDestroy(blas);
  return 2.0 * n * n * n / seconds * 1e-12;
}

// A step of `batch` sequences of `seq` new tokens each (no prefix): inputs, seq_info, workspace.
struct Step {
  int64_t seq, batch, head_dim, total;
  DeviceMem q, k, v, out, seq_info, workspace;
  Step(int64_t seq_, int64_t batch_, int64_t head_dim_)
      : seq(seq_),
        batch(batch_),
        head_dim(head_dim_),
        total(seq_ * batch_),
        q(total * kQHeads * head_dim * 4),
        k(total * kKvHeads * head_dim * 4),
        v(total * kKvHeads * head_dim * 4),
        out(total * kQHeads * head_dim * 4),
        seq_info(batch * cuda::kSeqInfoFields * 4),
        workspace(cuda::prefill_workspace_bytes(total, kKvHeads, head_dim)) {
    // Constant patterns (finite in f32): timing does not depend on values.
    NIBBLE_CUDA_CHECK(cudaMemset(q.p, 0x3C, total * kQHeads * head_dim * 4));
    NIBBLE_CUDA_CHECK(cudaMemset(k.p, 0x3B, total * kKvHeads * head_dim * 4));
    NIBBLE_CUDA_CHECK(cudaMemset(v.p, 0xBC, total * kKvHeads * head_dim * 4));
    std::vector<int32_t> info;
    for (int64_t s = 0; s < batch; ++s) {
      info.insert(info.end(), {static_cast<int32_t>(s * seq), static_cast<int32_t>(seq), 0, 1});
    }
    NIBBLE_CUDA_CHECK(cudaMemcpy(seq_info.p, info.data(), info.size() * 4, cudaMemcpyHostToDevice));
  }
  cuda::PrefillAttentionParams params(int tile, bool filled) const {
    return {.q = q.as<float>(),
            .k = k.as<float>(),
            .v = v.as<float>(),
            .out = out.as<float>(),
            .seq_info = seq_info.as<int32_t>(),
            .num_seqs = batch,
            .total_tokens = total,
            .max_new_tokens = seq,
            .kv_workspace = workspace.p,
            .kv_workspace_filled = filled,
            .num_q_heads = kQHeads,
            .num_kv_heads = kKvHeads,
            .head_dim = head_dim,
            .softmax_scale = 1.0f / std::sqrt(static_cast<float>(head_dim)),
            .tile = tile};
  }
  double flops() const { return batch * 4.0 * seq * seq * head_dim * kQHeads / 2.0; }
};

struct Row {
  int64_t head_dim, seq, batch;
  int tile;
  double op_s, kernel_s, tflops;
};

Row measure(int64_t head_dim, int64_t seq, int tile) {
  const int64_t batch = std::max<int64_t>(1, kStepTokens / seq);
  Step step(seq, batch, head_dim);
  const auto op = step.params(tile, false);
  const auto kernel = step.params(tile, true);
  const double op_s = median_seconds([&] { cuda::prefill_attention(op, nullptr); });
  const double kernel_s = median_seconds([&] { cuda::prefill_attention(kernel, nullptr); });
  return {head_dim, seq, batch, tile, op_s, kernel_s, step.flops() / kernel_s * 1e-12};
}

// The CUDA-core chunk kernel (f32) on the same step, for comparison (extend/decode-generic path).
double chunk_kernel_seconds(int64_t head_dim, int64_t seq, int64_t batch) {
  Step step(seq, batch, head_dim);
  const cache::PageLayout layout({.num_layers = 1, .kv_heads = kKvHeads, .head_dim = head_dim},
                                 quant::KvDtype::kF32, 16);
  DeviceMem pool(layout.page_bytes()), table(4);
  NIBBLE_CUDA_CHECK(cudaMemset(table.p, 0, 4));
  std::vector<int32_t> work;
  for (int64_t s = 0; s < batch; ++s) {
    for (int64_t q0 = 0; q0 < seq; q0 += cuda::kChunkQueryTile) work.insert(work.end(), {static_cast<int32_t>(s), static_cast<int32_t>(q0)});
  }
  DeviceMem d_work(work.size() * 4);
  NIBBLE_CUDA_CHECK(cudaMemcpy(d_work.p, work.data(), work.size() * 4, cudaMemcpyHostToDevice));
  const cuda::ChunkAttentionParams params{.q = step.q.as<float>(),
                                          .k = step.k.as<float>(),
                                          .v = step.v.as<float>(),
                                          .out = step.out.as<float>(),
                                          .work = d_work.as<int32_t>(),
                                          .num_work = static_cast<int64_t>(work.size() / 2),
                                          .seq_info = step.seq_info.as<int32_t>(),
                                          .num_seqs = batch,
                                          .pool = pool.as<uint8_t>(),
                                          .page_tables = table.as<int32_t>(),
                                          .max_pages_per_seq = 1,
                                          .page_bytes = layout.page_bytes(),
                                          .k_layout = layout.k(0),
                                          .v_layout = layout.v(0),
                                          .num_q_heads = kQHeads,
                                          .num_kv_heads = kKvHeads,
                                          .head_dim = head_dim,
                                          .softmax_scale = 1.0f / std::sqrt(static_cast<float>(head_dim))};
  return median_seconds([&] { cuda::chunk_attention(params, nullptr); });
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false, tiles = false, extend = false;
  std::string json_path;
  std::vector<nibble::quant::KvDtype> extend_formats = {nibble::quant::KvDtype::kBF16, nibble::quant::KvDtype::kFP8,
                                                        nibble::quant::KvDtype::kNVFP4, nibble::quant::KvDtype::kK8V4};
  std::vector<int> extend_groups = {4};
  std::vector<nibble::bench::ExtendShape> extend_shapes;  // empty: the default sweep
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--quick") {
      quick = true;
    } else if (arg == "--tiles") {
      tiles = true;
    } else if (arg == "--extend") {
      extend = true;
    } else if (arg == "--json" && i + 1 < argc) {
      json_path = argv[++i];
    } else if ((arg == "--extend-formats" || arg == "--extend-gqa" || arg == "--extend-shapes") && i + 1 < argc) {
      try {  // decode_bench_args.h's list parsers; their errors name the flag
        if (arg == "--extend-formats") {
          extend_formats = nibble::bench::parse_formats(argv[++i], arg);
        } else if (arg == "--extend-gqa") {
          extend_groups = nibble::bench::parse_groups(argv[++i], arg);
        } else {
          extend_shapes = nibble::bench::parse_extend_shapes(argv[++i], arg);
        }
      } catch (const nibble::Error& e) {
        fmt::print(stderr, "bench_prefill_attention: {}\n", e.what());
        return 2;
      }
    } else {
      fmt::print(stderr,
                 "usage: {} [--quick] [--tiles] [--extend] [--extend-formats bf16,fp8,...] [--extend-gqa 4,8,...] "
                 "[--extend-shapes PREFIX:CHUNK,...] [--json FILE]\n"
                 "unknown argument '{}'\n",
                 argv[0], arg);
      return 2;
    }
  }
  cudaDeviceProp prop{};
  NIBBLE_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  fmt::print("device: {} ({} SMs)\n", prop.name, prop.multiProcessorCount);
  const double gemm = gemm_tflops();
  fmt::print("cuBLAS bf16 GEMM 8192x8192x8192 (f32 accumulate): {:.0f} TFLOP/s (practical ceiling, this run)\n", gemm);
  fmt::print("nominal dense bf16 peak: {:.0f} TFLOP/s (datasheet figure, not measured)\n", kNominalPeakTflops);
  fmt::print("causal FLOPs counted as 4 * seq^2 * head_dim * q_heads / 2 per sequence; {} q heads / {} kv heads; "
             "batch = {} / seq\n",
             kQHeads, kKvHeads, kStepTokens);
  fmt::print("op = f32->bf16 K/V conversion + attention kernel; TFLOP/s and fractions use the kernel time\n\n");

  nlohmann::json json = {{"device", prop.name}, {"gemm_tflops", gemm}, {"rows", nlohmann::json::array()}};
  if (extend) {
    nibble::bench::run_extend_bench(gemm, quick, extend_formats, extend_groups, extend_shapes, json);
    if (!json_path.empty()) std::ofstream(json_path) << json.dump(2) << "\n";
    return 0;
  }
  const std::vector<int64_t> seqs = quick ? std::vector<int64_t>{1024, 8192}
                                          : std::vector<int64_t>{1024, 2048, 4096, 8192, 16384};
  for (const int64_t head_dim : {128, 64}) {
    fmt::print("head_dim {} (tile: {})\n", head_dim, cuda::prefill_tile_name(head_dim, 0));
    fmt::print("  {:>6} {:>5} {:>10} {:>10} {:>8} {:>8} {:>8}\n", "seq", "batch", "op ms", "kernel ms", "TFLOP/s",
               "%peak", "%cuBLAS");
    for (const int64_t seq : seqs) {
      const Row r = measure(head_dim, seq, 0);
      fmt::print("  {:>6} {:>5} {:>10.3f} {:>10.3f} {:>8.1f} {:>7.1f}% {:>7.1f}%\n", r.seq, r.batch, r.op_s * 1e3,
                 r.kernel_s * 1e3, r.tflops, 100.0 * r.tflops / kNominalPeakTflops, 100.0 * r.tflops / gemm);
      json["rows"].push_back({{"head_dim", head_dim}, {"seq", seq}, {"batch", r.batch}, {"op_ms", r.op_s * 1e3},
                              {"kernel_ms", r.kernel_s * 1e3}, {"tflops", r.tflops}});
    }
  }
  if (tiles) {
    fmt::print("\ntile configurations, kernel TFLOP/s (the default is the tile named in the tables above):\n");
    for (const int64_t head_dim : {128, 64, 256}) {
      for (int tile = 1; tile <= cuda::prefill_tile_count(head_dim); ++tile) {
        std::string line;
        for (const int64_t seq : {2048, 8192}) {
          const Row r = measure(head_dim, seq, tile);
          line += fmt::format(" {:>5}:{:6.1f}", seq, r.tflops);
          json["tiles"].push_back({{"head_dim", head_dim}, {"tile", tile}, {"seq", seq}, {"tflops", r.tflops}});
        }
        fmt::print("  head_dim {:>3} tile {} [{}]\n   {}\n", head_dim, tile, cuda::prefill_tile_name(head_dim, tile),
                   line);
      }
    }
  }
  // The CUDA-core f32 chunk kernel on one shape, for scale (it ran prefill before this kernel).
  {
    const int64_t seq = 2048, batch = 1;
    const double s = chunk_kernel_seconds(128, seq, batch);
    const double flops = batch * 4.0 * seq * seq * 128 * kQHeads / 2.0;
    fmt::print("\nCUDA-core f32 chunk kernel, head_dim 128, seq {} x {}: {:.3f} ms, {:.1f} TFLOP/s\n", seq, batch,
               s * 1e3, flops / s * 1e-12);
    json["chunk_kernel_seq2048_ms"] = s * 1e3;
  }
  if (!json_path.empty()) std::ofstream(json_path) << json.dump(2) << "\n";
  return 0;
}
