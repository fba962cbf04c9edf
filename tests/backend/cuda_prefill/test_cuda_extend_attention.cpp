// The tensor-core extend attention (cuda::extend_attention) against the CPU backend's f32 attention
// (the oracle, through the seam) and against cuda::chunk_attention (the f32 CUDA-core kernel), on
// one step with a cached prefix in every KV format (± Hadamard rotation) written by the CPU's
// kv_write, so both sides read the same quantized bytes.
//
// Precision and tolerances. The quantized prefix tiles reach the tensor cores exactly (bf16, E4M3
// and E2M1 × E4M3 values are bf16 values; the global scales g stay out of the tiles, see
// extend_attention.h); what rounds is q (to bf16, after the Hadamard rotation when the cache is
// rotated), an f32 prefix and the chunk's own f32 K/V (to bf16), and the probabilities P (to bf16,
// unit roundoff u = 2^-8). As in test_cuda_prefill_attention (f32 inputs): the rounding of v and of
// each p_i errs by <= u relative, |o| <= max|v| ~ 1, and the score perturbation from rounding q and
// k is ~ scale·sqrt(head_dim·E[q²k²])·u ~ 1.5e-3 logits (q in [-3, 3], k in [-1, 1]); so
// max |error| <= 1.5e-2 and RMS <= 3e-3. chunk_attention is f32 throughout (~2e-4 from the oracle),
// so the same bounds hold against it. A tile decoded wrongly, a missed global scale, a key too many
// or too few, or a wrong rotation moves outputs by O(0.1 - 1).
//
// Sweeps: formats f32 bf16 fp8 nvfp4 k8v4 × rotation none/hadamard × head_dim 64/128/256 × GQA 1/4/8
// × page size 16/5/64, each a step of mixed sequences: prefill (prefix 0, lengths 1 and 65), extends
// with prefixes 1, 33, 100, 257 (odd, page-unaligned) and chunks 2, 17, 129, 256, and a decode
// sequence, whose output rows the kernel must leave untouched. Long prefixes: 4097 and 16000 with
// chunks 300 to 2048, with v offset by 0.5 so the outputs do not average out to ~0. Unwritten pool bytes are 0xFF (NaN as f32/bf16), so a read past the prefix
// shows.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cuda/cuda_step.h"
#include "backend/cuda/device_caps.h"
#include "backend/cuda/extend_attention.h"
#include "backend/cuda/extend_split.h"
#include "backend/cuda/prefill_attention.h"
#include "backend/cuda_common/cuda_test_util.h"
#include "backend/step_plan.h"
#include "cache/page_layout.h"
#include "common/error.h"
#include "extend_convert_probe.h"
#include "quant/e4m3.h"
#include "quant/nvfp4.h"

namespace nibble::backend {
namespace {

using cuda::test::DeviceBuffer;
using quant::KvDtype;
using quant::Rotation;

constexpr double kMaxTolerance = 1.5e-2;
constexpr double kRmsTolerance = 3e-3;

struct SeqSpec {
  int64_t prefix = 0;
  int64_t len = 1;
};

struct Case {
  KvDtype dtype = KvDtype::kBF16;
  Rotation rotation = Rotation::kNone;
  int64_t head_dim = 128;
  int64_t heads = 8;
  int64_t kv_heads = 2;
  int64_t page_size = 16;
  std::vector<SeqSpec> seqs;
  // Added to every v: with thousands of keys, zero-mean values average out to |o| ~ 1e-2, where a
  // wrong scale of the prefix part would hide; an offset keeps |o| ~ v_offset.
  float v_offset = 0.0f;
  // ExtendAttentionParams::prefix_splits: 1 = none (the default here), n > 1 forced, 0 the
  // launcher's choice from the hints (the engine's).
  int prefix_splits = 1;
  // ExtendAttentionParams::kernel: 0 the launcher's choice (the wgmma kernel at head_dim 128 on a
  // 9.0 device, unsplit), 1 mma.sync, 2 wgmma.
  int kernel = cuda::kExtendKernelDefault;
  // Also run the step through the seam (CudaBackend::attention, bf16 weights: the engine's path,
  // with the split hints the backend derives from the plan and its own split workspace).
  bool seam = false;
};

struct Errors {
  double max_abs = 0.0;
  double rms = 0.0;  // the worst sequence's
};

std::string describe(const Case& c) {
  std::string d = std::string(quant::kv_dtype_name(c.dtype)) + (c.rotation == Rotation::kHadamard ? "+hadamard" : "") +
                  " head_dim " + std::to_string(c.head_dim) + " heads " + std::to_string(c.heads) + "/" +
                  std::to_string(c.kv_heads) + " page " + std::to_string(c.page_size) + " seqs";
  for (const SeqSpec& s : c.seqs) d += " " + std::to_string(s.prefix) + "+" + std::to_string(s.len);
  if (c.prefix_splits != 1) d += " parts " + std::to_string(c.prefix_splits);
  if (c.kernel != cuda::kExtendKernelDefault) d += c.kernel == cuda::kExtendKernelMma ? " mma.sync" : " wgmma";
  return d;
}

std::vector<float> random_floats(int64_t n, std::mt19937& rng, float scale) {
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(rng);
  return v;
}

class CudaExtendAttention : public ::testing::Test {
 protected:
  void SetUp() override { NIBBLE_SKIP_WITHOUT_GPU(); }

