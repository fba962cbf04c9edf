// Decode steps of a Llama-3-8B-shaped model on the CUDA backend (bf16 weights): the whole forward
// pass (model/transformer.cpp through runtime::run_forward_step, as the engine runs it), one token
// per sequence and step, with the KV cache at a given context; batch 1, or --batch N sequences
// decoding together (each with its own pages at the same context).
//
//   geometry   32 layers, hidden 4096, 32 q / 8 KV heads, head_dim 128, intermediate 14336,
//              vocab 128256 (Llama-3-8B), untied LM head; --model takes another model's sizes
//              (kModels: layers, hidden, intermediate, heads, vocab) on the same Llama layer
//              (Qwen's per-head q/k RMSNorm and biases left out, the LM head untied: the products'
//              shapes are what differ);
//   weights    random, uniform in ±0.03, generated on the host once as float32 and uploaded by the
//              backend's own upload_matrix (rounded to bf16 on the device); every layer gets its own
//              device copy, so each step reads all 15 GB of them. No checkpoint file;
//   KV cache   a pool covering the context (zero pages: decode reads them as it would real ones);
//              decoding starts at position context - 1 and advances one position per step. Every
//              KV format and context's pool lives at the start of ONE device buffer allocated
//              before the first step (sized for the largest; zeroed per case), so that no case reads
//              pages wherever the allocator put a pool after a larger one was freed (fp8 1K at
//              batch 8 measured 6.20 ms after bf16's 32K pool had been freed, 5.79 run first);
//   timing     wall clock per step (plan, launches or graph replay, then the token sampled on the
//              device or the logits copied back: the latency a caller sees), median over --steps
//              steps after 3 warm-up steps (eager, capture, replay);
//   modes      (default 9, 6, 0, 1, 2, 3) 0..5: CUDA graph + GEMV with the logits copied back,
//              eager, graph + cuBLAS, graph + GEMV without programmatic dependent launch (gemv.h),
//              graph + GEMV with RoPE and the KV write as two plain launches (CudaBackend::set_small_op_fusion(false): the state before), graph +
//              GEMV with the split merge's early trigger off (CudaBackend::set_merge_early_trigger),
//              graph + GEMV with the token drawn on the device (greedy, runtime::run_forward_step_sampled:
//              the engine's generation step without overlap, a few bytes back instead of the
//              vocabulary's logits), 9: the engine's step (overlapped),
//              mode 6 with decode attention copying all its KV after waiting for the KV write
//              (CudaBackend::set_decode_prefix_before_wait(false): the state before);
//   products   each product of a decode step alone (single and fused, L2 flushed before each), at
//              batch 1 or the --product-rows batches, the GEMV (gemv.h, the default) against cuBLAS,
//              in GB/s and as a fraction of the read bandwidth;
//   roofline   the device's read bandwidth measured in the same run (bench/common/read_bandwidth.h); the
//              weight-read limit = bytes of weights read per token / bandwidth (the LM head
//              included, the embedding table not: decode reads one row of it), and the weights+KV
//              limit adds the KV bytes the step reads (context × bytes per token of all layers).
//
//   breakdown  the ops of an eager batch-1 step (graphs off; sequence 0 of --batch) timed one by one
//              with CUDA events (op_timer.h), for the first KV format and context: µs per op, and
//              GB/s for the products.
//
//   timeline   --timeline: after the modes, for each KV format and context, --steps steps of
//              the sequential step (mode 6), then of the overlapped one (mode 9), traced by CUPTI
//              (kernel_timeline.h): per kernel of the
//              graph, how far it moved the end of the step's kernel chain, and the GPU's idle time
//              between steps; then the same steps' host time per seam call (OpTimer's host timing).
//
//   ablation   --skip: mode 0 again with some ops dropped (not launched at all: the graph holds only
//              the rest), their cost inside the graph = the difference. The logits are then not
//              the model's; the rows say so.
//
//   bench_model_decode [--model llama3-8b|qwen3-8b|...] [--layers N] [--contexts 1024,32768]
//                      [--kv bf16,nvfp4] [--steps 48] [--batch 1]
//                      [--modes 0,...,10] [--no-products] [--product-rows 1,4,8] [--no-breakdown]
//                      [--skip attention,rope_kv_write,both] [--timeline] [--mixed SEED]
//   --mixed SEED: the batch's contexts drawn log-uniformly from [context / 16, context]
//          (bench/common/mixed_lengths.h, as the decode benchmark's --mixed), a serving batch's mix;
//          the context column is then the longest possible, the weights+KV limit counts the drawn.
//   modes: 0 graph + GEMV, 1 eager, 2 graph + cuBLAS, 3 graph + GEMV without PDL, 4 graph + GEMV,
//          RoPE and KV write unfused, 5 graph + GEMV, the decode merge triggering the o GEMV at its
//          end instead of its start, 6 graph + GEMV, the token sampled on the device (as the engine
//          generates with EngineOptions::overlap off; modes 0-5 copy the logits to the host), 7 as
//          6 with every KV copy of the decode attention after its wait for the KV write, 8 as 6
//          with the decode blocks not
//          spread (as many per SM as fit: CudaBackend::set_decode_spread_blocks(false)), 9 as 6
//          overlapped as the engine runs it (EngineOptions::overlap): each step launched, its token
//          fed from the previous step's draw on the device, before that draw is read back; the
//          time is the interval between two tokens' arrivals on the host; 10 as 9 with the GEMV
//          for every product it takes (CudaBackend::set_gemv_everywhere), not only up to the rows
//          where it outpaces cuBLAS (gemv.h, gemv_faster_rows)
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "cache/kv_pool.h"
#include "cache/kv_storage.h"
#include "common/error.h"
#include "config/model_config.h"
#include "model/transformer.h"
#include "model/weights.h"
#include "quant/kv_format.h"
#include "kernel_timeline.h"
#include "op_timer.h"
#include "mixed_lengths.h"
#include "read_bandwidth.h"
#include "runtime/forward_step.h"

