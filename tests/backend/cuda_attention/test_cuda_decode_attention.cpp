// CUDA paged decode attention against the CPU oracle: the test quantizes random K/V into pages with
// quant::quantize_head_vector (rotated first when the cache is), dequantizes those same bytes with
// quant::dequantize_head_vector, and computes softmax attention in double. The kernel sees exactly
// the stored values, so what remains is float32 arithmetic (and, where V is nvfp4, p rounded to
// f16; where K is nvfp4, q rounded to f16, which the oracle models: round_q_as_kernel): the
// tolerance is stated per format below relative to the largest |V| (outputs are convex
// combinations of V rows). Outputs are poisoned (NaN bytes) before every run, so an unwritten element fails.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "backend/cuda/decode_attention.h"
#include "backend/cuda/decode_kernel_args.h"  // kMaxGroupPerBlock: the heads that share q's f16 scaling
#include "backend/cuda/gemv.h"
#include "backend/cuda_attention/late_writer.h"
#include "backend/cuda_common/cuda_test_util.h"
#include "cache/page_layout.h"
#include "common/error.h"
#include "quant/bf16.h"
#include "quant/hadamard.h"
#include "quant/kv_format.h"

namespace nibble::cuda {
namespace {

using quant::KvDtype;
using quant::Rotation;
using test::DeviceBuffer;

// |gpu - oracle| <= tolerance · max|V̂| + tolerance · |oracle|. exact_p: DecodeAttentionParams::exact_p.
double tolerance(KvDtype dtype, bool exact_p) {
  switch (dtype) {
    case KvDtype::kF32: return 5e-5;   // f32 values, f32 accumulation over up to 128K tokens
    case KvDtype::kBF16: return 1e-4;  // tensor cores: q and p as bf16 hi+lo pairs (~16 significant bits)
    case KvDtype::kFP8: return 1e-4;   // unit values e4m3 exact; g folded into q / output
    // e2m1 · e4m3 exact in f32, g folded as for fp8; P enters P·V as one f16 (decode_attention_tc.cuh, kOneP):
    // up to 2^-12 = 2.4e-4 of max|V| when every p of an output rounds the same way.
    // (exact_p: as hi + lo halves, as for the other formats.)
    case KvDtype::kNVFP4: return exact_p ? 1e-4 : 3e-4;
    case KvDtype::kK8V4: return exact_p ? 1e-4 : 3e-4;
  }
  return 0;
}

struct RunSpec {
  KvDtype dtype = KvDtype::kBF16;
  int head_dim = 128;
  int kv_heads = 2;
  int group = 4;
  int page_size = 64;
  std::vector<int32_t> seq_lens;
  Rotation rotation = Rotation::kNone;
  bool q_bf16 = false;
  std::vector<int64_t> chunk_variants = {0, 64};  // 0 = the plan's heuristic; 64 = many splits
  // >= 0: the plan is offered only that one of the format's long-item builds (decode_long_item_builds),
  // so that small runs reach the 8-warp one too; -1: all of them, as the engine.
  int only_long_build = -1;
  // DecodePlanInputs::span_units_warps (-1: the plan's rule) and the SMs the plan is sized for (0: the
  // device's): a few SMs let small runs make units that span sequences.
  int32_t span_units = -1;
  int64_t plan_sms = 0;
  // The plan's own rule (span_units -1) must give units that span sequences (mixed contexts,
  // decode_plan.h "Mixed lengths"), else the run tests something else.
  bool expect_spanning = false;
  // The plan is offered the format's short-item build (decode_short_item_warps: 8-warp blocks, one
  // 16-token chunk per warp, for 128-token items on a grid of one block per SM), as the engine; off:
  // those items run 4-warp blocks, two chunks per warp.
  bool short_item_build = true;
  float g_k = 0.8f;
  float g_v = 1.3f;
  uint32_t seed = 7;
  // The split merge triggers its dependents at its start (DecodeAttentionParams::early_dependents)
  // and a bf16 GEMV launched programmatically right behind it reads the output: its products must
  // be those of the output the attention left (a read before the merge finished gives NaN: the
  // output is poisoned before every run).
  bool product_after = false;
  // The attention runs with DecodeAttentionParams::prefix_ready, behind a kernel that writes some
  // tokens' K/V late (late_writer.h: it lets the attention start, then writes ~100 us later; until
  // then those slots hold 0xFF bytes, NaN in every format):
  //   kLast   each sequence's last token, as the engine's KV write does: the results must be exact
  //           (the chunk holding it is copied after the wait);
  //   kFirst  token 0 instead, breaking prefix_ready's contract: the tensor-core kernel copies that
  //           chunk before its wait, so outputs must come out NaN — proof that the early copies happen.
  enum class LateWrite { kNone, kLast, kFirst };
  LateWrite late = LateWrite::kNone;
  bool exact_p = false;  // DecodeAttentionParams::exact_p (the CUDA backend's exact mode)
  // DecodeAttentionParams::pair_merge; expect_pairs: every variant's launch must merge its items in
  // cluster pairs (TcItems::kPair, decode_pair_merge.cuh), else the run tests something else.
  bool pair_merge = true;
  bool expect_pairs = false;
  // K's magnitude ramps along each sequence: token t of n is scaled by 1 + k_ramp · t / (n - 1)
  // (k_ramp > 0: the scores' spread, and their running max, grow towards the end), or by
  // 1 - k_ramp · (1 - t / (n - 1)) (k_ramp < 0: the largest scores come first).
  float k_ramp = 0.0f;
  // > 0: the call runs this many times more on the same inputs, and every output must equal the first
  // run's bit for bit: the kernel fixes the order of its merges (the warps', the pairs', the split
  // merge), not whichever warp or block ends first.
  int repeats = 0;
};

// x rounded to the nearest f16 (ties to even; |x| < 2^15, subnormals included).
double round_to_f16(double x) {
  if (x == 0.0) return x;
  int e2 = 0;
  std::frexp(x, &e2);                                // |x| in [2^(e2-1), 2^e2)
  const int ulp_exp = std::max(e2 - 1, -14) - 10;    // 10 fraction bits; subnormals below 2^-14
  return std::ldexp(std::nearbyint(std::ldexp(x, -ulp_exp)), ulp_exp);
}

// Where K is nvfp4 and exact_p is off, the kernel enters q into Q·K^T as one f16
// (decode_attention_tc.cuh, kOneQ): x = q · q_multiplier · 2^8 in f32, scaled by 2^e so that the
// largest |x| of the block's heads (one GQA group chunk of kMaxGroupPerBlock heads) is in [2^13,
// 2^14), rounded to f16. This models that rounding on q of the heads q_head0 .. q_head0 + n - 1
// (rotated and normalized already where the cache is rotated); q_multiplier as decode_attention.cpp
// forms it.
void round_q_as_kernel(double* q, int n, int d, double softmax_scale, double g_k, bool rotated) {
  constexpr double kLog2e = 1.4426950408889634;
  const double root_d = std::sqrt(static_cast<double>(d));
  const float q_multiplier = static_cast<float>(softmax_scale * kLog2e * g_k * (rotated ? 1.0 / root_d : 1.0));
  const double mult = static_cast<double>(q_multiplier * 256.0f) * (rotated ? root_d : 1.0);
  std::vector<double> x(static_cast<size_t>(n) * d);
  double amax = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = static_cast<float>(q[i] * mult);
    amax = std::max(amax, std::abs(x[i]));
  }
  if (amax == 0) return;
  int x_exp = 0;
  std::frexp(amax, &x_exp);
  const int e = 14 - x_exp;
  for (size_t i = 0; i < x.size(); ++i) q[i] = std::ldexp(round_to_f16(std::ldexp(x[i], e)), -e) / mult;
}

// Normalized Walsh–Hadamard in double (the oracle's own, independent of quant::hadamard_inplace).
void hadamard_f64(std::vector<double>& x) {
  const size_t n = x.size();
  for (size_t half = 1; half < n; half *= 2)
    for (size_t i = 0; i < n; i += 2 * half)
      for (size_t j = i; j < i + half; ++j) {
        const double a = x[j], b = x[j + half];
        x[j] = a + b, x[j + half] = a - b;
      }
  for (double& v : x) v /= std::sqrt(static_cast<double>(n));
}

std::string describe(const RunSpec& r, int64_t chunk) {
  std::string lens;
  for (int32_t l : r.seq_lens) lens += std::to_string(l) + ",";
  return std::string(quant::kv_dtype_name(r.dtype)) + " d=" + std::to_string(r.head_dim) + " kv_heads=" +
         std::to_string(r.kv_heads) + " group=" + std::to_string(r.group) + " page=" + std::to_string(r.page_size) +
         " lens=" + lens + (r.rotation == Rotation::kHadamard ? " rotated" : "") + (r.q_bf16 ? " q=bf16" : "") +
         " chunk=" + (chunk ? std::to_string(chunk) : std::string("auto")) + (r.pair_merge ? "" : " merge-kernel");
}

void run_and_compare(const RunSpec& r) {
  std::mt19937 rng(r.seed + r.head_dim * 31 + r.group * 7 + r.page_size);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int d = r.head_dim;
  const int64_t num_seqs = static_cast<int64_t>(r.seq_lens.size());
  const int64_t num_q_heads = static_cast<int64_t>(r.kv_heads) * r.group;
  const cache::PageLayout layout({.num_layers = 1, .kv_heads = r.kv_heads, .head_dim = d}, r.dtype, r.page_size);
  const cache::KvPartLayout& kl = layout.k(0);
  const cache::KvPartLayout& vl = layout.v(0);
  const auto pt = test::make_page_tables(r.seq_lens, r.page_size, rng);

  // Pages: quantized random K/V; the oracle keeps the dequantized values [seq][head][t][d].
  // Slots no token was written to hold 0xFF bytes (NaN in every format): a kernel that lets a byte past
  // a sequence's end (data or an nvfp4 scale sharing a 16-byte piece) into its result fails.
  std::vector<uint8_t> pool(pt.num_pages * layout.page_bytes(), 0xFF);
  std::vector<std::vector<float>> k_hat(num_seqs * r.kv_heads), v_hat(num_seqs * r.kv_heads);
  double v_max = 0;
  std::vector<float> x(d);
  for (int64_t s = 0; s < num_seqs; ++s) {
    for (int64_t h = 0; h < r.kv_heads; ++h) {
      auto& kh = k_hat[s * r.kv_heads + h];
      auto& vh = v_hat[s * r.kv_heads + h];
      kh.resize(static_cast<size_t>(r.seq_lens[s]) * d);
      vh.resize(static_cast<size_t>(r.seq_lens[s]) * d);
      for (int64_t t = 0; t < r.seq_lens[s]; ++t) {
        uint8_t* page = pool.data() + pt.table[s * pt.max_pages + t / r.page_size] * layout.page_bytes();
        const int64_t slot = t % r.page_size;
        for (int part = 0; part < 2; ++part) {
          const cache::KvPartLayout& L = part == 0 ? kl : vl;
          const float along = r.seq_lens[s] > 1 ? static_cast<float>(t) / static_cast<float>(r.seq_lens[s] - 1) : 0.0f;
          const float ramp = r.k_ramp >= 0.0f ? 1.0f + r.k_ramp * along : 1.0f - r.k_ramp * (1.0f - along);
          const float magnitude = part == 0 ? (0.5f + 2.5f * static_cast<float>(rng() % 1000) / 1000.0f) * ramp : 1.0f;
          for (float& e : x) e = normal(rng) * magnitude;
          if (r.rotation == Rotation::kHadamard) quant::hadamard_inplace(x.data(), d);
          const float g = part == 0 ? r.g_k : r.g_v;
          quant::quantize_head_vector(L.format, x.data(), d, g, page + L.data_at(h, slot), page + L.scales_at(h, slot));
          float* dst = (part == 0 ? kh.data() : vh.data()) + t * d;
          quant::dequantize_head_vector(L.format, page + L.data_at(h, slot), page + L.scales_at(h, slot), d, g, dst);
          if (part == 1)
            for (int i = 0; i < d; ++i) v_max = std::max(v_max, std::abs(static_cast<double>(dst[i])));
        }
      }
    }
  }

  // q [num_seqs][num_q_heads][d]: f32, or bf16 whose exact values the oracle uses.
  std::vector<float> q(num_seqs * num_q_heads * d);
  std::vector<uint16_t> q_bits(q.size());
  for (size_t i = 0; i < q.size(); ++i) {
    q[i] = normal(rng);
    if (r.q_bf16) q_bits[i] = quant::bf16_from_f32(q[i]), q[i] = quant::f32_from_bf16(q_bits[i]);
  }
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));

  // Oracle: softmax(scale · q·K̂) V̂ in double; with rotation, q is rotated in and the output out
  // (and where the kernel rounds q to f16, q as it rounds it: round_q_as_kernel).
  std::vector<double> q_in(q.begin(), q.end());  // [seq][q head][d], rotated where the cache is
  for (int64_t s = 0; s < num_seqs; ++s) {
    for (int64_t qh = 0; qh < num_q_heads; ++qh) {
      std::vector<double> qv(q_in.begin() + (s * num_q_heads + qh) * d, q_in.begin() + (s * num_q_heads + qh + 1) * d);
      if (r.rotation == Rotation::kHadamard) hadamard_f64(qv);
      std::copy(qv.begin(), qv.end(), q_in.begin() + (s * num_q_heads + qh) * d);
    }
    if (r.dtype == KvDtype::kNVFP4 && !r.exact_p) {
      for (int64_t kv = 0; kv < r.kv_heads; ++kv) {
        for (int h0 = 0; h0 < r.group; h0 += detail::kMaxGroupPerBlock) {
          const int n = std::min(detail::kMaxGroupPerBlock, r.group - h0);
          round_q_as_kernel(q_in.data() + (s * num_q_heads + kv * r.group + h0) * d, n, d, static_cast<float>(scale), r.g_k,
                            r.rotation == Rotation::kHadamard);
        }
      }
    }
  }
  std::vector<double> expected(q.size());
  for (int64_t s = 0; s < num_seqs; ++s) {
    for (int64_t qh = 0; qh < num_q_heads; ++qh) {
      const auto& kh = k_hat[s * r.kv_heads + qh / r.group];
      const auto& vh = v_hat[s * r.kv_heads + qh / r.group];
      const auto q_at = q_in.begin() + (s * num_q_heads + qh) * d;
      const std::vector<double> qv(q_at, q_at + d);
      const int64_t n = r.seq_lens[s];
      std::vector<double> score(n);
      double m = -INFINITY;
      for (int64_t t = 0; t < n; ++t) {
        double dot = 0;
        for (int i = 0; i < d; ++i) dot += qv[i] * kh[t * d + i];
        score[t] = dot * scale;
        m = std::max(m, score[t]);
      }
      double denom = 0;
      std::vector<double> o(d, 0.0);
      for (int64_t t = 0; t < n; ++t) {
        const double p = std::exp(score[t] - m);
        denom += p;
        for (int i = 0; i < d; ++i) o[i] += p * vh[t * d + i];
      }
      for (double& e : o) e /= denom;
      if (r.rotation == Rotation::kHadamard) hadamard_f64(o);
      std::copy(o.begin(), o.end(), expected.begin() + (s * num_q_heads + qh) * d);
    }
  }

  // late: the written image goes to d_src; the pool starts with the late tokens' slots poisoned.
  std::vector<int64_t> ranges;  // [n][2] byte offset, length
  std::vector<uint8_t> poisoned = pool;
  if (r.late != RunSpec::LateWrite::kNone) {
    for (int64_t s = 0; s < num_seqs; ++s) {
      const int64_t t = r.late == RunSpec::LateWrite::kLast ? r.seq_lens[s] - 1 : 0;
      const int64_t page = pt.table[s * pt.max_pages + t / r.page_size] * layout.page_bytes();
      const int64_t slot = t % r.page_size;
      for (int64_t h = 0; h < r.kv_heads; ++h) {
        for (const cache::KvPartLayout* L : {&kl, &vl}) {
          ranges.push_back(page + L->data_at(h, slot));
          ranges.push_back(L->data_row_bytes);
          if (L->scale_row_bytes > 0) {
            ranges.push_back(page + L->scales_at(h, slot));
            ranges.push_back(L->scale_row_bytes);
          }
        }
      }
    }
    for (size_t i = 0; i < ranges.size(); i += 2) std::fill_n(poisoned.begin() + ranges[i], ranges[i + 1], 0xFF);
  }
  const DeviceBuffer d_pool = DeviceBuffer::from(poisoned);
  const DeviceBuffer d_src = r.late != RunSpec::LateWrite::kNone ? DeviceBuffer::from(pool) : DeviceBuffer();
  const DeviceBuffer d_ranges = DeviceBuffer::from(ranges);
  const DeviceBuffer d_q = r.q_bf16 ? DeviceBuffer::from(q_bits) : DeviceBuffer::from(q);
  const DeviceBuffer d_pt = DeviceBuffer::from(pt.table);
  DeviceBuffer d_out(q.size() * sizeof(float));
  const double tol = tolerance(r.dtype, r.exact_p);

  auto long_builds = decode_long_item_builds(kl.format, vl.format, d);
  for (int i = 0; i < kDecodeLongItemBuilds; ++i) {
    if (r.only_long_build >= 0 && i != r.only_long_build) long_builds[i] = {};
  }
  for (int64_t chunk : r.chunk_variants) {
    const DecodeSplitPlan plan = plan_decode_splits({.seq_lens = r.seq_lens,
                                                     .num_kv_heads = r.kv_heads,
                                                     .group_chunks = decode_group_chunks(num_q_heads, r.kv_heads),
                                                     .num_sms = r.plan_sms > 0 ? r.plan_sms
                                                                                : test::device_sm_count(),
                                                     .long_items = long_builds,
                                                     .short_item_warps = r.short_item_build
                                                                             ? decode_short_item_warps(kl.format, vl.format, d)
                                                                             : 0,
                                                     .force_chunk_tokens = chunk,
                                                     .span_units_warps = r.span_units});
    // A forced units build must give units that span sequences, or this run tests something else.
    if (r.span_units > 0 && chunk == 0) {
      ASSERT_TRUE(plan.spans_units()) << r.span_units << " warps, " << plan.num_work << " items";
      ASSERT_EQ(plan.block_warps, r.span_units);
    }
    if (r.expect_spanning && chunk == 0) ASSERT_TRUE(plan.spans_units()) << plan.num_work << " items";
    const DeviceBuffer d_plan = DeviceBuffer::from(plan.packed());
    DeviceBuffer partial_out(std::max<int64_t>(1, decode_partial_out_floats(plan, num_q_heads, d)) * sizeof(float));
    DeviceBuffer partial_lse(static_cast<size_t>(plan.num_work) * num_q_heads * sizeof(float));
    d_out.fill(0xFF);  // NaN
    partial_out.fill(0xFF);
    partial_lse.fill(0xFF);
    // product_after: y [num_seqs][kProductRows] = bf16(out row) · W^T, W random bf16, on a stream of
    // its own (programmatic launch needs one), set up before the attention is launched.
    constexpr int64_t kProductRows = 64;
    const int64_t width = num_q_heads * d;
    std::vector<uint16_t> w_bits;
    DeviceBuffer d_w, d_y;
    cudaStream_t stream = nullptr;
    if (r.product_after || r.late != RunSpec::LateWrite::kNone) {
      NIBBLE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    }
    if (r.late != RunSpec::LateWrite::kNone) {
      // Every variant starts from the poisoned pool (the previous one's writer repaired it).
      NIBBLE_CUDA_CHECK(cudaMemcpy(d_pool.as<uint8_t>(), poisoned.data(), poisoned.size(), cudaMemcpyHostToDevice));
    }
    if (r.product_after) {
      w_bits.resize(static_cast<size_t>(kProductRows * width));
      for (uint16_t& b : w_bits) b = quant::bf16_from_f32(normal(rng) * 0.05f);
      d_w = DeviceBuffer::from(w_bits);
      d_y = DeviceBuffer(static_cast<size_t>(num_seqs * kProductRows) * sizeof(float));
      d_y.fill(0xFF);
    }
    // The fills run on the legacy default stream, which a non-blocking stream does not wait for.
    NIBBLE_CUDA_CHECK(cudaDeviceSynchronize());
    if (r.late != RunSpec::LateWrite::kNone) {
      test::launch_late_writer(d_pool.as<uint8_t>(), d_src.as<uint8_t>(), d_ranges.as<int64_t>(),
                               static_cast<int>(ranges.size() / 2), 100'000, stream);
    }
    const DecodeAttentionParams params{.q = d_q.as<void>(),
                                       .q_dtype = r.q_bf16 ? ActivationDtype::kBF16 : ActivationDtype::kF32,
                                       .out = d_out.as<float>(),
                                       .pool = d_pool.as<uint8_t>(),
                                       .page_tables = d_pt.as<int32_t>(),
                                       .plan_device = d_plan.as<int32_t>(),
                                       .plan = &plan,
                                       .partial_out = partial_out.as<float>(),
                                       .partial_lse = partial_lse.as<float>(),
                                       .num_q_heads = num_q_heads,
                                       .max_pages_per_seq = pt.max_pages,
                                       .page_bytes = layout.page_bytes(),
                                       .k_layout = kl,
                                       .v_layout = vl,
                                       .k_global_scale = r.g_k,
                                       .v_global_scale = r.g_v,
                                       .rotation = r.rotation,
                                       .softmax_scale = static_cast<float>(scale),
                                       .early_dependents = r.product_after,
                                       .prefix_ready = r.late != RunSpec::LateWrite::kNone,
                                       .exact_p = r.exact_p,
                                       .pair_merge = r.pair_merge};
    if (r.expect_pairs) {
      const detail::DecodeLaunch launch = detail::prepare_decode_launch(params);
      EXPECT_EQ(launch.tc_items, detail::TcItems::kPair) << describe(r, chunk) << ": plan items " << plan.num_work;
      EXPECT_FALSE(launch.split) << describe(r, chunk);
    }
    decode_attention(params, stream);
    if (r.product_after) {
      GemvParams gp{.x = d_out.as<float>(), .rows = num_seqs, .k = width, .segments = {}, .num_segments = 1};
      gp.segments[0] = {.w = d_w.as<uint16_t>(), .bias = nullptr, .out = d_y.as<float>(), .n = kProductRows};
      gp.programmatic_launch = true;
      gemv_bf16(gp, stream);
    }
    NIBBLE_CUDA_CHECK(cudaDeviceSynchronize());
    if (stream != nullptr) NIBBLE_CUDA_CHECK(cudaStreamDestroy(stream));
    const std::vector<float> actual = d_out.to_host<float>();
    for (int rep = 0; rep < r.repeats; ++rep) {
      ASSERT_TRUE(!r.product_after && r.late == RunSpec::LateWrite::kNone) << "repeats run on the default stream";
      d_out.fill(0xFF);
      decode_attention(params, nullptr);
      NIBBLE_CUDA_CHECK(cudaDeviceSynchronize());
      const std::vector<float> again = d_out.to_host<float>();
      ASSERT_EQ(std::memcmp(again.data(), actual.data(), actual.size() * sizeof(float)), 0)
          << describe(r, chunk) << ": run " << rep + 2 << " differs from the first";
    }
    if (r.product_after) {
      // Against the product of the output as it ended up (tensor-core f32 sums of bf16 products: ~1e-6 of the
      // magnitude); a read of the poisoned output gives NaN.
      const std::vector<float> y = d_y.to_host<float>();
      int64_t bad_products = 0;
      for (int64_t s = 0; s < num_seqs; ++s) {
        for (int64_t n = 0; n < kProductRows; ++n) {
          double want = 0, magnitude = 0;
          for (int64_t i = 0; i < width; ++i) {
            const double term = static_cast<double>(quant::f32_from_bf16(w_bits[n * width + i])) *
                                quant::f32_from_bf16(quant::bf16_from_f32(actual[s * width + i]));
            want += term;
            magnitude += std::abs(term);
          }
          const double got = y[s * kProductRows + n];
          if (!(std::abs(got - want) <= 1e-4 * magnitude + 1e-30)) ++bad_products;
        }
      }
      EXPECT_EQ(bad_products, 0) << describe(r, chunk) << ": the product launched behind the attention read "
                                 << "something other than its output";
    }
    int64_t bad = 0, first_bad = -1;
    double worst = 0;
    for (size_t i = 0; i < actual.size(); ++i) {
      const double err = std::abs(static_cast<double>(actual[i]) - expected[i]);
      const double allowed = tol * v_max + tol * std::abs(expected[i]);
      if (!(err <= allowed)) {  // NaN fails too
        if (first_bad < 0) first_bad = static_cast<int64_t>(i);
        ++bad;
      }
      if (std::isfinite(err)) worst = std::max(worst, err / std::max(v_max, 1e-30));
    }
    if (r.late == RunSpec::LateWrite::kFirst) {
      EXPECT_GT(bad, 0) << describe(r, chunk) << ": token 0 was written after the attention started, yet "
                        << "every output is right: the kernel did not copy the prefix before its wait";
      continue;
    }
    EXPECT_EQ(bad, 0) << describe(r, chunk) << ": " << bad << " of " << actual.size()
                      << " outputs off; first at index " << first_bad << " (seq "
                      << (first_bad >= 0 ? first_bad / (num_q_heads * d) : -1) << ", head "
                      << (first_bad >= 0 ? first_bad / d % num_q_heads : -1) << ", dim "
                      << (first_bad >= 0 ? first_bad % d : -1) << "): expected "
                      << (first_bad >= 0 ? expected[first_bad] : 0) << " got " << (first_bad >= 0 ? actual[first_bad] : 0)
                      << "; worst finite error / max|V| = " << worst << ", plan items " << plan.num_work;
  }
}

