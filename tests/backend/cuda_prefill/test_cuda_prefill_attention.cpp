// The tensor-core prefill attention (cuda::prefill_attention) against the CPU backend's f32
// attention (the oracle, through the seam) on the same q/k/v.
//
// Precision and tolerances. The kernel rounds q, k, v to bf16 (unit roundoff u = 2^-8) and rounds
// the probabilities P to bf16 for P·V; everything else is f32. Two kinds of input:
//  - bf16-exact inputs (q, k, v already bf16 values): the only rounding left is P. With
//    o = sum_i p_i v_i / l and |bf16(p_i) - p_i| <= u p_i, |error| <= u max|v| = 2^-8 (|v| <= 1),
//    plus f32 summation noise: max |error| <= 4e-3 is a bound, not a fit. The rounding errors are
//    independent, so the RMS error sits far below it: RMS <= 5e-4 catches systematic faults (a
//    wrong scale, a key too many) that the max bound would let through.
//  - f32 inputs (what the model passes): the input rounding adds u on v and a score perturbation of
//    about scale·sqrt(head_dim·E[q²k²])·u ~ 1.5e-3 logits (q in [-3, 3], k in [-1, 1]), so
//    max |error| <= 1.5e-2, RMS <= 3e-3.
// Sweeps: head_dim 64/128/256 × GQA 1/4/8 × lengths 1, 17, 63, 64, 65, 127, 129, 1000, 4096 ×
// every tile configuration built (cuda::prefill_tile_count: whichever becomes the default is
// tested), bf16-exact and f32 inputs, mixed-length batches, and a step of prefill and extend
// sequences run as the backend would: prefill_attention plus chunk_attention with skip_prefill.
// Each case computes the CPU oracle once and runs every tile against it.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cuda/cuda_step.h"
#include "backend/cuda/prefill_attention.h"
#include "backend/cuda_common/cuda_test_util.h"
#include "backend/step_plan.h"
#include "cache/page_layout.h"
#include "common/error.h"
#include "quant/bf16.h"
#include "wgmma_probe.h"

namespace nibble::backend {
namespace {

using cuda::test::DeviceBuffer;
using quant::KvDtype;

constexpr double kExactMaxTolerance = 4e-3;  // bf16-exact inputs: 2^-8 · max|v| (P rounding)
constexpr double kExactRmsTolerance = 5e-4;
constexpr double kF32MaxTolerance = 1.5e-2;  // f32 inputs: + input rounding
constexpr double kF32RmsTolerance = 3e-3;
constexpr double kExtendTolerance = 2e-4;    // chunk_attention's rows stay f32 (as test_cuda_chunk_attention)

struct Shape {
  int64_t head_dim = 128;
  int64_t heads = 8;
  int64_t kv_heads = 2;
};

// Tiles 1 .. prefill_tile_count(head_dim): every configuration built.
std::vector<int> all_tiles(int64_t head_dim) {
  std::vector<int> tiles(static_cast<size_t>(cuda::prefill_tile_count(head_dim)));
  std::iota(tiles.begin(), tiles.end(), 1);
  return tiles;
}

struct Errors {
  double max_abs = 0.0;
  double rms = 0.0;
};

Errors compare(const std::vector<float>& got, const std::vector<float>& want, int64_t first_row, int64_t rows,
               int64_t cols) {
  Errors e;
  double sum_sq = 0.0;
  for (int64_t i = first_row * cols; i < (first_row + rows) * cols; ++i) {
    const double d = std::isfinite(got[i]) ? std::fabs(static_cast<double>(got[i]) - want[i]) : INFINITY;
    e.max_abs = std::max(e.max_abs, d);
    sum_sq += d * d;
  }
  e.rms = std::sqrt(sum_sq / static_cast<double>(std::max<int64_t>(1, rows * cols)));
  return e;
}

std::string describe(const Shape& s, int tile, const std::vector<int64_t>& lens, bool exact) {
  std::string d = "head_dim " + std::to_string(s.head_dim) + " heads " + std::to_string(s.heads) + "/" +
                  std::to_string(s.kv_heads) + " tile " + std::to_string(tile) +
                  (exact ? " bf16-exact" : " f32") + " lens";
  for (const int64_t len : lens) d += " " + std::to_string(len);
  return d;
}

std::vector<float> random_floats(int64_t n, std::mt19937& rng, float scale, bool bf16_exact) {
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) {
    x = dist(rng);
    if (bf16_exact) x = quant::f32_from_bf16(quant::bf16_from_f32(x));
  }
  return v;
}

class CudaPrefillAttention : public ::testing::Test {
 protected:
  void SetUp() override { NIBBLE_SKIP_WITHOUT_GPU(); }