namespace nibble::bench {

namespace {

// A pool's storage at the start of the run's one KV buffer (not owned; see the file comment).
class SharedKvStorage final : public cache::KvStorage {
 public:
  SharedKvStorage(backend::Buffer& buffer, int64_t bytes) : buffer_(buffer), bytes_(bytes) {
    NIBBLE_CHECK(bytes >= 0 && bytes <= buffer.bytes(), "a pool of {} bytes in a KV buffer of {}", bytes,
                 buffer.bytes());
  }
  uint8_t* data() override { return static_cast<uint8_t*>(buffer_.data()); }
  const uint8_t* data() const override { return static_cast<const uint8_t*>(buffer_.data()); }
  int64_t bytes() const override { return bytes_; }
  bool host_accessible() const override { return false; }

 private:
  backend::Buffer& buffer_;
  int64_t bytes_;
};

// --model: the sizes of the models whose products the GEMV's tile build was measured on (gemv.h).
struct ModelSizes {
  const char* name;
  const char* label;
  int64_t layers, hidden, intermediate, heads, kv_heads, vocab;
};
constexpr ModelSizes kModels[] = {
    {"llama3-8b", "Llama-3-8B", 32, 4096, 14336, 32, 8, 128256},
    {"qwen3-8b", "Qwen3-8B", 36, 4096, 12288, 32, 8, 151936},
    {"qwen2.5-7b", "Qwen2.5-7B", 28, 3584, 18944, 28, 4, 152064},
    {"llama3.2-3b", "Llama-3.2-3B", 28, 3072, 8192, 24, 8, 128256},
    {"qwen3-4b", "Qwen3-4B", 36, 2560, 9728, 32, 8, 151936},
    {"qwen3-14b", "Qwen3-14B", 40, 5120, 17408, 40, 8, 151936},
};
const ModelSizes* find_model(const std::string& name) {
  for (const ModelSizes& m : kModels) {
    if (name == m.name) return &m;
  }
  return nullptr;
}

struct Args {
  int64_t layers = 0;               // 0: the model's own depth
  std::string model = "llama3-8b";  // --model: a name of kModels
  std::vector<int64_t> contexts{1024, 32768};
  std::vector<quant::KvDtype> kv{quant::KvDtype::kBF16, quant::KvDtype::kNVFP4};
  int steps = 48;
  int64_t batch = 1;  // sequences per decode step
  bool products = true;  // the per-product table (--no-products: only the decode steps, e.g. under ncu)
  std::vector<int64_t> product_rows{1};  // activation rows of the per-product table (a decode batch)
  bool breakdown = true;  // the per-op table of an eager step
  std::vector<int> modes{9, 6, 0, 1, 2, 3};  // 9 first: the engine's generation step, the headline figure
  // Ablations: after the modes, each KV format and context runs mode 0 again with these ops dropped
  // (OpTimer::Skip), to show what they cost inside the graph. Timing only: the logits are not the model's.
  std::vector<std::string> skips;
  bool timeline = false;  // --timeline: the CUPTI kernel timeline of the engine's step (kernel_timeline.h)
  // --mixed SEED: the batch's contexts drawn log-uniformly from [context / 16, context] (the decode
  // benchmark's --mixed, bench/common/mixed_lengths.h) instead of all `context`; 0 = all alike.
  uint64_t mixed_seed = 0;
};

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  size_t begin = 0;
  while (begin <= s.size()) {
    const size_t end = std::min(s.find(',', begin), s.size());
    if (end > begin) out.push_back(s.substr(begin, end - begin));
    begin = end + 1;
  }
  return out;
}

Args parse_args(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      NIBBLE_CHECK(i + 1 < argc, "{} needs a value", arg);
      return argv[++i];
    };
    if (arg == "--layers") {
      a.layers = std::stoll(value());
    } else if (arg == "--model") {
      a.model = value();
      NIBBLE_CHECK(find_model(a.model) != nullptr,
                   "--model: '{}' is not llama3-8b, qwen3-8b, qwen2.5-7b, llama3.2-3b, qwen3-4b or qwen3-14b", a.model);
    } else if (arg == "--contexts") {
      a.contexts.clear();
      for (const std::string& c : split(value())) a.contexts.push_back(std::stoll(c));
    } else if (arg == "--kv") {
      a.kv.clear();
      for (const std::string& k : split(value())) a.kv.push_back(quant::parse_kv_dtype(k));
    } else if (arg == "--steps") {
      a.steps = std::stoi(value());
    } else if (arg == "--batch") {
      a.batch = std::stoll(value());
      NIBBLE_CHECK(a.batch >= 1 && a.batch <= 256, "--batch: {} is not in 1..256", a.batch);
    } else if (arg == "--no-products") {
      a.products = false;
    } else if (arg == "--product-rows") {
      a.product_rows.clear();
      for (const std::string& r : split(value())) {
        const int64_t rows = std::stoll(r);
        NIBBLE_CHECK(rows >= 1 && rows <= 64, "--product-rows: {} is not in 1..64", r);
        a.product_rows.push_back(rows);
      }
    } else if (arg == "--no-breakdown") {
      a.breakdown = false;
    } else if (arg == "--timeline") {
      a.timeline = true;
    } else if (arg == "--mixed") {
      const std::string v = value();
      NIBBLE_CHECK(!v.empty() && v.find_first_not_of("0123456789") == std::string::npos && v.size() <= 18 &&
                       std::stoull(v) > 0,
                   "--mixed: '{}' is not a positive integer seed", v);
      a.mixed_seed = std::stoull(v);
    } else if (arg == "--skip") {
      for (const std::string& k : split(value())) {
        NIBBLE_CHECK(k == "attention" || k == "rope_kv_write" || k == "both",
                     "--skip: '{}' is not attention, rope_kv_write or both", k);
        a.skips.push_back(k);
      }
    } else if (arg == "--modes") {
      a.modes.clear();
      for (const std::string& m : split(value())) {
        const int mode = std::stoi(m);
        NIBBLE_CHECK(mode >= 0 && mode <= 10, "--modes: {} is not one of 0..10", m);
        a.modes.push_back(mode);
      }
    } else {
      NIBBLE_FAIL("unknown argument '{}' (--model NAME --layers N --contexts a,b --kv bf16,nvfp4 --steps N --batch N "
                  "--modes 0,...,10 --no-products --product-rows 1,4,8 --no-breakdown "
                  "--skip attention,rope_kv_write,both --timeline --mixed SEED)",
                  arg);
    }
  }
  if (a.layers == 0) a.layers = find_model(a.model)->layers;
  NIBBLE_CHECK(a.layers > 0 && a.steps > 0 && !a.contexts.empty() && !a.kv.empty() && !a.modes.empty() &&
                   !a.product_rows.empty(),
               "bad arguments");
  return a;
}