// ---- the sweep: formats × head_dim × GQA, each over page sizes and batches ------------------------

using SweepParam = std::tuple<KvDtype, int, int>;  // dtype, head_dim, group

class CudaDecodeSweep : public testing::TestWithParam<SweepParam> {};

TEST_P(CudaDecodeSweep, MatchesOracleOverPageSizesLengthsAndBatches) {
  NIBBLE_SKIP_WITHOUT_GPU();
  const auto [dtype, head_dim, group] = GetParam();
  for (int page_size : {16, 32, 64}) {
    std::vector<std::vector<int32_t>> batches;
    for (int32_t len : {1, 7, 16, 33, 100, 1000, 4097}) batches.push_back({len});
    batches.push_back({4097, 1, 100, 33, 7});  // batch 5, mixed lengths
    for (const auto& lens : batches) {
      run_and_compare({.dtype = dtype, .head_dim = head_dim, .kv_heads = 2, .group = group, .page_size = page_size,
                       .seq_lens = lens});
      if (HasFailure()) return;  // one failing shape is enough to read
    }
  }
}

std::string sweep_name(const testing::TestParamInfo<SweepParam>& info) {
  const auto [dtype, head_dim, group] = info.param;
  return std::string(quant::kv_dtype_name(dtype)) + "_d" + std::to_string(head_dim) + "_gqa" + std::to_string(group);
}