  // Prefill of sequences of `lens` new tokens (no cached prefix) on both backends, the GPU once per
  // tile; checks every tile's errors over all rows.
  void check_tiles(const Shape& s, const std::vector<int64_t>& lens, bool bf16_exact) {
    std::vector<SeqSpec> seqs;
    for (const int64_t len : lens) seqs.push_back({.prefix = 0, .len = len});
    const std::vector<int> tiles = all_tiles(s.head_dim);
    const std::vector<StepErrors> errors = run_step(s, seqs, bf16_exact, tiles);
    for (size_t i = 0; i < tiles.size(); ++i) {
      expect_within(errors[i].prefill, bf16_exact, describe(s, tiles[i], lens, bf16_exact));
    }
  }

  struct SeqSpec {
    int64_t prefix = 0;
    int64_t len = 1;
  };
  struct StepErrors {
    Errors prefill;  // rows of prefill sequences (tensor cores)
    Errors extend;   // rows of extend sequences (chunk_attention, f32)
  };

  // One step on both backends: the CPU once, the GPU once per entry of `tiles` (0: the default), each
  // into an output filled with NaN; one StepErrors per tile. Sequences with a prefix are extends:
  // their prefix K/V is written to an f32 pool first, and the GPU runs them with
  // chunk_attention(skip_prefill) after prefill_attention, as the backend does.
  std::vector<StepErrors> run_step(const Shape& s, const std::vector<SeqSpec>& seqs, bool bf16_exact,
                                   const std::vector<int>& tiles) {
    constexpr int64_t kPageSize = 16;
    const cache::PageLayout layout({.num_layers = 1, .kv_heads = s.kv_heads, .head_dim = s.head_dim}, KvDtype::kF32,
                                   kPageSize);
    const cache::KvGlobalScales scales = cache::KvGlobalScales::ones(1);
    const int64_t kv_width = s.kv_heads * s.head_dim, q_width = s.heads * s.head_dim;

    std::vector<std::vector<int32_t>> pages(seqs.size()), tokens(seqs.size());
    int32_t num_pages = 0;
    for (size_t i = 0; i < seqs.size(); ++i) {
      pages[i].resize((seqs[i].prefix + seqs[i].len + kPageSize - 1) / kPageSize);
      for (int32_t& p : pages[i]) p = num_pages++;
    }
    std::vector<uint8_t> pool(static_cast<size_t>(num_pages * layout.page_bytes()), 0);
    const KvCacheView view{pool.data(), num_pages, &layout, &scales, quant::Rotation::kNone};

    // The extends' prefixes, written by the CPU.
    std::vector<SequenceStep> prefix_steps;
    for (size_t i = 0; i < seqs.size(); ++i) {
      if (seqs[i].prefix == 0) continue;
      tokens[i].assign(seqs[i].prefix, 1);
      prefix_steps.push_back({.first_position = 0, .tokens = tokens[i], .pages = pages[i]});
    }
    if (!prefix_steps.empty()) {
      const StepPlan plan = make_step_plan(prefix_steps, kPageSize, num_pages);
      const auto k = random_floats(plan.total_tokens * kv_width, rng, 1.0f, bf16_exact);
      const auto v = random_floats(plan.total_tokens * kv_width, rng, 1.0f, bf16_exact);
      auto step = cpu.plan(plan);
      cpu.kv_write(*step, view, 0, {const_cast<float*>(k.data()), plan.total_tokens, kv_width},
                   {const_cast<float*>(v.data()), plan.total_tokens, kv_width});
    }

    std::vector<SequenceStep> steps;
    for (size_t i = 0; i < seqs.size(); ++i) {
      tokens[i].assign(seqs[i].len, 1);
      steps.push_back({.first_position = seqs[i].prefix, .tokens = tokens[i], .pages = pages[i]});
    }
    const StepPlan plan = make_step_plan(steps, kPageSize, num_pages);
    const int64_t t = plan.total_tokens;
    auto q = random_floats(t * q_width, rng, 3.0f, bf16_exact);  // sharper softmax than [-1, 1]
    auto k = random_floats(t * kv_width, rng, 1.0f, bf16_exact);
    if (key_ramp != 0.0f) {
      // Dim 0: q = 3, k = key_ramp · position / 1000 (rounded to bf16 for bf16-exact inputs), so the
      // running max keeps climbing through the sequence.
      for (size_t i = 0; i < seqs.size(); ++i) {
        for (int64_t pos = 0; pos < seqs[i].len; ++pos) {
          const int64_t row = plan.token_begin[i] + pos;
          for (int64_t h = 0; h < s.heads; ++h) q[row * q_width + h * s.head_dim] = 3.0f;
          float ramp = key_ramp * static_cast<float>(pos) / 1000.0f;
          if (bf16_exact) ramp = quant::f32_from_bf16(quant::bf16_from_f32(ramp));
          for (int64_t h = 0; h < s.kv_heads; ++h) k[row * kv_width + h * s.head_dim] = ramp;
        }
      }
    }
    const auto v = random_floats(t * kv_width, rng, 1.0f, bf16_exact);
    const AttentionShape shape{.num_heads = s.heads,
                               .num_kv_heads = s.kv_heads,
                               .head_dim = s.head_dim,
                               .scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim))};
    auto cstep = cpu.plan(plan);
    cpu.kv_write(*cstep, view, 0, {const_cast<float*>(k.data()), t, kv_width},
                 {const_cast<float*>(v.data()), t, kv_width});
    std::vector<float> want(t * q_width);
    cpu.attention(*cstep, view, 0, shape, {const_cast<float*>(q.data()), t, q_width},
                  {const_cast<float*>(k.data()), t, kv_width}, {const_cast<float*>(v.data()), t, kv_width},
                  {want.data(), t, q_width});