  struct Result {
    Errors vs_cpu, vs_chunk;
    int64_t decode_rows_touched = 0;  // decode rows of the extend kernel's output that are not NaN
    bool filled_differs = false;      // the call on a filled kv_workspace gave other bits
    int splits = 1;                   // the parts the call ran (extend_attention_splits)
    Errors seam_vs_cpu;               // Case::seam: the extend rows of CudaBackend::attention
  };

  Result run(const Case& c) {
    const cache::PageLayout layout({.num_layers = 1, .kv_heads = c.kv_heads, .head_dim = c.head_dim}, c.dtype,
                                   c.page_size);
    // Non-trivial global scales (fp8 / nvfp4 apply them; the kernel folds them out of its tiles).
    const cache::KvGlobalScales scales{{0.37f}, {1.7f}};
    const int64_t kv_width = c.kv_heads * c.head_dim, q_width = c.heads * c.head_dim;
    const size_t n = c.seqs.size();

    std::vector<std::vector<int32_t>> pages(n), tokens(n);
    int32_t num_pages = 0;
    for (size_t i = 0; i < n; ++i) {
      pages[i].resize((c.seqs[i].prefix + c.seqs[i].len + c.page_size - 1) / c.page_size);
      for (int32_t& p : pages[i]) p = num_pages++;
    }
    std::vector<uint8_t> pool(static_cast<size_t>(num_pages * layout.page_bytes()), 0xFF);
    const KvCacheView view{pool.data(), num_pages, &layout, &scales, c.rotation};

    std::vector<SequenceStep> prefix_steps;
    for (size_t i = 0; i < n; ++i) {
      if (c.seqs[i].prefix == 0) continue;
      tokens[i].assign(c.seqs[i].prefix, 1);
      prefix_steps.push_back({.first_position = 0, .tokens = tokens[i], .pages = pages[i]});
    }
    if (!prefix_steps.empty()) {
      const StepPlan plan = make_step_plan(prefix_steps, c.page_size, num_pages);
      const auto k = random_floats(plan.total_tokens * kv_width, rng, 1.0f);
      auto v = random_floats(plan.total_tokens * kv_width, rng, 1.0f);
      for (float& x : v) x += c.v_offset;
      auto step = cpu.plan(plan);
      cpu.kv_write(*step, view, 0, {const_cast<float*>(k.data()), plan.total_tokens, kv_width},
                   {const_cast<float*>(v.data()), plan.total_tokens, kv_width});
    }

    std::vector<SequenceStep> steps;
    for (size_t i = 0; i < n; ++i) {
      tokens[i].assign(c.seqs[i].len, 1);
      steps.push_back({.first_position = c.seqs[i].prefix, .tokens = tokens[i], .pages = pages[i]});
    }
    const StepPlan plan = make_step_plan(steps, c.page_size, num_pages);
    const int64_t t = plan.total_tokens;
    const auto q = random_floats(t * q_width, rng, 3.0f);
    const auto k = random_floats(t * kv_width, rng, 1.0f);
    auto v = random_floats(t * kv_width, rng, 1.0f);
    for (float& x : v) x += c.v_offset;
    const AttentionShape shape{.num_heads = c.heads,
                               .num_kv_heads = c.kv_heads,
                               .head_dim = c.head_dim,
                               .scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim))};
    auto cstep = cpu.plan(plan);
    cpu.kv_write(*cstep, view, 0, {const_cast<float*>(k.data()), t, kv_width},
                 {const_cast<float*>(v.data()), t, kv_width});
    std::vector<float> want(t * q_width);
    cpu.attention(*cstep, view, 0, shape, {const_cast<float*>(q.data()), t, q_width},
                  {const_cast<float*>(k.data()), t, kv_width}, {const_cast<float*>(v.data()), t, kv_width},
                  {want.data(), t, q_width});