INSTANTIATE_TEST_SUITE_P(Formats, CudaDecodeSweep,
                         testing::Combine(testing::Values(KvDtype::kF32, KvDtype::kBF16, KvDtype::kFP8, KvDtype::kNVFP4,
                                                          KvDtype::kK8V4),
                                          testing::Values(64, 128, 256), testing::Values(1, 2, 4, 8)),
                         sweep_name);

// ---- rotation, bf16 q, group sizes that are not 1/2/4/8, long contexts ----------------------------

class CudaDecodeFormat : public testing::TestWithParam<KvDtype> {};

TEST_P(CudaDecodeFormat, RotatedCacheRotatesQAndOutputInside) {
  NIBBLE_SKIP_WITHOUT_GPU();
  for (int head_dim : {64, 128, 256}) {
    run_and_compare({.dtype = GetParam(), .head_dim = head_dim, .group = 4, .page_size = 32,
                     .seq_lens = {300, 1, 65, 2000, 17}, .rotation = Rotation::kHadamard});
  }
}

// Page sizes the sweep does not take, for the kernels' constant-time cursor: the advance to a warp's
// next step (64 or 112 tokens) spans 1-2 pages and a remainder (48), lands inside the same page or
// wraps once (128, 256).
TEST_P(CudaDecodeFormat, OtherPageSizes) {
  NIBBLE_SKIP_WITHOUT_GPU();
  for (int page_size : {48, 128, 256}) {
    for (int group : {1, 4}) {
      for (const std::vector<int32_t>& lens : {std::vector<int32_t>{1000}, std::vector<int32_t>{4097, 1, 300, 33}}) {
        run_and_compare({.dtype = GetParam(), .head_dim = 128, .kv_heads = 2, .group = group, .page_size = page_size,
                         .seq_lens = lens});
        if (HasFailure()) return;
      }
    }
  }
}