    // GPU: the backend's planned step supplies seq_info / work / page tables in device memory.
    auto gstep = gpu->plan(plan);
    const auto& cstep_gpu = dynamic_cast<const CudaPlannedStep&>(*gstep);
    NIBBLE_CUDA_CHECK(cudaDeviceSynchronize());
    DeviceBuffer dq = DeviceBuffer::from(q), dk = DeviceBuffer::from(k), dv = DeviceBuffer::from(v);
    DeviceBuffer dpool = DeviceBuffer::from(pool);
    DeviceBuffer workspace(static_cast<size_t>(cuda::prefill_workspace_bytes(t, s.kv_heads, s.head_dim)));
    int64_t max_new = 0;
    bool any_extend = false;
    for (const SeqSpec& sq : seqs) {
      if (sq.prefix == 0) max_new = std::max(max_new, sq.len);
      any_extend = any_extend || sq.prefix > 0;
    }
    std::vector<StepErrors> all_errors;
    for (const int tile : tiles) {
      DeviceBuffer dout = DeviceBuffer::from(std::vector<float>(t * q_width, NAN));
      cuda::prefill_attention({.q = dq.as<float>(),
                               .k = dk.as<float>(),
                               .v = dv.as<float>(),
                               .out = dout.as<float>(),
                               .seq_info = cstep_gpu.seq_info(),
                               .num_seqs = plan.num_seqs(),
                               .total_tokens = t,
                               .max_new_tokens = max_new,
                               .kv_workspace = workspace.as<void>(),
                               .num_q_heads = s.heads,
                               .num_kv_heads = s.kv_heads,
                               .head_dim = s.head_dim,
                               .softmax_scale = shape.scale,
                               .tile = tile},
                              nullptr);
      if (any_extend) {
        cuda::chunk_attention({.q = dq.as<float>(),
                               .k = dk.as<float>(),
                               .v = dv.as<float>(),
                               .out = dout.as<float>(),
                               .work = cstep_gpu.chunk_work(),
                               .num_work = cstep_gpu.num_chunk_work(),
                               .seq_info = cstep_gpu.seq_info(),
                               .num_seqs = plan.num_seqs(),
                               .pool = dpool.as<uint8_t>(),
                               .page_tables = cstep_gpu.page_tables(),
                               .max_pages_per_seq = plan.max_pages_per_seq,
                               .page_bytes = layout.page_bytes(),
                               .k_layout = layout.k(0),
                               .v_layout = layout.v(0),
                               .num_q_heads = s.heads,
                               .num_kv_heads = s.kv_heads,
                               .head_dim = s.head_dim,
                               .softmax_scale = shape.scale,
                               .skip_prefill = true},
                              nullptr);
      }
      NIBBLE_CUDA_CHECK(cudaDeviceSynchronize());
      const std::vector<float> got = dout.to_host<float>();

      StepErrors errors;
      for (size_t i = 0; i < seqs.size(); ++i) {
        const Errors e = compare(got, want, plan.token_begin[i], seqs[i].len, q_width);
        Errors& into = seqs[i].prefix == 0 ? errors.prefill : errors.extend;
        into.max_abs = std::max(into.max_abs, e.max_abs);
        into.rms = std::max(into.rms, e.rms);  // the worst sequence's RMS
      }
      all_errors.push_back(errors);
    }
    return all_errors;
  }

  void expect_within(const Errors& e, bool bf16_exact, const std::string& what) {
    const double max_tol = bf16_exact ? kExactMaxTolerance : kF32MaxTolerance;
    const double rms_tol = bf16_exact ? kExactRmsTolerance : kF32RmsTolerance;
    EXPECT_LE(e.max_abs, max_tol) << what;
    EXPECT_LE(e.rms, rms_tol) << what;
    std::printf("  %-72s max %.2e rms %.2e\n", what.c_str(), e.max_abs, e.rms);
  }

  CpuBackend cpu{{.num_threads = 0}};
  std::unique_ptr<Backend> gpu = cuda::test::no_device_reason().empty() ? make_backend({.device = "cuda"}) : nullptr;
  std::mt19937 rng{4242};
  float key_ramp = 0.0f;  // > 0: ClimbingScoresRescaleMidSequence (run_step)
};

