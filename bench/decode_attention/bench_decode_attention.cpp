// bench_decode_attention: paged decode attention and the KV write path on the GPU, per KV format.
// Prints, per shape, each format's median time, achieved GB/s (KV bytes incl. scales + q + output)
// and the fraction of the read bandwidth measured in the same run, plus the nvfp4/fp8 and fp8/bf16
// time ratios; then the write path in GB/s (f32 input read + stored bytes).
//
//   bench_decode_attention [--quick] [--json FILE] [--shapes G:CTX:B,...] [--formats bf16,fp8,...]
//                          [--no-write | --write-only]
//
// --shapes times only the listed (GQA group, context, batch) shapes instead of the sweep; --formats
// only the listed KV formats (the ratios need nvfp4+fp8 / fp8+bf16); --no-write / --write-only
// skip the write path / the decode table.
//
// Each timed call reads a different copy of the KV pages (copies rotate so the working set is
// >= 4x L2), so the numbers are DRAM numbers, not L2 numbers. KV contents are a constant byte
// pattern (finite in every format): timing does not depend on values.
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "device_mem.h"
#include "backend/cuda/decode_attention.h"
#include "backend/cuda/kv_write.h"
#include "cache/page_layout.h"
#include "quant/kv_format.h"

namespace nibble::bench {
double time_read(const void* data, int64_t bytes, unsigned* sink, int sms, int reps);  // read_bandwidth.cu
}