TEST_P(CudaDecodeFormat, Bf16Query) {
  NIBBLE_SKIP_WITHOUT_GPU();
  run_and_compare({.dtype = GetParam(), .head_dim = 128, .group = 8, .page_size = 16, .seq_lens = {129, 4, 777},
                   .q_bf16 = true});
}

TEST_P(CudaDecodeFormat, GroupSizesOtherThanPowersOfTwoAndAboveEight) {
  NIBBLE_SKIP_WITHOUT_GPU();
  for (int group : {3, 6, 12, 16}) {
    run_and_compare({.dtype = GetParam(), .head_dim = 128, .kv_heads = 1, .group = group, .page_size = 64,
                     .seq_lens = {500, 3}});
  }
}

TEST_P(CudaDecodeFormat, LongContext128K) {
  NIBBLE_SKIP_WITHOUT_GPU();
  run_and_compare({.dtype = GetParam(), .head_dim = 128, .kv_heads = 1, .group = 4, .page_size = 64,
                   .seq_lens = {131072}, .chunk_variants = {0, 8192}});
}

// nvfp4 at head_dim 64 and 128 has five tensor-core builds, 16- and 32-token warp steps (decode_tc_steps:
// plans whose items are all <= kTcShortItemTokens = 128 run the 16-token one) and, for 32-token steps,
// the few-blocks build (items < kDecodeLongItemTokens on a small grid: tc_few_blocks) and the long-item
// builds of 16 and 8 warps per block (items >= kDecodeWideItemTokens on one wave: tc_warps): items of
// 64 and 128 tokens take the first, 192 and 256 the few-blocks one, 1024 the any-plan 32-token one, 4096
// the 16-warp one (the 8-warp one: LongItemBuildsMatchTheOracle), over lengths that end mid-chunk,
// mid-step and on a page.
TEST(CudaDecodeNvfp4Steps, BothStepBuildsMatchTheOracle) {
  NIBBLE_SKIP_WITHOUT_GPU();
  for (int head_dim : {64, 128}) {
    for (int group : {1, 4, 8}) {
      for (const std::vector<int32_t>& lens :
           {std::vector<int32_t>{1}, {17}, {40}, {128}, {1000}, {4097, 1, 100, 33, 7}}) {
        run_and_compare({.dtype = KvDtype::kNVFP4, .head_dim = head_dim, .kv_heads = 2, .group = group,
                         .page_size = 32, .seq_lens = lens, .chunk_variants = {64, 128, 192, 256, 1024, 4096}});
        if (HasFailure()) return;
      }
    }
  }
}