    auto gstep = gpu->plan(plan);
    const auto& g = dynamic_cast<const CudaPlannedStep&>(*gstep);
    NIBBLE_CUDA_CHECK(cudaDeviceSynchronize());
    DeviceBuffer dq = DeviceBuffer::from(q), dk = DeviceBuffer::from(k), dv = DeviceBuffer::from(v);
    DeviceBuffer dpool = DeviceBuffer::from(pool);
    DeviceBuffer dout = DeviceBuffer::from(std::vector<float>(t * q_width, NAN));
    DeviceBuffer dchunk = DeviceBuffer::from(std::vector<float>(t * q_width, NAN));
    int64_t max_new = 0, extend_seqs = 0, extend_tokens = 0, max_prefix = 0;
    for (const SeqSpec& s : c.seqs) {
      max_new = std::max(max_new, s.len);
      if (s.len > 1 || s.prefix == 0) ++extend_seqs, extend_tokens += s.len;  // taken (include_prefill)
      max_prefix = std::max(max_prefix, s.prefix);
    }
    // The split records, NaN-patterned: a part the merge reads but no block wrote shows. Room for
    // the forced splits of SplitPrefixesMatchCpu (up to 13 parts of 116 blocks).
    const int64_t split_bytes = cuda::extend_split_workspace_bytes(c.head_dim, 1024);
    DeviceBuffer dsplit = DeviceBuffer::from(std::vector<uint8_t>(static_cast<size_t>(split_bytes), 0xFF));
    // The own K/V's bf16 copy, unwritten bytes NaN-patterned: the call converts into it.
    DeviceBuffer dwork = DeviceBuffer::from(
        std::vector<uint8_t>(static_cast<size_t>(cuda::prefill_workspace_bytes(t, c.kv_heads, c.head_dim)), 0xFF));
    const cuda::ExtendAttentionParams params{.q = dq.as<float>(),
                                             .k = dk.as<float>(),
                                             .v = dv.as<float>(),
                                             .out = dout.as<float>(),
                                             .seq_info = g.seq_info(),
                                             .num_seqs = plan.num_seqs(),
                                             .total_tokens = t,
                                             .max_new_tokens = max_new,
                                             .pool = dpool.as<uint8_t>(),
                                             .page_tables = g.page_tables(),
                                             .max_pages_per_seq = plan.max_pages_per_seq,
                                             .page_bytes = layout.page_bytes(),
                                             .k_layout = layout.k(0),
                                             .v_layout = layout.v(0),
                                             .k_global_scale = scales.k[0],
                                             .v_global_scale = scales.v[0],
                                             .rotation = c.rotation,
                                             .num_q_heads = c.heads,
                                             .num_kv_heads = c.kv_heads,
                                             .head_dim = c.head_dim,
                                             .softmax_scale = shape.scale,
                                             .kv_workspace = dwork.as<uint8_t>(),
                                             .include_prefill = true,
                                             .extend_seqs = extend_seqs,
                                             .extend_tokens = extend_tokens,
                                             .max_prefix_tokens = max_prefix,
                                             .prefix_splits = c.prefix_splits,
                                             .num_sms = num_sms,
                                             .split_workspace = dsplit.as<uint8_t>(),
                                             .split_workspace_bytes = split_bytes,
                                             .kernel = c.kernel};
    cuda::extend_attention(params, nullptr);
    // Again with the copy already filled (the engine's step after a prefill call) and k, v NaN: they
    // must not be read, and the output must be the same bits.
    DeviceBuffer dnan = DeviceBuffer::from(std::vector<float>(t * kv_width, NAN));
    DeviceBuffer dfilled = DeviceBuffer::from(std::vector<float>(t * q_width, NAN));
    cuda::ExtendAttentionParams filled = params;
    filled.k = filled.v = dnan.as<float>();
    filled.out = dfilled.as<float>();
    filled.kv_workspace_filled = true;
    cuda::extend_attention(filled, nullptr);
    cuda::chunk_attention({.q = dq.as<float>(),
                           .k = dk.as<float>(),
                           .v = dv.as<float>(),
                           .out = dchunk.as<float>(),
                           .work = g.chunk_work(),
                           .num_work = g.num_chunk_work(),
                           .seq_info = g.seq_info(),
                           .num_seqs = plan.num_seqs(),
                           .pool = dpool.as<uint8_t>(),
                           .page_tables = g.page_tables(),
                           .max_pages_per_seq = plan.max_pages_per_seq,
                           .page_bytes = layout.page_bytes(),
                           .k_layout = layout.k(0),
                           .v_layout = layout.v(0),
                           .k_global_scale = scales.k[0],
                           .v_global_scale = scales.v[0],
                           .rotation = c.rotation,
                           .num_q_heads = c.heads,
                           .num_kv_heads = c.kv_heads,
                           .head_dim = c.head_dim,
                           .softmax_scale = shape.scale},
                          nullptr);
    DeviceBuffer dseam = DeviceBuffer::from(std::vector<float>(t * q_width, NAN));
    if (c.seam) {
      const KvCacheView gview{dpool.as<uint8_t>(), num_pages, &layout, &scales, c.rotation};
      gpu->attention(*gstep, gview, 0, shape, {dq.as<float>(), t, q_width}, {dk.as<float>(), t, kv_width},
                     {dv.as<float>(), t, kv_width}, {dseam.as<float>(), t, q_width});
    }
    NIBBLE_CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<float> got = dout.to_host<float>();
    const std::vector<float> seam = dseam.to_host<float>();
    const std::vector<float> chunk = dchunk.to_host<float>();
    const std::vector<float> got_filled = dfilled.to_host<float>();