namespace {

using namespace nibble;
using quant::KvDtype;

constexpr int kHeadDim = 128;
constexpr int kPageSize = 64;
constexpr int kKvHeads = 8;

struct Device {
  int sms = 0;
  int64_t l2_bytes = 0;
  size_t free_bytes = 0;
  std::string name;
};

Device query_device() {
  Device d;
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

using nibble::bench::DeviceMem;

// Median seconds per call of fn(rep) over `samples` samples of `reps` calls each (after a warm-up).
template <typename Fn>
double median_seconds(Fn&& fn, int copies) {
  cudaEvent_t start, stop;
  NIBBLE_CUDA_CHECK(cudaEventCreate(&start));
  NIBBLE_CUDA_CHECK(cudaEventCreate(&stop));
  for (int i = 0; i < 3; ++i) fn(i % copies);
  NIBBLE_CUDA_CHECK(cudaEventRecord(start));
  fn(0);
  NIBBLE_CUDA_CHECK(cudaEventRecord(stop));
  NIBBLE_CUDA_CHECK(cudaEventSynchronize(stop));
  float ms = 0;
  NIBBLE_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  const int reps = std::clamp(static_cast<int>(std::ceil(0.3 / std::max(ms, 1e-4f))), 1, 200);  // >= ~0.3 ms/sample
  std::vector<double> samples;
  int call = 1;
  for (int s = 0; s < 11; ++s) {
    NIBBLE_CUDA_CHECK(cudaEventRecord(start));
    for (int r = 0; r < reps; ++r) fn(call++ % copies);
    NIBBLE_CUDA_CHECK(cudaEventRecord(stop));
    NIBBLE_CUDA_CHECK(cudaEventSynchronize(stop));
    NIBBLE_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    samples.push_back(ms * 1e-3 / reps);
  }
  NIBBLE_CUDA_CHECK(cudaEventDestroy(start));
  NIBBLE_CUDA_CHECK(cudaEventDestroy(stop));
  std::nth_element(samples.begin(), samples.begin() + samples.size() / 2, samples.end());
  return samples[samples.size() / 2];
}

struct DecodeResult {
  double seconds = 0;
  double gbps = 0;
};

// Decode attention for `batch` sequences of `ctx` tokens; nullopt-like (seconds 0) if it does not fit.
DecodeResult bench_decode(const Device& dev, KvDtype dtype, int group, int64_t ctx, int64_t batch) {
  const cache::PageLayout layout({.num_layers = 1, .kv_heads = kKvHeads, .head_dim = kHeadDim}, dtype, kPageSize);
  const int64_t pages_per_seq = (ctx + kPageSize - 1) / kPageSize;
  const int64_t pages_per_copy = pages_per_seq * batch;
  const int64_t copy_bytes = pages_per_copy * layout.page_bytes();
  const int64_t budget = static_cast<int64_t>(dev.free_bytes * 0.6);
  if (copy_bytes > budget) return {};
  const int copies = static_cast<int>(std::clamp<int64_t>((4 * dev.l2_bytes + copy_bytes - 1) / copy_bytes, 1,
                                                          std::min<int64_t>(64, budget / copy_bytes)));
  const int64_t num_q_heads = static_cast<int64_t>(kKvHeads) * group;

  DeviceMem pool(static_cast<size_t>(copies) * copy_bytes);
  NIBBLE_CUDA_CHECK(cudaMemset(pool.p, 0x33, static_cast<size_t>(copies) * copy_bytes));
  // Page tables per copy [copies][batch][pages_per_seq]; pages of a sequence scattered (strided).
  std::vector<int32_t> tables(copies * batch * pages_per_seq);
  for (int c = 0; c < copies; ++c)
    for (int64_t s = 0; s < batch; ++s)
      for (int64_t p = 0; p < pages_per_seq; ++p)
        tables[(c * batch + s) * pages_per_seq + p] = static_cast<int32_t>(c * pages_per_copy + p * batch + s);
  DeviceMem d_tables(tables.size() * 4);
  NIBBLE_CUDA_CHECK(cudaMemcpy(d_tables.p, tables.data(), tables.size() * 4, cudaMemcpyHostToDevice));

  const std::vector<int32_t> lens(batch, static_cast<int32_t>(ctx));
  const cuda::DecodeSplitPlan plan = cuda::plan_decode_splits(
      {.seq_lens = lens, .num_kv_heads = kKvHeads, .group_chunks = cuda::decode_group_chunks(num_q_heads, kKvHeads),
       .num_sms = dev.sms,
       .blocks_per_sm = cuda::decode_blocks_per_sm(layout.k(0).format, layout.v(0).format, kHeadDim)});
  const std::vector<int32_t> packed = plan.packed();
  DeviceMem d_plan(packed.size() * 4);
  NIBBLE_CUDA_CHECK(cudaMemcpy(d_plan.p, packed.data(), packed.size() * 4, cudaMemcpyHostToDevice));
  DeviceMem partial_out(cuda::decode_partial_out_floats(plan, num_q_heads, kHeadDim) * 4);
  DeviceMem partial_lse(static_cast<size_t>(plan.num_work) * num_q_heads * 4);
  const int64_t q_elems = batch * num_q_heads * kHeadDim;
  DeviceMem q(q_elems * 4), out(q_elems * 4);
  NIBBLE_CUDA_CHECK(cudaMemset(q.p, 0x3C, q_elems * 4));

  cuda::DecodeAttentionParams params{.q = q.p, .out = out.as<float>(), .pool = pool.as<uint8_t>(),
                                     .page_tables = d_tables.as<int32_t>(), .plan_device = d_plan.as<int32_t>(),
                                     .plan = &plan, .partial_out = partial_out.as<float>(),
                                     .partial_lse = partial_lse.as<float>(), .num_q_heads = num_q_heads,
                                     .max_pages_per_seq = pages_per_seq, .page_bytes = layout.page_bytes(),
                                     .k_layout = layout.k(0), .v_layout = layout.v(0),
                                     .softmax_scale = 1.0f / std::sqrt(static_cast<float>(kHeadDim))};
  const double seconds = median_seconds(
      [&](int copy) {
        params.page_tables = d_tables.as<int32_t>() + copy * batch * pages_per_seq;
        cuda::decode_attention(params, nullptr);
      },
      copies);
  const double bytes = static_cast<double>(batch) * ctx * layout.bytes_per_token_per_layer() + 2.0 * q_elems * 4;
  return {seconds, bytes / seconds * 1e-9};
}

// g: the global scale of K and V (1 = SGLang's recipe; a power of two takes the exact multiply path,
// anything else the true division).
double bench_write(KvDtype dtype, int64_t tokens, float g, double* gbps) {
  const cache::PageLayout layout({.num_layers = 1, .kv_heads = kKvHeads, .head_dim = kHeadDim}, dtype, kPageSize);
  const int64_t pages = (tokens + kPageSize - 1) / kPageSize;
  DeviceMem pool(pages * layout.page_bytes());
  const int64_t elems = tokens * kKvHeads * kHeadDim;
  DeviceMem k(elems * 4), v(elems * 4);
  NIBBLE_CUDA_CHECK(cudaMemset(k.p, 0x3C, elems * 4));
  NIBBLE_CUDA_CHECK(cudaMemset(v.p, 0xBC, elems * 4));
  std::vector<int32_t> positions(tokens), seqs(tokens, 0), table(pages);
  std::iota(positions.begin(), positions.end(), 0);
  std::iota(table.begin(), table.end(), 0);
  DeviceMem d_pos(tokens * 4), d_seq(tokens * 4), d_table(pages * 4);
  NIBBLE_CUDA_CHECK(cudaMemcpy(d_pos.p, positions.data(), tokens * 4, cudaMemcpyHostToDevice));
  NIBBLE_CUDA_CHECK(cudaMemcpy(d_seq.p, seqs.data(), tokens * 4, cudaMemcpyHostToDevice));
  NIBBLE_CUDA_CHECK(cudaMemcpy(d_table.p, table.data(), pages * 4, cudaMemcpyHostToDevice));
  const cuda::KvWriteParams params{.k = k.p, .v = v.p, .positions = d_pos.as<int32_t>(),
                                   .row_sequence = d_seq.as<int32_t>(), .page_tables = d_table.as<int32_t>(),
                                   .pool = pool.as<uint8_t>(), .num_tokens = tokens, .max_pages_per_seq = pages,
                                   .page_bytes = layout.page_bytes(), .k_layout = layout.k(0), .v_layout = layout.v(0),
                                   .k_global_scale = g, .v_global_scale = g};
  const double seconds = median_seconds([&](int) { cuda::kv_write(params, nullptr); }, 1);
  const double bytes = 2.0 * elems * 4 + static_cast<double>(tokens) * layout.bytes_per_token_per_layer();
  *gbps = bytes / seconds * 1e-9;
  return seconds;
}

struct Shape {
  int group;
  int64_t ctx;
  int64_t batch;
};

// "4:32768:32,8:1024:256" -> shapes; throws on anything else.
std::vector<Shape> parse_shapes(const std::string& text) {
  std::vector<Shape> shapes;
  size_t at = 0;
  while (at <= text.size()) {
    const size_t end = std::min(text.find(',', at), text.size());
    const std::string item = text.substr(at, end - at);
    Shape s{};
    char tail = 0;
    if (std::sscanf(item.c_str(), "%d:%ld:%ld%c", &s.group, &s.ctx, &s.batch, &tail) != 3 || s.group < 1 ||
        s.ctx < 1 || s.batch < 1) {
      throw std::runtime_error(fmt::format("--shapes: '{}' is not GROUP:CTX:BATCH (positive integers)", item));
    }
    shapes.push_back(s);
    at = end + 1;
  }
  return shapes;
}

std::vector<KvDtype> parse_formats(const std::string& text) {
  std::vector<KvDtype> formats;
  size_t at = 0;
  while (at <= text.size()) {
    const size_t end = std::min(text.find(',', at), text.size());
    formats.push_back(quant::parse_kv_dtype(text.substr(at, end - at)));
    at = end + 1;
  }
  return formats;
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false, run_decode = true, run_write = true;
  std::string json_path, shapes_arg, formats_arg;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--quick") {
      quick = true;
    } else if (arg == "--json" && i + 1 < argc) {
      json_path = argv[++i];
    } else if (arg == "--shapes" && i + 1 < argc) {
      shapes_arg = argv[++i];
    } else if (arg == "--formats" && i + 1 < argc) {
      formats_arg = argv[++i];
    } else if (arg == "--no-write") {
      run_write = false;
    } else if (arg == "--write-only") {
      run_decode = false;
    } else {
      fmt::print(stderr,
                 "usage: {} [--quick] [--json FILE] [--shapes G:CTX:B,...] [--formats bf16,fp8,nvfp4,k8v4] "
                 "[--no-write | --write-only]\nunknown argument '{}'\n",
                 argv[0], arg);
      return 2;
    }
  }
  try {
    const Device dev = query_device();
    // Practical read bandwidth: a read-only pass over 2 GiB, and a device-to-device copy (read+write).
    const int64_t probe_bytes = int64_t{2} << 30;
    DeviceMem probe(probe_bytes), probe2(probe_bytes), sink(16);
    NIBBLE_CUDA_CHECK(cudaMemset(probe.p, 1, probe_bytes));
    const double read_s = bench::time_read(probe.p, probe_bytes, sink.as<unsigned>(), dev.sms, 6);
    const double read_gbps = probe_bytes / read_s * 1e-9;
    const double copy_s = median_seconds(
        [&](int) { NIBBLE_CUDA_CHECK(cudaMemcpyAsync(probe2.p, probe.p, probe_bytes, cudaMemcpyDeviceToDevice)); }, 1);
    const double copy_gbps = 2.0 * probe_bytes / copy_s * 1e-9;
    fmt::print("device: {} ({} SMs, L2 {} MiB)\nread bandwidth (read-only kernel): {:.0f} GB/s; "
               "device-to-device copy (read+write): {:.0f} GB/s\n",
               dev.name, dev.sms, dev.l2_bytes >> 20, read_gbps, copy_gbps);
    fmt::print("decode attention, head_dim {}, page {}, {} KV heads, q f32, output f32; GB/s counts KV bytes "
               "(incl. scales) + q + output; %BW = of the read bandwidth above\n\n",
               kHeadDim, kPageSize, kKvHeads);

    nlohmann::json report;
    report["device"] = dev.name;
    report["read_gbps"] = read_gbps;
    report["copy_gbps"] = copy_gbps;
    const std::vector<KvDtype> dtypes = formats_arg.empty()
                                            ? std::vector<KvDtype>{KvDtype::kBF16, KvDtype::kFP8, KvDtype::kNVFP4,
                                                                   KvDtype::kK8V4}
                                            : parse_formats(formats_arg);
    std::vector<Shape> shapes;
    if (!shapes_arg.empty()) {
      shapes = parse_shapes(shapes_arg);
    } else {
      const std::vector<int64_t> contexts = quick ? std::vector<int64_t>{4096, 32768}
                                                  : std::vector<int64_t>{1024, 4096, 16384, 32768, 131072};
      const std::vector<int64_t> batches = quick ? std::vector<int64_t>{1, 32} : std::vector<int64_t>{1, 8, 32, 128, 256};
      for (int group : {4, 8})
        for (int64_t ctx : contexts)
          for (int64_t batch : batches) shapes.push_back({group, ctx, batch});
    }
    std::string header = fmt::format("{:>4} {:>7} {:>6} |", "gqa", "ctx", "batch");
    for (KvDtype d : dtypes) header += fmt::format(" {:>22} |", fmt::format("{} us GB/s %BW", quant::kv_dtype_name(d)));
    header += " nvfp4/fp8 fp8/bf16";
    if (run_decode) fmt::print("{}\n", header);
    for (const Shape& shape : run_decode ? shapes : std::vector<Shape>{}) {
      const int group = shape.group;
      const int64_t ctx = shape.ctx, batch = shape.batch;
      std::map<KvDtype, DecodeResult> results;
      std::string line = fmt::format("{:>4} {:>7} {:>6} |", group, ctx, batch);
      for (KvDtype d : dtypes) {
        const DecodeResult r = bench_decode(dev, d, group, ctx, batch);
        results[d] = r;
        line += r.seconds > 0 ? fmt::format(" {:>8.1f} {:>6.0f} {:>5.1f}% |", r.seconds * 1e6, r.gbps,
                                            100.0 * r.gbps / read_gbps)
                              : fmt::format(" {:>22} |", "(does not fit)");
        if (r.seconds > 0) {
          report["decode"].push_back({{"dtype", quant::kv_dtype_name(d)}, {"group", group}, {"ctx", ctx},
                                      {"batch", batch}, {"seconds", r.seconds}, {"gbps", r.gbps},
                                      {"fraction_of_read_bw", r.gbps / read_gbps}});
        }
      }
      auto ratio = [&](KvDtype a, KvDtype b) {
        return results[a].seconds > 0 && results[b].seconds > 0 ? results[a].seconds / results[b].seconds : NAN;
      };
      line += fmt::format(" {:>9.3f} {:>8.3f}", ratio(KvDtype::kNVFP4, KvDtype::kFP8), ratio(KvDtype::kFP8, KvDtype::kBF16));
      fmt::print("{}\n", line);
      std::fflush(stdout);
    }

    if (run_write) {
      fmt::print("\nwrite path (f32 K/V in, quantize + store), {} KV heads, head_dim {}; GB/s = input + stored bytes\n",
                 kKvHeads, kHeadDim);
      struct WriteShape {
        int64_t tokens;
        float g;
      };
      for (const WriteShape w : {WriteShape{256, 1.0f}, WriteShape{4096, 1.0f}, WriteShape{65536, 1.0f},
                                 WriteShape{65536, 0.37f}}) {
        std::string line = fmt::format("tokens {:>6} g {:<4} |", w.tokens, w.g);
        for (KvDtype d : dtypes) {
          double gbps = 0;
          const double s = bench_write(d, w.tokens, w.g, &gbps);
          line += fmt::format(" {} {:.1f} us {:.0f} GB/s ({:.1f}%) |", quant::kv_dtype_name(d), s * 1e6, gbps,
                              100.0 * gbps / read_gbps);
          report["write"].push_back({{"dtype", quant::kv_dtype_name(d)}, {"tokens", w.tokens}, {"g", w.g},
                                     {"seconds", s}, {"gbps", gbps}, {"fraction_of_read_bw", gbps / read_gbps}});
        }
        fmt::print("{}\n", line);
      }
    }
    if (!json_path.empty()) {
      std::ofstream(json_path) << report.dump(2) << "\n";
      fmt::print("wrote {}\n", json_path);
    }
  } catch (const std::exception& e) {
    fmt::print(stderr, "bench_decode_attention: {}\n", e.what());
    return 1;
  }
  return 0;
}