// The long-item builds alone (16 and 8 warps per block; each offered alone, so both run on this small
// grid), with sequences that end mid-step, on a page, and shorter than one item: small enough for
// compute-sanitizer (scripts/gpu_check.sh runs memcheck and racecheck on it).
TEST(CudaDecodeNvfp4Steps, LongItemBuildsMatchTheOracle) {
  NIBBLE_SKIP_WITHOUT_GPU();
  for (int head_dim : {64, 128}) {
    for (int build = 0; build < kDecodeLongItemBuilds; ++build) {
      for (int group : {4, 8}) {
        run_and_compare({.dtype = KvDtype::kNVFP4, .head_dim = head_dim, .kv_heads = 2, .group = group,
                         .page_size = 16, .seq_lens = {8197, 4096, 33}, .chunk_variants = {4096},
                         .only_long_build = build});
        if (HasFailure()) return;
      }
    }
  }
}

// Units that span sequences (decode_plan.h), in both long-item builds: a block runs its unit's items
// one after the other, a sequence cut between units is merged, one held whole in a unit is written
// directly; lengths that end mid-step, on a page, below one round and of one token, and trailing
// padding sequences (2 and 16 tokens, as the engine pads) in units of their own; grouped heads in
// one and two head chunks, rotation, both P·V builds. The plan is sized for 8 SMs, so that these small runs make
// units (8 of ~4K tokens at 8 warps, 4 of ~8K at 16); the chunk variant 0 is the units plan.
TEST(CudaDecodeNvfp4Steps, SpanningUnitsMatchTheOracle) {
  NIBBLE_SKIP_WITHOUT_GPU();
  for (int head_dim : {64, 128}) {
    for (int warps : {8, 16}) {
      for (int group : {4, 12}) {
        // The exact build (p as hi + lo halves: exact_p, the f32-weights mode) at one group size.
        for (const bool exact_p : {false, true}) {
          if (exact_p && group != 4) continue;
          run_and_compare({.dtype = KvDtype::kNVFP4, .head_dim = head_dim, .kv_heads = 2, .group = group,
                           .page_size = 16, .seq_lens = {8197, 4096, 33, 20000, 1, 1000, 2, 16},
                           .rotation = group == 12 ? Rotation::kHadamard : Rotation::kNone, .chunk_variants = {0},
                           .span_units = warps, .plan_sms = 8, .exact_p = exact_p});
          if (HasFailure()) return;
        }
      }
    }
  }
}