// A model's sizes on the Llama layer (head_dim 128 for all of them).
config::ModelConfig model_config(const std::string& model, int64_t layers) {
  const ModelSizes& m = *find_model(model);
  config::ModelConfig c;
  c.architecture = config::Architecture::kLlama;
  c.model_type = "llama";
  c.vocab_size = m.vocab;
  c.hidden_size = m.hidden;
  c.intermediate_size = m.intermediate;
  c.num_layers = layers;
  c.num_heads = m.heads;
  c.num_kv_heads = m.kv_heads;
  c.head_dim = 128;
  c.max_position_embeddings = 131072;
  c.rms_norm_eps = 1e-5;
  c.rope_theta = 500000.0;
  c.layer_kinds.assign(static_cast<size_t>(layers), config::LayerKind::kFullAttention);
  return c;
}

// Host float32 values: uniform in ±0.03 from a per-thread splitmix stream.
std::unique_ptr<float[]> random_floats(int64_t n) {
  auto out = std::make_unique<float[]>(static_cast<size_t>(n));
  const int threads = std::max(1u, std::min(16u, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      uint64_t state = 0x9E3779B97F4A7C15ull * (t + 1);
      for (int64_t i = t; i < n; i += threads) {
        state += 0x9E3779B97F4A7C15ull;
        uint64_t z = state;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z ^= z >> 31;
        out[i] = (static_cast<float>(z >> 40) * (1.0f / 16777216.0f) - 0.5f) * 0.06f;
      }
    });
  }
  for (auto& th : pool) th.join();
  return out;
}