class CudaPrefillSweep : public CudaPrefillAttention, public ::testing::WithParamInterface<int64_t> {};

// Every length class around the query (64/128/256-row) and key (32/64) tiles, GQA 1, 4, 8, every tile
// configuration built.
TEST_P(CudaPrefillSweep, SingleSequencesMatchCpu) {
  const int64_t head_dim = GetParam();
  for (const auto [heads, kv_heads] : {std::pair<int64_t, int64_t>{2, 2}, {4, 1}, {16, 2}}) {
    for (const int64_t len : {1, 17, 63, 64, 65, 127, 129, 1000}) {
      check_tiles({.head_dim = head_dim, .heads = heads, .kv_heads = kv_heads}, {len}, true);
    }
  }
  // Many key tiles (the pipelined loop's steady state, stage reuse, lazy rescales), and f32 inputs.
  const Shape s{.head_dim = head_dim, .heads = 4, .kv_heads = 1};
  check_tiles(s, {4096}, true);
  check_tiles(s, {1000}, false);
  check_tiles(s, {65}, false);
}

// Scores that climb through the sequence (a key ramp on dim 0 adds up to 3 · 200 / sqrt(128) ~ 53
// logits, ~77 in log2 units, over 777 keys): the running max passes the lazy-rescale threshold
// (2^8, prefill_tile.cuh) again and again, so those schedules rescale O and l many times mid-sequence.
TEST_F(CudaPrefillAttention, ClimbingScoresRescaleMidSequence) {
  key_ramp = 256.0f;
  for (const int64_t head_dim : {64, 128, 256}) {
    const Shape s{.head_dim = head_dim, .heads = 4, .kv_heads = 1};
    const std::vector<int> tiles = all_tiles(head_dim);
    const std::vector<StepErrors> errors = run_step(s, {{.prefix = 0, .len = 777}}, true, tiles);
    for (size_t i = 0; i < tiles.size(); ++i) {
      expect_within(errors[i].prefill, true, describe(s, tiles[i], {777}, true) + " climbing scores");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(HeadDims, CudaPrefillSweep, ::testing::Values(64, 128, 256),
                         [](const auto& info) { return "head_dim_" + std::to_string(info.param); });

// Several sequences of mixed lengths in one launch (rows of one sequence never see another's keys).
TEST_F(CudaPrefillAttention, MixedLengthBatchesMatchCpu) {
  const std::vector<int64_t> lens{65, 1, 1000, 17, 64, 300, 63, 2};
  for (const int64_t head_dim : {64, 128, 256}) {
    for (const bool exact : {true, false}) check_tiles({.head_dim = head_dim, .heads = 8, .kv_heads = 1}, lens, exact);
  }
}

// A step of prefill and extend sequences run as the backend runs it: the prefill rows from the
// tensor cores, the extend rows from chunk_attention (skip_prefill), each within its own tolerance.
TEST_F(CudaPrefillAttention, PrefillAndExtendInOneStep) {
  const std::vector<SeqSpec> seqs{{.prefix = 0, .len = 70},  {.prefix = 33, .len = 20}, {.prefix = 0, .len = 1},
                                  {.prefix = 100, .len = 64}, {.prefix = 0, .len = 300}};
  for (const int64_t head_dim : {64, 128}) {
    const Shape s{.head_dim = head_dim, .heads = 8, .kv_heads = 2};
    const StepErrors e = run_step(s, seqs, true, {0}).front();  // the default tile
    expect_within(e.prefill, true, "mixed step prefill rows, head_dim " + std::to_string(head_dim));
    EXPECT_LE(e.extend.max_abs, kExtendTolerance) << "extend rows, head_dim " << head_dim;
    std::printf("  mixed step extend rows, head_dim %ld: max %.2e\n", static_cast<long>(head_dim), e.extend.max_abs);
  }
}

// The warpgroup MMA primitives the d128 prefill kernel is built on (wgmma.cuh), each alone against
// a plain product in double: Q·K^T with both operands K-major in shared memory, and P·V with P from
// registers and V MN-major. Products of bf16 values are exact in f32 and the sums of 128 run in f32,
// so the bound is f32 rounding (~2^-24 per add), not bf16's. A wrong descriptor stride, swizzle or
// fragment layout moves whole rows or columns (errors of the values' own size).
TEST(CudaWgmma, DescriptorsAndFragmentsMatchPlainProducts) {
  NIBBLE_SKIP_WITHOUT_GPU();
  if (!cuda::test::wgmma_probe_built()) GTEST_SKIP() << "built without sm_90a (CMAKE_CUDA_ARCHITECTURES lacks 90a)";
  int major = 0, minor = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0), cudaSuccess);
  if (major != 9 || minor != 0) {
    GTEST_SKIP() << "wgmma runs on compute capability 9.0 only, this is " << major << "." << minor;
  }
  std::mt19937 rng(11);
  std::normal_distribution<float> normal;
  const auto bf16_matrix = [&](int rows, bool non_negative) {
    std::vector<uint16_t> m(static_cast<size_t>(rows) * 128);
    for (auto& x : m) x = quant::bf16_from_f32(non_negative ? std::fabs(normal(rng)) : normal(rng));
    return m;
  };
  const auto at = [](const std::vector<uint16_t>& m, int r, int c) {
    return double(quant::f32_from_bf16(m[r * 128 + c]));
  };
  const std::vector<uint16_t> q = bf16_matrix(64, false), k = bf16_matrix(128, false);
  const std::vector<uint16_t> p = bf16_matrix(64, true), v = bf16_matrix(128, false);
  std::vector<double> s_want(64 * 128), o_want(64 * 128);
  for (int r = 0; r < 64; ++r) {
    for (int c = 0; c < 128; ++c) {
      for (int d = 0; d < 128; ++d) {
        s_want[r * 128 + c] += at(q, r, d) * at(k, c, d);
        o_want[r * 128 + c] += at(p, r, d) * at(v, d, c);
      }
    }
  }
  const auto q_d = cuda::test::DeviceBuffer::from(q), k_d = cuda::test::DeviceBuffer::from(k);
  const auto p_d = cuda::test::DeviceBuffer::from(p), v_d = cuda::test::DeviceBuffer::from(v);
  cuda::test::DeviceBuffer s_d(64 * 128 * sizeof(float)), o_d(64 * 128 * sizeof(float));
  s_d.fill(0xFF), o_d.fill(0xFF);  // NaN where nothing is written
  cuda::test::wgmma_probe_qk(q_d.as<uint16_t>(), k_d.as<uint16_t>(), s_d.as<float>(), nullptr);
  cuda::test::wgmma_probe_pv(p_d.as<uint16_t>(), v_d.as<uint16_t>(), o_d.as<float>(), nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<float> s_got = s_d.to_host<float>(), o_got = o_d.to_host<float>();
  double s_err = 0.0, o_err = 0.0;
  for (size_t i = 0; i < s_got.size(); ++i) {
    s_err = std::isfinite(s_got[i]) ? std::max(s_err, std::fabs(s_got[i] - s_want[i])) : INFINITY;
    o_err = std::isfinite(o_got[i]) ? std::max(o_err, std::fabs(o_got[i] - o_want[i])) : INFINITY;
  }
  std::printf("  wgmma Q K^T (K-major A and B): max abs error %.2e; P V (MN-major B): %.2e\n", s_err, o_err);
  // |S|, |O| ~ 11 (128 products of unit normals): f32 sums keep ~1e-5.
  EXPECT_LT(s_err, 1e-4);
  EXPECT_LT(o_err, 1e-4);
}

// Host-side validation: runs without a GPU (nothing is launched before the checks).
TEST(CudaPrefillAttentionValidation, BadArgumentsAreErrorsNamingTheProblem) {
  float dummy[4] = {};
  const cuda::PrefillAttentionParams good{.q = dummy,
                                          .k = dummy,
                                          .v = dummy,
                                          .out = dummy,
                                          .seq_info = reinterpret_cast<const int32_t*>(dummy),
                                          .num_seqs = 1,
                                          .total_tokens = 4,
                                          .kv_workspace = dummy,
                                          .num_q_heads = 4,
                                          .num_kv_heads = 2,
                                          .head_dim = 128,
                                          .softmax_scale = 0.1f};
  const auto expect_error = [](cuda::PrefillAttentionParams p, const std::string& needle) {
    try {
      cuda::prefill_attention(p, nullptr);
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
  p.kv_workspace = nullptr;
  expect_error(p, "kv_workspace false");
  p = good;
  p.tile = cuda::prefill_tile_count(256) + 1;
  p.head_dim = 256;
  expect_error(p, "tile must be in");
  p = good;
  p.max_new_tokens = 5;
  expect_error(p, "max_new_tokens 5");
  EXPECT_EQ(cuda::prefill_workspace_bytes(10, 8, 128), 2 * 10 * 8 * 128 * 2);
}

}  // namespace
}  // namespace nibble::backend