// Every sequence in two items on a long-item build (8 x 32K's and 8 x 128K's plans in small): the
// two blocks of a (sequence, head chunk) run as a cluster and merge in distributed shared memory
// (decode_pair_merge.cuh), each block writing half the heads. Both long-item builds, head_dim 64
// and 128; groups of 1 (the second block writes no head), 4 (two each) and 12 (head chunks of 8 and
// 4); rotation (each block rotates its own heads back); both P·V builds; second items of one token
// (4097), mid-step and a whole item; the same runs on the merge kernel (pair_merge off) against the
// same oracle; and a bf16 GEMV launched programmatically behind the attention, which now triggers it
// at its start itself (no merge kernel in between).
TEST(CudaDecodeNvfp4Steps, ClusterPairsMatchTheOracle) {
  NIBBLE_SKIP_WITHOUT_GPU();
  for (int head_dim : {64, 128}) {
    for (int build = 0; build < kDecodeLongItemBuilds; ++build) {
      for (int group : {1, 4, 12}) {
        for (const bool pairs : {true, false}) {
          RunSpec r{.dtype = KvDtype::kNVFP4, .head_dim = head_dim, .kv_heads = 2, .group = group, .page_size = 16,
                    .seq_lens = {8192, 4097, 5000, 7999}, .chunk_variants = {4096}, .only_long_build = build};
          r.rotation = group == 12 ? Rotation::kHadamard : Rotation::kNone;
          r.exact_p = group == 1;
          r.product_after = group == 4 && head_dim == 128;
          r.pair_merge = pairs;
          r.expect_pairs = pairs;
          run_and_compare(r);
          if (HasFailure()) return;
        }
      }
    }
  }
}