model::WeightTensor tensor(const char* name, std::vector<int64_t> shape, const float* data) {
  model::WeightTensor w;
  w.name = name;
  w.dtype = model::Dtype::kF32;
  w.shape = std::move(shape);
  w.f32 = data;
  return w;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Eager steps (graphs off, GEMV with PDL) with every op timed by events: the table (one row per op
// label, in the order of the forward pass, then the sum against the step's wall time), as text.
std::string breakdown_table(model::Transformer& tf, cache::KvPool& pool, const std::vector<int32_t>& pages, int64_t page_size,
                     int64_t context, int steps, double bandwidth, OpTimer& timer, backend::CudaBackend& cuda) {
  cuda.set_graphs_enabled(false);
  cuda.set_small_matmul(true);
  cuda.set_gemv_programmatic_launch(true);
  cuda.set_small_op_fusion(true);
  std::vector<double> wall;
  for (int step = 0; step < steps + 2; ++step) {
    const int64_t position = context - 1 + step;
    const int32_t token = static_cast<int32_t>(2000 + step);
    const backend::SequenceStep s{
        .first_position = position,
        .tokens = {&token, 1},
        .pages = {pages.data(), static_cast<size_t>((position + 1 + page_size - 1) / page_size)}};
    const bool timed = step >= 2;
    if (timed) timer.start_step();
    const auto begin = std::chrono::steady_clock::now();
    (void)runtime::run_forward_step(tf, pool, quant::Rotation::kNone, {&s, 1});
    if (timed) {
      wall.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count());
      timer.stop_step();
    }
  }
  cuda.set_graphs_enabled(true);
  struct Row {
    const std::string* label;
    double per_step, us;
    double weight_bytes;
  };
  std::vector<Row> rows;
  double total_us = 0;
  for (const std::string& label : timer.order()) {
    const OpTimer::OpTotals& t = timer.totals().at(label);
    rows.push_back({&label, static_cast<double>(t.calls) / static_cast<double>(timer.steps()), median(t.us),
                    t.weight_bytes_per_call});
    total_us += rows.back().us * rows.back().per_step;
  }
  std::string out = fmt::format(
      "\n# per-op breakdown: eager step (graphs off, events between ops), context {}, median of {} steps\n"
      "| op | calls/step | us/call | us/step | of step | weights MB | GB/s | of read bw |\n"
      "|---|---|---|---|---|---|---|---|\n",
      context, timer.steps());
  for (const Row& r : rows) {
    out += fmt::format("| {} | {:.0f} | {:.2f} | {:.1f} | {:.1f}% |", *r.label, r.per_step, r.us, r.us * r.per_step,
                       100.0 * r.us * r.per_step / total_us);
    if (r.weight_bytes > 0) {
      const double bytes_per_s = r.weight_bytes / (r.us * 1e-6);
      out += fmt::format(" {:.1f} | {:.0f} | {:.1f}% |\n", r.weight_bytes * 1e-6, bytes_per_s * 1e-9,
                         100.0 * bytes_per_s / bandwidth);
    } else {
      out += " | | |\n";
    }
  }
  out += fmt::format("# sum of op medians {:.3f} ms; eager step wall time (median, events on) {:.3f} ms\n",
                     total_us * 1e-3, median(wall) * 1e3);
  return out;
}

}  // namespace