    Result r;
    r.splits = cuda::extend_attention_splits(params);
    for (size_t i = 0; c.seam && i < n; ++i) {
      if (c.seqs[i].prefix == 0 || c.seqs[i].len == 1) continue;  // the extend rows only
      const int64_t first = plan.token_begin[i] * q_width, count = c.seqs[i].len * q_width;
      double sum_sq = 0.0;
      for (int64_t e = first; e < first + count; ++e) {
        const double d = std::isfinite(seam[e]) ? std::fabs(static_cast<double>(seam[e]) - want[e]) : INFINITY;
        r.seam_vs_cpu.max_abs = std::max(r.seam_vs_cpu.max_abs, d);
        sum_sq += d * d;
      }
      r.seam_vs_cpu.rms = std::max(r.seam_vs_cpu.rms, std::sqrt(sum_sq / static_cast<double>(count)));
    }
    r.filled_differs = std::memcmp(got.data(), got_filled.data(), got.size() * sizeof(float)) != 0;
    for (size_t i = 0; i < n; ++i) {
      const int64_t first = plan.token_begin[i] * q_width, count = c.seqs[i].len * q_width;
      if (c.seqs[i].prefix > 0 && c.seqs[i].len == 1) {  // decode: not the kernel's
        for (int64_t e = first; e < first + count; ++e) r.decode_rows_touched += std::isnan(got[e]) ? 0 : 1;
        continue;
      }
      for (auto [into, ref] : {std::pair<Errors*, const std::vector<float>*>{&r.vs_cpu, &want}, {&r.vs_chunk, &chunk}}) {
        double sum_sq = 0.0;
        for (int64_t e = first; e < first + count; ++e) {
          const double d = std::isfinite(got[e]) ? std::fabs(static_cast<double>(got[e]) - (*ref)[e]) : INFINITY;
          into->max_abs = std::max(into->max_abs, d);
          sum_sq += d * d;
        }
        into->rms = std::max(into->rms, std::sqrt(sum_sq / static_cast<double>(count)));
      }
    }
    return r;
  }

  void check(const Case& c) {
    const Result r = run(c);
    const std::string what = describe(c);
    EXPECT_LE(r.vs_cpu.max_abs, kMaxTolerance) << what << " vs cpu";
    EXPECT_LE(r.vs_cpu.rms, kRmsTolerance) << what << " vs cpu";
    EXPECT_LE(r.vs_chunk.max_abs, kMaxTolerance) << what << " vs chunk_attention";
    EXPECT_LE(r.vs_chunk.rms, kRmsTolerance) << what << " vs chunk_attention";
    EXPECT_EQ(r.decode_rows_touched, 0) << what << ": decode rows written";
    EXPECT_FALSE(r.filled_differs) << what << ": kv_workspace_filled changed the output";
    if (c.prefix_splits > 1) EXPECT_EQ(r.splits, c.prefix_splits) << what;
    std::printf("  %-100s cpu max %.2e rms %.2e | chunk max %.2e\n", what.c_str(), r.vs_cpu.max_abs, r.vs_cpu.rms,
                r.vs_chunk.max_abs);
  }

  // A small GPU's SM count for the launcher's choice: the same splits on every device.
  static constexpr int num_sms = 16;
  CpuBackend cpu{{.num_threads = 0}};
  std::unique_ptr<Backend> gpu = cuda::test::no_device_reason().empty() ? make_backend({.device = "cuda"}) : nullptr;
  std::mt19937 rng{777};
};

constexpr KvDtype kDtypes[] = {KvDtype::kF32, KvDtype::kBF16, KvDtype::kFP8, KvDtype::kNVFP4, KvDtype::kK8V4};

class CudaExtendSweep : public CudaExtendAttention, public ::testing::WithParamInterface<int64_t> {};

// The kernels a head_dim runs: at 128 both mma.sync and, where it runs, wgmma (each forced, so that
// neither is left untested by the launcher's choice); one kernel (the default) elsewhere.
std::vector<int> kernels_at(int64_t head_dim) {
  if (head_dim != 128) return {cuda::kExtendKernelDefault};
  if (!cuda::wgmma_runs()) {
    std::printf("  [the wgmma extend kernel does not run here (no sm_90a build or not a 9.0 device): "
                "mma.sync only]\n");
    return {cuda::kExtendKernelMma};
  }
  return {cuda::kExtendKernelMma, cuda::kExtendKernelWgmma};
}

// The kernel a case of this format can be forced onto: wgmma takes the fp8 / nvfp4 / k8v4 caches.
int kernel_for(int kernel, KvDtype dtype) {
  const bool quantized = dtype == KvDtype::kFP8 || dtype == KvDtype::kNVFP4 || dtype == KvDtype::kK8V4;
  return kernel == cuda::kExtendKernelWgmma && !quantized ? cuda::kExtendKernelMma : kernel;
}