// The same call again and again gives the same bits: the warps of a block merge in warp order
// whatever order they end in, the cluster pairs (rows pushed to each other) and the split merge in
// item order. nvfp4 on both long-item builds (8- and 16-warp blocks), in cluster pairs (4096-token
// items, two per sequence) and with the merge kernel (1024); fp8 and bf16 on 4-warp blocks; each
// call 24 times.
TEST(CudaDecodeMerge, RepeatedCallsAreBitIdentical) {
  NIBBLE_SKIP_WITHOUT_GPU();
  for (const KvDtype dtype : {KvDtype::kNVFP4, KvDtype::kFP8, KvDtype::kBF16}) {
    for (int build = 0; build < (dtype == KvDtype::kNVFP4 ? kDecodeLongItemBuilds : 1); ++build) {
      RunSpec r{.dtype = dtype, .head_dim = 128, .kv_heads = 2, .group = 4, .page_size = 16,
                .seq_lens = {8192, 4097, 5000, 7999}, .chunk_variants = {4096, 1024}, .repeats = 23};
      if (dtype == KvDtype::kNVFP4) r.only_long_build = build;
      run_and_compare(r);
      if (HasFailure()) return;
    }
  }
}

// A batch of mixed contexts with the engine's padding at its end, planned by the rule (decode_plan.h,
// "Mixed lengths"; sized for 8 SMs so that this small batch makes units): nvfp4 runs spanning units,
// one of them chaining three sequences and the head of a fourth, the padding a unit of its own; fp8
// and bf16 run the chunk of the lowest estimated makespan.
TEST(CudaDecodeNvfp4Steps, MixedContextsMatchTheOracle) {
  NIBBLE_SKIP_WITHOUT_GPU();
  const std::vector<int32_t> lens = {20000, 3000, 9000, 1500, 700, 12000, 2};
  for (const KvDtype dtype : {KvDtype::kNVFP4, KvDtype::kFP8, KvDtype::kBF16}) {
    run_and_compare({.dtype = dtype, .head_dim = 128, .kv_heads = 2, .group = 4, .page_size = 16, .seq_lens = lens,
                     .chunk_variants = {0}, .plan_sms = 8, .expect_spanning = dtype == KvDtype::kNVFP4});
    if (HasFailure()) return;
  }
}

// Items of 128 to 512 tokens at the shortest contexts (few blocks) run in 8-warp blocks, one to four
// 16-token chunks per warp (the short-item build, with the plan's own items too: 1000 tokens), a
// sequence's last chunk of up to 16 tokens joined to the item before it (129 tokens: one item, its
// first warp taking two chunks; 1025 at 256: a last item of 257, three chunks for one warp), or, not
// offered it, in 4-warp blocks of two chunks per warp; grouped heads in one and two head chunks,
// rotation, lengths of 1 token, mid-chunk and mid-item. Small enough for compute-sanitizer
// (scripts/gpu_check.sh).
TEST(CudaDecodeNvfp4Steps, ShortItemBuildMatchesTheOracle) {
  NIBBLE_SKIP_WITHOUT_GPU();
  for (int head_dim : {64, 128}) {
    for (int group : {1, 4, 12}) {
      for (const bool short_items : {true, false}) {
        for (const Rotation rotation : {Rotation::kNone, Rotation::kHadamard}) {
          run_and_compare({.dtype = KvDtype::kNVFP4, .head_dim = head_dim, .kv_heads = 2, .group = group,
                           .page_size = 16, .seq_lens = {1000, 1, 129, 40, 1025, 272}, .rotation = rotation,
                           .chunk_variants = {0, 128, 256, 384, 512}, .short_item_build = short_items});
          if (HasFailure()) return;
        }
      }
    }
  }
}

// Where V is nvfp4 the kernel has a second build that takes p into P·V as exact hi + lo halves
// (DecodeAttentionParams::exact_p, the CUDA backend's exact mode with f32 weights): held to the
// tight bound of the other formats, over every step build, head_dim and group tile.
TEST(CudaDecodeExactP, Nvfp4VMatchesTheTightBound) {
  NIBBLE_SKIP_WITHOUT_GPU();
  for (const KvDtype dtype : {KvDtype::kNVFP4, KvDtype::kK8V4}) {
    for (const int head_dim : {64, 128, 256}) {
      for (const int group : {1, 4, 8, 12}) {
        run_and_compare({.dtype = dtype, .head_dim = head_dim, .kv_heads = 2, .group = group, .page_size = 16,
                         .seq_lens = {1, 40, 1000, 4097}, .chunk_variants = {0, 64, 128, 1024},
                         .exact_p = true});
        if (HasFailure()) return;
      }
    }
  }
}