int run(int argc, char** argv) {
  const Args args = parse_args(argc, argv);
  std::string command = "bench_model_decode";
  for (int i = 1; i < argc; ++i) command += std::string(" ") + argv[i];
  const config::ModelConfig cfg = model_config(args.model, args.layers);
  const int64_t h = cfg.hidden_size, inter = cfg.intermediate_size, d = cfg.head_dim;
  const int64_t qw = cfg.num_heads * d, kvw = cfg.num_kv_heads * d, vocab = cfg.vocab_size;

  const auto t0 = std::chrono::steady_clock::now();
  // One random buffer as large as the largest matrix; every matrix takes a prefix of it (values
  // repeat across layers, the device copies do not).
  const std::unique_ptr<float[]> values = random_floats(vocab * h);
  std::vector<float> ones(static_cast<size_t>(std::max(h, inter)), 1.0f);
  model::ModelWeights weights;
  weights.embed = tensor("embed", {vocab, h}, values.get());
  weights.lm_head = tensor("lm_head", {vocab, h}, values.get());
  weights.final_norm = tensor("final_norm", {h}, ones.data());
  for (int64_t l = 0; l < cfg.num_layers; ++l) {
    model::LayerWeights lw;
    lw.attn_norm = tensor("attn_norm", {h}, ones.data());
    lw.wq = tensor("wq", {qw, h}, values.get());
    lw.wk = tensor("wk", {kvw, h}, values.get());
    lw.wv = tensor("wv", {kvw, h}, values.get());
    lw.wo = tensor("wo", {h, qw}, values.get());
    lw.mlp_norm = tensor("mlp_norm", {h}, ones.data());
    lw.w_gate = tensor("w_gate", {inter, h}, values.get());
    lw.w_up = tensor("w_up", {inter, h}, values.get());
    lw.w_down = tensor("w_down", {h, inter}, values.get());
    weights.layers.push_back(std::move(lw));
  }
  std::unique_ptr<backend::Backend> be =
      backend::make_backend({.device = "cuda", .weights = backend::WeightPrecision::kBF16, .cuda_graphs = true});
  auto& cuda = dynamic_cast<backend::CudaBackend&>(*be);
  OpTimer timer(cuda);  // the model runs through it: pass-through until a breakdown step
  model::Transformer tf(cfg, weights, timer);
  const double setup_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  // Bytes of weights one decode step reads: every layer matrix and the LM head in bf16, the f32 norms.
  const int64_t layer_matrix = qw * h + 2 * kvw * h + h * qw + 3 * inter * h;
  const double weight_bytes = static_cast<double>((layer_matrix * cfg.num_layers + vocab * h) * 2 +
                                                  (2 * h * cfg.num_layers + h) * 4);
  const double bandwidth = measure_read_bandwidth(int64_t{4} << 30, 10);
  std::printf("# %s\n# model: %s shape, %lld layers, bf16 weights %.2f GB read per token; setup %.1f s\n",
              command.c_str(), find_model(args.model)->label,
              static_cast<long long>(cfg.num_layers), weight_bytes * 1e-9, setup_s);
  std::printf("# measured read bandwidth: %.0f GB/s (4 GiB buffer) -> weight-read limit %.3f ms/step\n",
              bandwidth * 1e-9, weight_bytes / bandwidth * 1e3);
  // The products of one decode step alone (batch 1, or --product-rows R: a step of R sequences), as
  // the forward pass calls them (the fused ones too): the GEMV (gemv.h, the default; up to 8 rows)
  // against cuBLAS (set_small_matmul(false): the fused products then run as their separate ops).
  // L2 is flushed before each timed call (a 256 MiB read), so every call reads its weights from
  // device memory; median of 20 calls, timed with events. The GEMV column is the kernel at every
  // batch size (set_gemv_everywhere), not the engine's routing (gemv.h, gemv_faster_rows); past its
  // rows (or its shared memory) both columns are cuBLAS.
  if (args.products) {
    cuda.set_gemv_everywhere(true);
    const int64_t max_rows = *std::max_element(args.product_rows.begin(), args.product_rows.end());
    auto x_buf = be->allocate(max_rows * inter * 4), out_buf = be->allocate(max_rows * vocab * 4);
    auto res_buf = be->allocate(max_rows * h * 4);
    auto s1 = be->allocate(max_rows * inter * 4), s2 = be->allocate(max_rows * inter * 4);
    auto s3 = be->allocate(max_rows * inter * 4);
    auto flush = be->allocate(int64_t{256} << 20), sink = be->allocate(16);
    std::vector<std::unique_ptr<backend::Buffer>> owners;
    auto upload = [&](int64_t n, int64_t k) {
      owners.emplace_back();
      return be->upload_matrix(values.get(), n, k, owners.back());
    };
    const backend::Matrix wq = upload(qw, h), wk = upload(kvw, h), wv = upload(kvw, h), wo = upload(h, qw);
    const backend::Matrix wg = upload(inter, h), wu = upload(inter, h), wd = upload(h, inter), lm = upload(vocab, h);
    int64_t r = 1;  // rows of the table being timed
    auto xh = [&] { return backend::Tensor{x_buf->floats(), r, h}; };
    auto xi = [&] { return backend::Tensor{x_buf->floats(), r, inter}; };
    auto out = [&](int64_t n) { return backend::Tensor{out_buf->floats(), r, n}; };
    auto scratch = [&](backend::Buffer& b, int64_t n) { return backend::Tensor{b.floats(), r, n}; };
    std::unique_ptr<backend::Buffer> gain_owner, normed = be->allocate(max_rows * h * 4);
    const backend::Vector gain = be->upload_vector(ones.data(), h, gain_owner);
    auto norm = [&] {
      return backend::Backend::InputNorm{.weight = gain, .eps = 1e-5f, .normed = {normed->floats(), r, h}};
    };
    struct Case {
      const char* name;
      int64_t n, k;  // weights read: n rows of k bf16
      std::function<void()> call;
    };
    const Case cases[] = {
        {"k or v", kvw, h, [&] { be->matmul(xh(), wk, {}, out(kvw)); }},
        {"q or o", qw, h, [&] { be->matmul(xh(), wq, {}, out(qw)); }},
        {"gate or up", inter, h, [&] { be->matmul(xh(), wg, {}, out(inter)); }},
        {"down", h, inter, [&] { be->matmul(xi(), wd, {}, out(h)); }},
        {"LM head", vocab, h, [&] { be->matmul(xh(), lm, {}, out(vocab)); }},
        {"RMSNorm + LM head", vocab, h,
         [&] {
           const backend::Vector no_bias{};
           const backend::Tensor o = out(vocab);
           const backend::Backend::InputNorm n = norm();
           be->matmul_shared_input(xh(), &n, std::span<const backend::Matrix>(&lm, 1),
                                   std::span<const backend::Vector>(&no_bias, 1),
                                   std::span<const backend::Tensor>(&o, 1));
         }},
        {"RMSNorm + q/k/v fused", qw + 2 * kvw, h,
         [&] {
           const backend::Matrix ws[] = {wq, wk, wv};
           const backend::Vector bs[] = {{}, {}, {}};
           const backend::Tensor os[] = {scratch(*s1, qw), scratch(*s2, kvw), scratch(*s3, kvw)};
           const backend::Backend::InputNorm n = norm();
           be->matmul_shared_input(xh(), &n, ws, bs, os);
         }},
        {"RMSNorm + gate/up + SwiGLU", 2 * inter, h,
         [&] {
           const backend::Tensor g = scratch(*s1, inter), u = scratch(*s2, inter);
           const backend::Backend::InputNorm n = norm();
           be->matmul_swiglu(xh(), &n, wg, wu, g, u, g);
         }},
        {"o + residual", h, qw,
         [&] { be->matmul_residual_add({x_buf->floats(), r, qw}, wo, out(h), scratch(*res_buf, h)); }},
        {"down + residual", h, inter, [&] { be->matmul_residual_add(xi(), wd, out(h), scratch(*res_buf, h)); }},
    };
    cudaEvent_t begin, end;
    cudaEventCreate(&begin);
    cudaEventCreate(&end);
    for (const int64_t rows : args.product_rows) {
      r = rows;
      std::printf("| product (%lld row%s) | weights [n, k] | MB | GEMV us | GEMV GB/s | of read bw | cuBLAS us | "
                  "cuBLAS GB/s |\n|---|---|---|---|---|---|---|---|\n",
                  static_cast<long long>(r), r == 1 ? "" : "s");
      double fused_us = 0;
      for (const Case& c : cases) {
        double us[2];
        for (const bool small : {true, false}) {
          cuda.set_small_matmul(small);
          std::vector<double> t;
          for (int rep = 0; rep < 21; ++rep) {
            read_through(flush->data(), int64_t{256} << 20, static_cast<unsigned*>(sink->data()), cuda.stream());
            cudaEventRecord(begin, cuda.stream());
            c.call();
            cudaEventRecord(end, cuda.stream());
            cudaEventSynchronize(end);
            float ms = 0;
            cudaEventElapsedTime(&ms, begin, end);
            if (rep > 0) t.push_back(ms * 1e3);
          }
          us[small ? 0 : 1] = median(t);
        }
        cuda.set_small_matmul(true);
        const double gb = static_cast<double>(c.n * c.k * 2) * 1e-9;
        std::printf("| %s | [%lld, %lld] | %.1f | %.1f | %.0f | %.1f%% | %.1f | %.0f |\n", c.name,
                    static_cast<long long>(c.n), static_cast<long long>(c.k), gb * 1e3, us[0], gb / (us[0] * 1e-6),
                    100.0 * gb * 1e9 / (us[0] * 1e-6) / bandwidth, us[1], gb / (us[1] * 1e-6));
        const std::string name = c.name;
        if (name.find('+') != std::string::npos && name.find("LM") == std::string::npos) fused_us += us[0];
      }
      std::printf("# %lld row%s: one layer's products as the forward pass calls them (RMSNorm + q/k/v, o + "
                  "residual, RMSNorm + gate/up + SwiGLU, down + residual): %.1f us GEMV; at the read bandwidth "
                  "%.1f us\n",
                  static_cast<long long>(r), r == 1 ? "" : "s", fused_us,
                  static_cast<double>(layer_matrix * 2) / bandwidth * 1e6);
    }
    cudaEventDestroy(begin);
    cudaEventDestroy(end);
    cuda.set_gemv_everywhere(false);
  }
  if (args.mixed_seed != 0) {
    std::printf("# contexts of each batch log-uniform in [context/16, context], seed %llu (--mixed)\n",
                static_cast<unsigned long long>(args.mixed_seed));
  }
  std::printf("| KV | context | batch | CUDA graph | ms/step | tokens/s | weight-read limit ms | of limit | "
              "weights+KV limit ms | of limit |\n|---|---|---|---|---|---|---|---|---|---|\n");
  std::fflush(stdout);

  std::string breakdown;  // the per-op table, printed last
  std::string timeline;   // the kernel timelines, printed after it
  const int64_t page_size = 16;
  const int64_t batch = args.batch;
  // Pages per sequence at a context, and a case's pool layout (validated as make_kv_pool does).
  auto pages_for = [&](int64_t context) { return (context + args.steps + 8 + page_size - 1) / page_size; };
  auto layout_for = [&](quant::KvDtype kv) {
    quant::validate_head_dim(kv, quant::Rotation::kNone, tf.config().head_dim);
    return cache::PageLayout(tf.kv_geometry(), kv, page_size);
  };
  // The pages of all sequences and the scratch page of padded graph steps (runtime/forward_step.h).
  auto pool_bytes = [&](quant::KvDtype kv, int64_t context) {
    return (batch * pages_for(context) + 1) * layout_for(kv).page_bytes();
  };
  int64_t kv_buffer_bytes = 0;
  for (const quant::KvDtype kv : args.kv) {
    for (const int64_t context : args.contexts) kv_buffer_bytes = std::max(kv_buffer_bytes, pool_bytes(kv, context));
  }
  const std::unique_ptr<backend::Buffer> kv_buffer = be->allocate(kv_buffer_bytes);
  for (const quant::KvDtype kv : args.kv) {
    for (const int64_t context : args.contexts) {
      const int64_t pages_needed = pages_for(context);  // per sequence
      const int64_t bytes = pool_bytes(kv, context);
      NIBBLE_CUDA_CHECK(cudaMemsetAsync(kv_buffer->data(), 0, static_cast<size_t>(bytes), cuda.stream()));
      cache::KvPool pool(layout_for(kv), batch * pages_needed, std::make_unique<SharedKvStorage>(*kv_buffer, bytes));
      std::vector<int32_t> pages(static_cast<size_t>(batch * pages_needed));  // sequence i: [i, i + 1) · pages_needed
      std::iota(pages.begin(), pages.end(), 0);
      const double kv_bytes_per_token = static_cast<double>(pool.layout().page_bytes()) / page_size;
      // Median wall time of args.steps decode steps after 3 warm-up steps (eager, capture, replay).
      // sampled: the token drawn on the device (greedy) instead of the logits copied back.
      // The batch's contexts: all `context`, or drawn (--mixed); the KV bytes a step reads follow them.
      const std::vector<int32_t> seq_contexts = bench::mixed_lengths(context, batch, args.mixed_seed);
      int64_t batch_tokens = 0;
      for (const int32_t c : seq_contexts) batch_tokens += c;
      // The batch's steps `step` positions past their contexts: sequence i at seq_contexts[i] - 1 + step
      // reads its own pages; `token` holds their tokens (fed_row >= 0: each takes row i of the previous
      // step's draws instead).
      std::vector<int32_t> tokens(static_cast<size_t>(batch));
      auto batch_steps = [&](int64_t step, bool fed) {
        std::vector<backend::SequenceStep> steps;
        for (int64_t i = 0; i < batch; ++i) {
          const int64_t position = seq_contexts[static_cast<size_t>(i)] - 1 + step;
          steps.push_back({.first_position = position,
                           .tokens = {&tokens[static_cast<size_t>(i)], 1},
                           .pages = {pages.data() + i * pages_needed,
                                     static_cast<size_t>((position + 1 + page_size - 1) / page_size)},
                           .fed_row = fed ? static_cast<int32_t>(i) : -1});
        }
        return steps;
      };
      const std::vector<backend::SampleRequest> greedy(static_cast<size_t>(batch));
      auto time_steps = [&](bool sampled = false) {
        std::vector<double> times;
        for (int step = 0; step < args.steps + 3; ++step) {
          for (int64_t i = 0; i < batch; ++i) tokens[static_cast<size_t>(i)] = static_cast<int32_t>(1000 + step + i);
          const std::vector<backend::SequenceStep> s = batch_steps(step, false);
          const auto begin = std::chrono::steady_clock::now();
          if (sampled) {
            const std::vector<backend::SampledToken> drawn =
                runtime::run_forward_step_sampled(tf, pool, quant::Rotation::kNone, s, greedy);
            NIBBLE_CHECK(static_cast<int64_t>(drawn.size()) == batch, "expected {} token ids", batch);
            for (const backend::SampledToken& d : drawn) NIBBLE_CHECK(d.id >= 0 && d.id < vocab, "bad token id");
          } else {
            const std::vector<float> logits = runtime::run_forward_step(tf, pool, quant::Rotation::kNone, s);
            NIBBLE_CHECK(static_cast<int64_t>(logits.size()) == batch * vocab, "expected {} logits, got {}",
                         batch * vocab, logits.size());
          }
          const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
          if (step >= 3) times.push_back(seconds);
        }
        return median(times);
      };
      // The engine's overlapped steps (mode 9): step s + 1 is launched, fed the token being drawn for
      // step s, before that token is read; the median interval between two tokens read.
      auto time_overlapped_steps = [&] {
        backend::Backend& be = tf.backend();
        for (int64_t i = 0; i < batch; ++i) tokens[static_cast<size_t>(i)] = static_cast<int32_t>(1000 + i);
        std::vector<backend::SequenceStep> s = batch_steps(0, false);
        be.sample_launch(runtime::launch_forward_step(tf, pool, quant::Rotation::kNone, s), greedy);
        std::fill(tokens.begin(), tokens.end(), -1);  // placeholders: every later step is fed its tokens
        std::vector<double> times;
        std::vector<backend::SampledToken> drawn(static_cast<size_t>(batch));
        auto last = std::chrono::steady_clock::now();
        for (int step = 1; step <= args.steps + 3; ++step) {
          s = batch_steps(step, true);
          const backend::Tensor logits = runtime::launch_forward_step(tf, pool, quant::Rotation::kNone, s);
          be.sample_wait(drawn);  // step - 1's tokens, while step runs
          for (const backend::SampledToken& d : drawn) {
            NIBBLE_CHECK(d.id >= 0 && d.id < vocab, "expected a token id, got {}", d.id);
          }
          be.sample_launch(logits, greedy);
          const auto now = std::chrono::steady_clock::now();
          if (step > 3) times.push_back(std::chrono::duration<double>(now - last).count());
          last = now;
        }
        be.sample_wait(drawn);
        return median(times);
      };
      // The backend settings of a mode (the file comment's list; 0 = the defaults).
      auto set_mode = [&](int mode) {
        cuda.set_graphs_enabled(mode != 1);
        cuda.set_small_matmul(mode != 2);
        cuda.set_gemv_programmatic_launch(mode != 3);
        cuda.set_small_op_fusion(mode != 4);
        cuda.set_merge_early_trigger(mode != 5);
        cuda.set_decode_prefix_before_wait(mode != 7);
        cuda.set_decode_spread_blocks(mode != 8);
        cuda.set_gemv_everywhere(mode == 10);
      };
      for (const int mode : args.modes) {
        set_mode(mode);
        const double t = mode >= 9 ? time_overlapped_steps() : time_steps(mode >= 6);
        const char* const mode_names[] = {"on", "off", "on, cuBLAS matmuls", "on, GEMV without PDL",
                                          "on, RoPE + KV write unfused", "on, merge triggers the o GEMV at its end",
                                          "on, token sampled on the device",
                                          "on, sampled, decode KV copied after the wait",
                                          "on, sampled, decode blocks not spread",
                                          "on, sampled, overlapped (the engine's step)",
                                          "on, sampled, overlapped, GEMV for every product it takes"};
        const double weight_limit = weight_bytes / bandwidth;
        const double total_limit =
            (weight_bytes + kv_bytes_per_token * static_cast<double>(batch_tokens)) / bandwidth;
        std::printf("| %s | %lld | %lld | %s | %.3f | %.1f | %.3f | %.1f%% | %.3f | %.1f%% |\n",
                    quant::kv_dtype_name(kv), static_cast<long long>(context), static_cast<long long>(batch),
                    mode_names[mode], t * 1e3, static_cast<double>(batch) / t, weight_limit * 1e3,
                    100.0 * weight_limit / t, total_limit * 1e3, 100.0 * total_limit / t);
        std::fflush(stdout);
      }
      for (const std::string& skip : args.skips) {
        set_mode(0);
        timer.set_skip({.attention = skip != "rope_kv_write", .rope_kv_write = skip != "attention"});
        const double t = time_steps();
        timer.set_skip({});
        const double weight_limit = weight_bytes / bandwidth;
        std::printf("| %s | %lld | %lld | on, without %s (ablation: not the model's logits) | %.3f | %.1f | %.3f | "
                    "%.1f%% | | |\n",
                    quant::kv_dtype_name(kv), static_cast<long long>(context), static_cast<long long>(batch),
                    skip == "both" ? "attention and rope_kv_write" : skip.c_str(), t * 1e3,
                    static_cast<double>(batch) / t, weight_limit * 1e3, 100.0 * weight_limit / t);
        std::fflush(stdout);
      }
      if (args.timeline) {
        set_mode(6);
        const double untraced = time_steps(true);
        KernelTimeline trace;
        trace.start();
        (void)time_steps(true);
        timeline += fmt::format("\n# timeline: {} KV, context {}, the sequential step (mode 6){}",
                                quant::kv_dtype_name(kv), context, timeline_table(trace.stop(), untraced * 1e3));
        const double untraced_overlapped = time_overlapped_steps();
        trace.start();
        (void)time_overlapped_steps();
        timeline += fmt::format("\n# timeline: {} KV, context {}, the engine's overlapped step (mode 9){}",
                                quant::kv_dtype_name(kv), context,
                                timeline_table(trace.stop(), untraced_overlapped * 1e3));
        // The host side of the same steps: each seam call's host time (a replay records its ops and
        // launches nothing before the graph), plan() and sample() (which waits for the graph).
        timer.clear_host_totals();
        timer.set_host_timing(true);
        const double host_timed = time_steps(true);
        timer.set_host_timing(false);
        const double n = static_cast<double>(args.steps + 3);  // time_steps' steps, warm-up ones included
        double calls_us = 0;
        std::string rows;
        for (const std::string& label : timer.host_order()) {
          const OpTimer::HostTotals& t = timer.host_totals().at(label);
          if (label != "sample") calls_us += t.total_us / n;
          rows += fmt::format("| {} | {:.0f} | {:.2f} | {:.1f} |\n", label, static_cast<double>(t.calls) / n,
                              t.total_us / static_cast<double>(t.calls), t.total_us / n);
        }
        timeline += fmt::format(
            "\n# host time per step (steady_clock around each seam call, {} steps; step {:.3f} ms with host timing, "
            "{:.3f} ms without): the calls before the graph launch take {:.1f} us; sample() waits for the graph\n"
            "| call | calls/step | us/call | us/step |\n|---|---|---|---|\n{}",
            args.steps + 3, host_timed * 1e3, untraced * 1e3, calls_us, rows);
      }
      if (args.breakdown && kv == args.kv.front() && context == args.contexts.front()) {
        set_mode(0);  // the default settings, whichever mode ran last (breakdown_table turns graphs off)
        breakdown = breakdown_table(tf, pool, pages, page_size, context, args.steps, bandwidth, timer, cuda);
      }
    }
  }
  std::fputs(breakdown.c_str(), stdout);  // after the table it would otherwise cut in two
  std::fputs(timeline.c_str(), stdout);
  const backend::GraphStats& st = cuda.graph_stats();
  std::printf("# graph stats: captures %lld, replays %lld, mismatches %lld, eager steps %lld\n",
              static_cast<long long>(st.captures), static_cast<long long>(st.replays),
              static_cast<long long>(st.mismatches), static_cast<long long>(st.eager_steps));
  return 0;
}

}  // namespace nibble::bench

int main(int argc, char** argv) {
  try {
    return nibble::bench::run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_model_decode: %s\n", e.what());
    return 1;
  }
}