// Every format ± rotation × GQA 1/4/8 × page sizes, one mixed step each (prefill, extends with odd and
// page-unaligned prefixes, a decode sequence), on each kernel of the head_dim.
TEST_P(CudaExtendSweep, MixedStepsMatchCpuAndChunkAttention) {
  const int64_t head_dim = GetParam();
  const std::vector<SeqSpec> seqs{{.prefix = 0, .len = 1},    {.prefix = 1, .len = 17},   {.prefix = 33, .len = 256},
                                  {.prefix = 100, .len = 2},  {.prefix = 50, .len = 1},   {.prefix = 257, .len = 129},
                                  {.prefix = 0, .len = 65}};
  for (const int kernel : kernels_at(head_dim)) {
    int variant = 0;
    for (const KvDtype dtype : kDtypes) {
      for (const Rotation rotation : {Rotation::kNone, Rotation::kHadamard}) {
        for (const auto [heads, kv_heads] : {std::pair<int64_t, int64_t>{2, 2}, {8, 2}, {16, 2}}) {
          const int64_t page_size = std::vector<int64_t>{16, 5, 64}[static_cast<size_t>(variant++ % 3)];
          check({.dtype = dtype,
                 .rotation = rotation,
                 .head_dim = head_dim,
                 .heads = heads,
                 .kv_heads = kv_heads,
                 .page_size = page_size,
                 .seqs = seqs,
                 .kernel = kernel_for(kernel, dtype)});
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(HeadDims, CudaExtendSweep, ::testing::Values(64, 128, 256),
                         [](const auto& info) { return "head_dim_" + std::to_string(info.param); });

// A few small steps, the sweep compute-sanitizer (memcheck, racecheck) runs: every head_dim, a
// rotated nvfp4, a k8v4 and a bf16 cache (the last copied straight into three bf16 stages where the
// prefix is staged: 130 tokens take all three), pages shorter than a key tile; the nvfp4 one again
// with its prefixes split in 3 parts (the split build and the merge).
TEST_F(CudaExtendAttention, SmallStepsForSanitizers) {
  const std::vector<SeqSpec> seqs{{.prefix = 0, .len = 3}, {.prefix = 37, .len = 70}, {.prefix = 9, .len = 1},
                                  {.prefix = 130, .len = 5}};
  for (const int64_t head_dim : {64, 128, 256}) {
    for (const int kernel : kernels_at(head_dim)) {
      if (kernel == cuda::kExtendKernelDefault) continue;
      // Five prefix tiles: every raw stage of the wgmma kernel's converted prefix reused.
      const std::vector<SeqSpec> longer{{.prefix = 600, .len = 130}, {.prefix = 0, .len = 3}, {.prefix = 9, .len = 1}};
      check({.dtype = KvDtype::kNVFP4, .rotation = Rotation::kHadamard, .head_dim = head_dim, .heads = 8,
             .kv_heads = 2, .page_size = 5, .seqs = longer, .kernel = kernel});
      check({.dtype = KvDtype::kK8V4, .head_dim = head_dim, .heads = 2, .kv_heads = 2, .seqs = longer, .kernel = kernel});
      check({.dtype = KvDtype::kFP8, .head_dim = head_dim, .heads = 8, .kv_heads = 2, .seqs = seqs, .kernel = kernel});
    }
    check({.dtype = KvDtype::kNVFP4, .rotation = Rotation::kHadamard, .head_dim = head_dim, .heads = 8,
           .kv_heads = 2, .page_size = 5, .seqs = seqs});
    check({.dtype = KvDtype::kNVFP4, .rotation = Rotation::kHadamard, .head_dim = head_dim, .heads = 8,
           .kv_heads = 2, .page_size = 5, .seqs = seqs, .prefix_splits = 3});
    check({.dtype = KvDtype::kK8V4, .head_dim = head_dim, .heads = 2, .kv_heads = 2, .page_size = 16, .seqs = seqs});
    check({.dtype = KvDtype::kBF16, .head_dim = head_dim, .heads = 8, .kv_heads = 2, .page_size = 5, .seqs = seqs});
  }
}

// The prefix split (extend_split.h) forced: every format ± rotation, GQA 1 / 4 / 8, each
// head_dim, parts with and without prefix tiles (the 1- and 33-token prefixes leave most parts
// empty), chunks of one to several query tiles, a decode sequence the merge must leave alone. The
// filled-workspace call in run() repeats the split call: its bits must be the same.
TEST_F(CudaExtendAttention, SplitPrefixesMatchCpu) {
  const std::vector<SeqSpec> seqs{{.prefix = 1, .len = 17},   {.prefix = 700, .len = 3}, {.prefix = 50, .len = 1},
                                  {.prefix = 1333, .len = 129}, {.prefix = 33, .len = 256}};
  int variant = 0;
  for (const int64_t head_dim : {64, 128, 256}) {
    for (const KvDtype dtype : kDtypes) {
      for (const auto [heads, kv_heads] : {std::pair<int64_t, int64_t>{2, 2}, {8, 2}, {16, 2}}) {
        const Rotation rotation = variant % 2 == 0 ? Rotation::kNone : Rotation::kHadamard;
        const int splits = std::vector<int>{3, 8, 13}[static_cast<size_t>(variant % 3)];
        const int64_t page_size = std::vector<int64_t>{16, 5}[static_cast<size_t>(variant++ / 3 % 2)];
        check({.dtype = dtype,
               .rotation = rotation,
               .head_dim = head_dim,
               .heads = heads,
               .kv_heads = kv_heads,
               .page_size = page_size,
               .seqs = seqs,
               .v_offset = 0.5f,
               .prefix_splits = splits});
      }
    }
  }
}

// The launcher's own choice (the engine's path): a short chunk over a long prefix splits, and
// matches the oracle; a long chunk does not split.
TEST_F(CudaExtendAttention, ShortChunksOverLongPrefixesSplitByThemselves) {
  for (const KvDtype dtype : {KvDtype::kNVFP4, KvDtype::kBF16}) {
    const Case c{.dtype = dtype,
                 .head_dim = 128,
                 .heads = 8,
                 .kv_heads = 2,
                 .seqs = {{.prefix = 12000, .len = 40}, {.prefix = 3000, .len = 1}},
                 .v_offset = 0.5f,
                 .prefix_splits = 0};
    const Result r = run(c);
    EXPECT_GT(r.splits, 1) << describe(c);
    EXPECT_LE(r.vs_cpu.max_abs, kMaxTolerance) << describe(c);
    EXPECT_LE(r.vs_cpu.rms, kRmsTolerance) << describe(c);
    EXPECT_EQ(r.decode_rows_touched, 0) << describe(c);
    EXPECT_FALSE(r.filled_differs) << describe(c);
    std::printf("  %-100s parts %d cpu max %.2e rms %.2e\n", describe(c).c_str(), r.splits, r.vs_cpu.max_abs,
                r.vs_cpu.rms);
  }
  // The engine's path: CudaBackend::attention derives the hints from its plan and sizes its own
  // split workspace on first use; with the device's SM count the launcher splits this step (16 work
  // blocks, 188 prefix tiles: 8 parts on 132 SMs, 2 or more from 32 SMs on).
  int device = 0, sms = 0;
  NIBBLE_CUDA_CHECK(cudaGetDevice(&device));
  NIBBLE_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  for (const KvDtype dtype : {KvDtype::kNVFP4, KvDtype::kK8V4}) {
    const Case c{.dtype = dtype,
                 .rotation = Rotation::kHadamard,
                 .head_dim = 128,
                 .heads = 32,
                 .kv_heads = 8,
                 .seqs = {{.prefix = 12000, .len = 40}, {.prefix = 700, .len = 1}, {.prefix = 5000, .len = 9}},
                 .v_offset = 0.5f,
                 .prefix_splits = 0,
                 .seam = true};
    const Result r = run(c);
    EXPECT_GT(cuda::extend_split_workspace_bytes(128, sms), 0);
    EXPECT_LE(r.seam_vs_cpu.max_abs, kMaxTolerance) << describe(c) << " through the seam";
    EXPECT_LE(r.seam_vs_cpu.rms, kRmsTolerance) << describe(c) << " through the seam";
    std::printf("  %-100s seam (%d SMs) cpu max %.2e rms %.2e\n", describe(c).c_str(), sms, r.seam_vs_cpu.max_abs,
                r.seam_vs_cpu.rms);
  }
  const Case long_chunk{.dtype = KvDtype::kFP8,
                        .head_dim = 128,
                        .heads = 8,
                        .kv_heads = 2,
                        .seqs = {{.prefix = 12000, .len = 2048}},
                        .prefix_splits = 0};
  EXPECT_EQ(run(long_chunk).splits, 1);
}

// Long prefixes (many prefix tiles, page-unaligned ends) and long chunks (many own tiles).
TEST_F(CudaExtendAttention, LongPrefixesMatchCpu) {
  // v in [-0.5, 1.5]: |o| ~ 0.5, so every part of the sum shows (P rounding then errs <= 2^-8 · 1.5).
  check({.dtype = KvDtype::kBF16,
         .head_dim = 128,
         .heads = 8,
         .kv_heads = 2,
         .seqs = {{.prefix = 16000, .len = 300}},
         .v_offset = 0.5f});
  check({.dtype = KvDtype::kNVFP4,
         .rotation = Rotation::kHadamard,
         .head_dim = 128,
         .heads = 8,
         .kv_heads = 2,
         .page_size = 64,
         .seqs = {{.prefix = 16000, .len = 300}, {.prefix = 4097, .len = 1000}},
         .v_offset = 0.5f});
  // head_dim 128 on the default kernel (wgmma on a 9.0 device): fp8 with one head per KV head (128
  // tokens of one head per block), k8v4 with a GQA group of 8 and a long own phase.
  check({.dtype = KvDtype::kFP8,
         .head_dim = 128,
         .heads = 4,
         .kv_heads = 4,
         .page_size = 64,
         .seqs = {{.prefix = 8191, .len = 700}},
         .v_offset = 0.5f});
  check({.dtype = KvDtype::kK8V4,
         .rotation = Rotation::kHadamard,
         .head_dim = 128,
         .heads = 8,
         .kv_heads = 1,
         .seqs = {{.prefix = 5000, .len = 2048}},
         .v_offset = 0.5f});
  check({.dtype = KvDtype::kK8V4,
         .head_dim = 64,
         .heads = 8,
         .kv_heads = 1,
         .seqs = {{.prefix = 4097, .len = 2048}},
         .v_offset = 0.5f});
  check({.dtype = KvDtype::kFP8,
         .head_dim = 256,
         .heads = 4,
         .kv_heads = 1,
         .seqs = {{.prefix = 4097, .len = 1000}, {.prefix = 0, .len = 700}},
         .v_offset = 0.5f});
}

// The bf16 bit pattern of a value bf16 holds exactly (its f32 bits' low half is zero).
uint16_t exact_bf16_bits(float x) {
  uint32_t bits = 0;
  std::memcpy(&bits, &x, 4);
  EXPECT_EQ(bits & 0xFFFFu, 0u) << x << " is not a bf16 value";
  return static_cast<uint16_t>(bits >> 16);
}

// The prefix tiles' conversion alone (extend_convert_probe.h), held against the formats'
// definitions bit for bit: every E4M3 code, and every nvfp4 code byte under every block scale.
// The two NaN codes (0x7F, 0xFF), which the write path never stores, are left out.
TEST(CudaExtendTileConversion, Fp8EveryCodeIsExact) {
  NIBBLE_SKIP_WITHOUT_GPU();
  using cuda::test::kProbeHeadDim;
  using cuda::test::kProbeKeys;
  std::vector<uint8_t> raw(kProbeKeys * kProbeHeadDim);
  for (size_t i = 0; i < raw.size(); ++i) raw[i] = static_cast<uint8_t>(i % 256);
  DeviceBuffer draw = DeviceBuffer::from(raw), dout(raw.size() * 2);
  cuda::test::convert_prefix_tiles(quant::ElemFormat::kFP8, draw.as<uint8_t>(), nullptr, dout.as<uint16_t>(), 1,
                                   nullptr);
  const std::vector<uint16_t> got = dout.to_host<uint16_t>();
  int checked = 0;
  for (size_t i = 0; i < raw.size(); ++i) {
    if ((raw[i] & 0x7Fu) == 0x7Fu) continue;  // NaN
    ASSERT_EQ(got[i], exact_bf16_bits(quant::f32_from_e4m3(raw[i]))) << "code " << int(raw[i]);
    ++checked;
  }
  EXPECT_EQ(checked, 254 * 32);
}

TEST(CudaExtendTileConversion, Nvfp4EveryCodeByteUnderEveryScaleIsExact) {
  NIBBLE_SKIP_WITHOUT_GPU();
  using cuda::test::kProbeHeadDim;
  using cuda::test::kProbeKeys;
  constexpr int kRowBytes = kProbeHeadDim / 2, kBlocksPerRow = kProbeHeadDim / 16;
  constexpr int kTiles = 16;  // 256 scales x 32 blocks of 8 code bytes: every byte under every scale
  std::vector<uint8_t> raw(kTiles * kProbeKeys * kRowBytes), scales(kTiles * kProbeKeys * kBlocksPerRow);
  for (size_t k = 0; k < scales.size(); ++k) {  // block k: scale k / 32, code bytes 8 (k % 32) ..
    scales[k] = static_cast<uint8_t>(k / 32);
    for (int j = 0; j < 8; ++j) raw[8 * k + j] = static_cast<uint8_t>(8 * (k % 32) + j);
  }
  DeviceBuffer draw = DeviceBuffer::from(raw), dscales = DeviceBuffer::from(scales);
  DeviceBuffer dout(static_cast<size_t>(kTiles) * kProbeKeys * kProbeHeadDim * 2);
  cuda::test::convert_prefix_tiles(quant::ElemFormat::kNVFP4, draw.as<uint8_t>(), dscales.as<uint8_t>(),
                                   dout.as<uint16_t>(), kTiles, nullptr);
  const std::vector<uint16_t> got = dout.to_host<uint16_t>();
  int checked = 0;
  for (size_t k = 0; k < scales.size(); ++k) {
    if ((scales[k] & 0x7Fu) == 0x7Fu) continue;  // NaN scale
    float want[16];
    quant::nvfp4_dequantize_block(&raw[8 * k], scales[k], 1.0f, want);
    const size_t row = k / kBlocksPerRow, block = k % kBlocksPerRow;
    for (int i = 0; i < 16; ++i) {
      ASSERT_EQ(got[row * kProbeHeadDim + 16 * block + i], exact_bf16_bits(want[i]))
          << "scale " << int(scales[k]) << ", block " << k << ", element " << i;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 254 * 32 * 16);
}

// Host-side validation: runs without a GPU (nothing is launched before the checks).
TEST(CudaExtendAttentionValidation, BadArgumentsAreErrorsNamingTheProblem) {
  const cache::PageLayout layout({.num_layers = 1, .kv_heads = 2, .head_dim = 128}, KvDtype::kNVFP4, 16);
  alignas(16) float dummy[4] = {};
  const cuda::ExtendAttentionParams good{.q = dummy,
                                         .k = dummy,
                                         .v = dummy,
                                         .out = dummy,
                                         .seq_info = reinterpret_cast<const int32_t*>(dummy),
                                         .num_seqs = 1,
                                         .total_tokens = 4,
                                         .pool = reinterpret_cast<const uint8_t*>(dummy),
                                         .page_tables = reinterpret_cast<const int32_t*>(dummy),
                                         .max_pages_per_seq = 1,
                                         .page_bytes = layout.page_bytes(),
                                         .k_layout = layout.k(0),
                                         .v_layout = layout.v(0),
                                         .num_q_heads = 8,
                                         .num_kv_heads = 2,
                                         .head_dim = 128,
                                         .softmax_scale = 0.1f,
                                         .kv_workspace = dummy};
  const auto expect_error = [](cuda::ExtendAttentionParams p, const std::string& needle) {
    try {
      cuda::extend_attention(p, nullptr);
      ADD_FAILURE() << "accepted; expected an error mentioning '" << needle << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  auto p = good;
  p.head_dim = 96;
  expect_error(p, "head_dim must be 64, 128 or 256");
  p = good;
  p.num_kv_heads = 3;
  expect_error(p, "not a positive multiple of 3 kv heads");
  p = good;
  p.pool = nullptr;
  expect_error(p, "pool false");
  p = good;
  p.kv_workspace = nullptr;
  expect_error(p, "kv_workspace false");
  p = good;
  p.kv_workspace = reinterpret_cast<char*>(dummy) + 4;
  expect_error(p, "kv_workspace must be 16-byte aligned");
  p = good;
  p.num_kv_heads = 4;
  expect_error(p, "K layout is 2 kv heads");
  {  // K bf16 with V fp8: no prefix mode reads that pair
    const cache::PageLayout bf16({.num_layers = 1, .kv_heads = 2, .head_dim = 128}, KvDtype::kBF16, 16);
    const cache::PageLayout fp8({.num_layers = 1, .kv_heads = 2, .head_dim = 128}, KvDtype::kFP8, 16);
    p = good;
    p.k_layout = bf16.k(0);
    p.v_layout = fp8.v(0);
    p.page_bytes = bf16.page_bytes();
    expect_error(p, "K in bf16 with V in fp8");
  }
  p = good;
  p.max_new_tokens = 5;
  expect_error(p, "max_new_tokens 5");
  p = good;
  p.v_global_scale = 0.0f;
  expect_error(p, "global scales must be positive");
  p = good;
  p.prefix_splits = -1;
  expect_error(p, "prefix_splits must be in [0, 1024]");
  p = good;
  p.kernel = 3;
  expect_error(p, "kernel must be 0 (default), 1 (mma.sync) or 2 (wgmma), got 3");
  p = good;
  p.kernel = cuda::kExtendKernelWgmma;
  p.prefix_splits = 2;
  expect_error(p, "the wgmma kernel (kernel 2) takes head_dim 128, an fp8 / nvfp4 / k8v4 cache and "
                  "prefix_splits 1, got head_dim 128, nvfp4 cache, prefix_splits 2");
  p = good;
  p.max_prefix_tokens = -5;
  expect_error(p, "max_prefix_tokens -5");
  p = good;
  p.split_workspace = reinterpret_cast<char*>(dummy) + 4;
  expect_error(p, "split_workspace must be 16-byte aligned");
  {  // forced parts without room for their records (checked before any launch)
    p = good;
    p.prefix_splits = 4;
    p.split_workspace = dummy;
    p.split_workspace_bytes = 16;
    try {
      cuda::extend_attention_splits(p);
      ADD_FAILURE() << "4 parts accepted with a 16-byte split workspace";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("4 prefix parts need"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("split_workspace holds 0"), std::string::npos) << e.what();
    }
  }
  p = good;
  p.prefix_splits = 3;
  p.split_workspace = dummy;
  p.split_workspace_bytes = cuda::extend_split_workspace_bytes(128, 8);  // 8 records: 2 blocks x 3 parts fit
  EXPECT_EQ(cuda::extend_attention_splits(p), 3);
  EXPECT_TRUE(cuda::extend_attention_supports_head_dim(256));
  EXPECT_FALSE(cuda::extend_attention_supports_head_dim(32));
}

// The split rule (extend_split.h), host only.
TEST(CudaExtendSplitRule, SplitsOnlyWhatTheGridLeavesIdle) {
  using cuda::extend_prefix_splits;
  // 8 blocks on 132 slots, 512 prefix tiles (32K keys): 16 parts fill one wave.
  EXPECT_EQ(extend_prefix_splits({.work_blocks = 8, .max_prefix_tiles = 512, .slots = 132, .records = 1000}), 16);
  // The grid fills the GPU already: no split.
  EXPECT_EQ(extend_prefix_splits({.work_blocks = 132, .max_prefix_tiles = 512, .slots = 132, .records = 1000}), 1);
  EXPECT_EQ(extend_prefix_splits({.work_blocks = 256, .max_prefix_tiles = 512, .slots = 132, .records = 1000}), 1);
  EXPECT_EQ(extend_prefix_splits({.work_blocks = 66, .max_prefix_tiles = 512, .slots = 132, .records = 1000}), 2);
  // Short prefixes: every part keeps kExtendMinSplitTiles tiles.
  EXPECT_EQ(extend_prefix_splits({.work_blocks = 8, .max_prefix_tiles = 12, .slots = 132, .records = 1000}), 3);
  EXPECT_EQ(extend_prefix_splits({.work_blocks = 8, .max_prefix_tiles = 7, .slots = 132, .records = 1000}), 1);
  EXPECT_EQ(extend_prefix_splits({.work_blocks = 8, .max_prefix_tiles = 0, .slots = 132, .records = 1000}), 1);
  // The workspace's records bound it; no workspace, no split.
  EXPECT_EQ(extend_prefix_splits({.work_blocks = 8, .max_prefix_tiles = 512, .slots = 132, .records = 40}), 5);
  EXPECT_EQ(extend_prefix_splits({.work_blocks = 8, .max_prefix_tiles = 512, .slots = 132, .records = 0}), 1);
  // At most kExtendMaxSplits parts.
  EXPECT_EQ(extend_prefix_splits({.work_blocks = 1, .max_prefix_tiles = 1 << 20, .slots = 264, .records = 1000}),
            cuda::kExtendMaxSplits);
  EXPECT_EQ(extend_prefix_splits({.work_blocks = 0, .max_prefix_tiles = 512, .slots = 132, .records = 1000}), 1);
}

}  // namespace
}  // namespace nibble::backend