// The tensor-core kernel moves its running max only when a score exceeds it by more than
// kMaxSlack (2^8 in p; decode_attention_tc.cuh) and rescales O and l then. With K's magnitude
// ramping up 16-fold along the sequence the scores' maximum climbs by ~200 (log2) over it, crossing
// the slack many times, with p up to 2^8 between rescales; ramping down, the first step's max
// holds to the end. Every tensor-core format, each step build, the exact nvfp4 build.
TEST(CudaDecodeRunningMax, ScoresThatClimbAndFallAlongTheSequence) {
  NIBBLE_SKIP_WITHOUT_GPU();
  for (const KvDtype dtype : {KvDtype::kBF16, KvDtype::kFP8, KvDtype::kNVFP4, KvDtype::kK8V4}) {
    for (const float ramp : {15.0f, -15.0f}) {
      for (const bool exact : {false, true}) {
        if (exact && dtype != KvDtype::kNVFP4) continue;
        run_and_compare({.dtype = dtype, .head_dim = 128, .kv_heads = 2, .group = 4, .page_size = 16,
                         .seq_lens = {40, 1000, 4097, 20000}, .chunk_variants = {0, 64, 1024, 4096}, .exact_p = exact,
                         .k_ramp = ramp});
        if (HasFailure()) return;
      }
    }
  }
}

// The split merge has three builds, chosen by the plan's most items per sequence (decode_reduce.cu):
// a warp per head up to 8 items, its wide build up to 32 at head_dim <= 128, a block per head above.
// Items of 64 tokens give each count on both sides of both boundaries, with and without rotation.
TEST(CudaDecodeMerge, EveryBuildAtItsItemBoundaries) {
  NIBBLE_SKIP_WITHOUT_GPU();
  for (KvDtype dtype : {KvDtype::kBF16, KvDtype::kNVFP4}) {
    for (int head_dim : {64, 128, 256}) {
      for (int items : {2, 8, 9, 16, 17, 31, 32, 33}) {
        for (Rotation rotation : {Rotation::kNone, Rotation::kHadamard}) {
          run_and_compare({.dtype = dtype, .head_dim = head_dim, .kv_heads = 2, .group = 4, .page_size = 32,
                           .seq_lens = {64 * items - 5, 3}, .rotation = rotation, .chunk_variants = {64}});
          if (HasFailure()) return;
        }
      }
    }
  }
}

// The engine's order: the merge triggers early and the o product, launched programmatically, waits
// for it (the split plans of 64-token items merge up to 16 partials; the heuristic's may not split).
TEST(CudaDecodeEarlyDependents, AProgrammaticProductBehindTheMergeReadsItsOutput) {
  NIBBLE_SKIP_WITHOUT_GPU();
  for (KvDtype dtype : {KvDtype::kBF16, KvDtype::kNVFP4}) {
    run_and_compare({.dtype = dtype, .head_dim = 128, .kv_heads = 8, .group = 4, .page_size = 64,
                     .seq_lens = {1024}, .chunk_variants = {0, 64}, .product_after = true});
    run_and_compare({.dtype = dtype, .head_dim = 128, .kv_heads = 2, .group = 8, .page_size = 16,
                     .seq_lens = {900, 1, 4000, 65}, .chunk_variants = {0, 64, 256}, .product_after = true});
  }
}

// prefix_ready (the engine's setting): the chunk holding each sequence's last token is copied after
// the wait for the kernel that writes it, the earlier ones before. Lengths that end on a chunk, in
// one, on a page; items of one chunk per warp up to several steps.
TEST_P(CudaDecodeFormat, PrefixReadyLastTokenCopiedAfterTheWait) {
  NIBBLE_SKIP_WITHOUT_GPU();
  for (int page_size : {16, 64}) {
    run_and_compare({.dtype = GetParam(), .head_dim = 128, .kv_heads = 2, .group = 4, .page_size = page_size,
                     .seq_lens = {1024, 1, 17, 16, 33, 300, 64}, .chunk_variants = {0, 64, 256},
                     .late = RunSpec::LateWrite::kLast});
    run_and_compare({.dtype = GetParam(), .head_dim = 64, .kv_heads = 1, .group = 8, .page_size = page_size,
                     .seq_lens = {2000, 48}, .chunk_variants = {0, 1024}, .late = RunSpec::LateWrite::kLast});
  }
}

// ... and the earlier chunks really are copied before the wait: written late, they come out NaN.
// Needs the attention to run beside the writer (programmatic dependent launch); a tool that
// serializes kernels (compute-sanitizer, CUDA_LAUNCH_BLOCKING=1) makes it fail, so scripts/gpu_check.sh
// leaves it out of its sanitizer runs. The f32 (CUDA-core) kernel copies everything after its wait.
TEST_P(CudaDecodeFormat, PrefixReadyEarlierTokensCopiedBeforeTheWait) {
  NIBBLE_SKIP_WITHOUT_GPU();
  if (GetParam() == KvDtype::kF32) GTEST_SKIP() << "the f32 kernel waits before every copy";
  run_and_compare({.dtype = GetParam(), .head_dim = 128, .kv_heads = 2, .group = 4, .page_size = 16,
                   .seq_lens = {1024, 40}, .chunk_variants = {0, 64}, .late = RunSpec::LateWrite::kFirst});
}

INSTANTIATE_TEST_SUITE_P(Formats, CudaDecodeFormat,
                         testing::Values(KvDtype::kF32, KvDtype::kBF16, KvDtype::kFP8, KvDtype::kNVFP4, KvDtype::kK8V4),
                         [](const testing::TestParamInfo<KvDtype>& info) {
                           return std::string(quant::kv_dtype_name(info.param));
                         });

}  // namespace
}  // namespace nibble::cuda
