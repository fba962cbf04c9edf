// Every dense and element-wise op of the CUDA backend against the CPU backend on the same random
// inputs, through the seam. Tolerances, per op:
//   matmul      CUDA rounds W and x to bf16 and accumulates in f32. Against the CPU on the same
//               bf16-rounded inputs: 1e-4 of the output scale (summation order only; the decode
//               GEMV and its fused products too); against the CPU on the original f32 inputs: 1e-2
//               (bf16's 2^-9 relative rounding, accumulated). The fused products equal the CUDA
//               backend's separate ops bit for bit (the fused input norm too: its sums follow
//               elementwise.cu's rms_norm order).
//   embedding   exact: the CPU row rounded to bf16.
//   rms_norm    1e-5 relative (f32 vs f64 sum of squares); rope 1e-5 absolute (sincosf vs libm);
//   silu_mul    1e-6 relative; add, gather_logit_rows exact.
//   kv_write    byte for byte (the generic head_dim 8 path and the fused head_dim 64 path);
//   rope_kv_write  q, k as rope; the pool byte for byte as the CPU's kv_write of the k it returns.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <string>

#include "backend/cuda_common/cuda_test_util.h"
#include "backend/step_plan.h"
#include "common/error.h"
#include "quant/bf16.h"
#include "seam_test_util.h"

namespace nibble::backend {
namespace {

using test::download;
using test::random_floats;
using test::upload;

std::vector<float> round_bf16(std::vector<float> v) {
  for (float& x : v) x = quant::f32_from_bf16(quant::bf16_from_f32(x));
  return v;
}

// One step of `lens.size()` sequences; sequence i has first_position firsts[i] and lens[i] new
// tokens with ids drawn below `vocab`; pages 0, 1, 2, ... in order.
struct PlannedInput {
  std::vector<std::vector<int32_t>> tokens, pages;
  StepPlan plan;
};

PlannedInput make_plan(const std::vector<int64_t>& firsts, const std::vector<int64_t>& lens, int64_t vocab,
                       int64_t page_size, std::mt19937& rng, bool all_logits = false) {
  PlannedInput in;
  std::uniform_int_distribution<int32_t> id(0, static_cast<int32_t>(vocab - 1));
  int32_t next_page = 0;
  for (size_t s = 0; s < lens.size(); ++s) {
    std::vector<int32_t> t(lens[s]);
    for (int32_t& x : t) x = id(rng);
    in.tokens.push_back(t);
    std::vector<int32_t> p((firsts[s] + lens[s] + page_size - 1) / page_size);
    std::iota(p.begin(), p.end(), next_page);
    next_page += static_cast<int32_t>(p.size());
    in.pages.push_back(p);
  }
  std::vector<SequenceStep> steps;
  for (size_t s = 0; s < lens.size(); ++s) {
    steps.push_back({.first_position = firsts[s], .tokens = in.tokens[s], .pages = in.pages[s], .all_logits = all_logits});
  }
  in.plan = make_step_plan(steps, page_size, next_page);
  return in;
}

class CudaOps : public ::testing::Test {
 protected:
  void SetUp() override {
    NIBBLE_SKIP_WITHOUT_GPU();
    gpu = make_backend({.device = "cuda"});
  }
  CpuBackend cpu{{.num_threads = 2}};
  std::unique_ptr<Backend> gpu;
  std::mt19937 rng{20240601};
};

// The memory `nibble serve --mem-fraction` takes its fraction of: the device's total, as the device
// properties state it (a second API), and the CPU backend's the machine's.
TEST_F(CudaOps, MemoryBytesIsTheDevicesTotal) {
  int device = 0;
  NIBBLE_CUDA_CHECK(cudaGetDevice(&device));
  cudaDeviceProp prop{};
  NIBBLE_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  EXPECT_EQ(gpu->memory_bytes(), static_cast<int64_t>(prop.totalGlobalMem));
  EXPECT_GT(gpu->memory_bytes(), int64_t{1} << 30);
  EXPECT_GT(cpu.memory_bytes(), int64_t{1} << 28);
  std::printf("measured memory_bytes: cuda %.1f GiB, cpu %.1f GiB\n", gpu->memory_bytes() / 1073741824.0,
              cpu.memory_bytes() / 1073741824.0);
}

TEST_F(CudaOps, MatmulMatchesCpuWithBf16Tolerance) {
  for (const int64_t rows : {1, 7, 64}) {
    for (const int64_t in : {64, 172}) {  // 172: stories260k's intermediate, not a multiple of 8
      for (const bool with_bias : {false, true}) {
        const int64_t out = 96;
        const std::vector<float> x = random_floats(rows * in, rng), w = random_floats(out * in, rng, 0.2f);
        const std::vector<float> bias = random_floats(out, rng);
        std::unique_ptr<Buffer> w_owner, b_owner;
        const Matrix gw = gpu->upload_matrix(w.data(), out, in, w_owner);
        const Vector gb = with_bias ? gpu->upload_vector(bias.data(), out, b_owner) : Vector{};
        auto gx = upload(*gpu, x, rows, in);
        auto gout = upload(*gpu, std::vector<float>(rows * out, NAN), rows, out);
        gpu->matmul(gx.view, gw, gb, gout.view);
        const std::vector<float> got = download(*gpu, gout.view);

        auto cpu_matmul = [&](const std::vector<float>& xs, const std::vector<float>& ws) {
          std::vector<float> o(rows * out);
          std::unique_ptr<Buffer> unused;
          const Matrix cw = cpu.upload_matrix(ws.data(), out, in, unused);
          cpu.matmul({const_cast<float*>(xs.data()), rows, in}, cw, with_bias ? Vector{bias.data(), out} : Vector{},
                     {o.data(), rows, out});
          return o;
        };
        const std::vector<float> want_rounded = cpu_matmul(round_bf16(x), round_bf16(w));
        const std::vector<float> want = cpu_matmul(x, w);
        EXPECT_LE(test::relative_max_error(got, want_rounded), 1e-4) << rows << "x" << in << " bias " << with_bias;
        EXPECT_LE(test::relative_max_error(got, want), 1e-2) << rows << "x" << in << " bias " << with_bias;
      }
    }
  }
}

TEST_F(CudaOps, MatmulRejectsShapeMismatch) {
  const std::vector<float> w = random_floats(8 * 16, rng);
  std::unique_ptr<Buffer> owner;
  const Matrix gw = gpu->upload_matrix(w.data(), 8, 16, owner);
  auto gx = upload(*gpu, random_floats(2 * 12, rng), 2, 12);
  auto gout = upload(*gpu, std::vector<float>(2 * 8), 2, 8);
  EXPECT_THROW(gpu->matmul(gx.view, gw, {}, gout.view), Error);
}

// The decode GEMV (gemv.h) at every batch size it takes, plain and with SwiGLU, on shapes whose k is
// not a multiple of the kernel's batches (k = 2056: 257 chunks of 8) and whose n is not a multiple of
// its warps nor of the rows a warp item takes (517: two rows per item from 6 activation rows on).
// The GEMV runs at every batch size here (set_gemv_everywhere), not only where it is the faster path.
TEST_F(CudaOps, GemvMatchesCpuForRows1To8) {
  dynamic_cast<CudaBackend&>(*gpu).set_gemv_everywhere(true);
  const int64_t out = 517, in = 2056;
  const std::vector<float> w = random_floats(out * in, rng, 0.05f), bias = random_floats(out, rng);
  std::unique_ptr<Buffer> w_owner, b_owner;
  const Matrix gw = gpu->upload_matrix(w.data(), out, in, w_owner);
  const Vector gb = gpu->upload_vector(bias.data(), out, b_owner);
  std::unique_ptr<Buffer> unused;
  const std::vector<float> w_rounded = round_bf16(w);
  const Matrix cw = cpu.upload_matrix(w_rounded.data(), out, in, unused);
  const std::vector<float> w2 = round_bf16(random_floats(out * in, rng, 0.05f));
  std::unique_ptr<Buffer> w2_owner, unused2;
  const Matrix gw2 = gpu->upload_matrix(w2.data(), out, in, w2_owner);
  const Matrix cw2 = cpu.upload_matrix(w2.data(), out, in, unused2);
  for (int64_t rows = 1; rows <= 8; ++rows) {
    const std::vector<float> x = random_floats(rows * in, rng);
    auto gx = upload(*gpu, x, rows, in);
    auto gout = upload(*gpu, std::vector<float>(rows * out, NAN), rows, out);
    gpu->matmul(gx.view, gw, gb, gout.view);
    const std::vector<float> got = download(*gpu, gout.view);
    std::vector<float> want(rows * out);
    const std::vector<float> x_rounded = round_bf16(x);
    cpu.matmul({const_cast<float*>(x_rounded.data()), rows, in}, cw, {const_cast<float*>(bias.data()), out},
               {want.data(), rows, out});
    EXPECT_LE(test::relative_max_error(got, want), 1e-4) << rows << " rows";

    // gate = w, up = w2: silu(x · w^T) · (x · w2^T) in one call.
    auto gate = upload(*gpu, std::vector<float>(rows * out, NAN), rows, out);
    auto up = upload(*gpu, std::vector<float>(rows * out, NAN), rows, out);
    gpu->matmul_swiglu(gx.view, nullptr, gw, gw2, gate.view, up.view, gate.view);
    const std::vector<float> got_s = download(*gpu, gate.view);
    std::vector<float> c_gate(rows * out), c_up(rows * out);
    cpu.matmul_swiglu({const_cast<float*>(x_rounded.data()), rows, in}, nullptr, cw, cw2, {c_gate.data(), rows, out},
                      {c_up.data(), rows, out}, {c_gate.data(), rows, out});
    EXPECT_LE(test::relative_max_error(got_s, c_gate), 1e-4) << rows << " rows, swiglu";
  }
}

// The fused products against the CPU backend's (the seam's defaults: the separate ops) on
// bf16-rounded inputs, and bit for bit against the CUDA backend's own separate ops (the GEMV sums
// in the same order fused or not). Batch 1 and 6 (one and two W rows per warp item); q/k/v widths
// odd, so that at 6 rows every segment ends in a short item. Every product on the GEMV
// (set_gemv_everywhere).
TEST_F(CudaOps, FusedProductsMatchSeparateOps) {
  const int64_t hidden = 1032, qw = 201, kvw = 73, inter = 2056;
  auto host_matrix = [&](int64_t out, int64_t in) { return round_bf16(random_floats(out * in, rng, 0.05f)); };
  const std::vector<float> wq = host_matrix(qw, hidden), wk = host_matrix(kvw, hidden), wv = host_matrix(kvw, hidden);
  const std::vector<float> wg = host_matrix(inter, hidden), wu = host_matrix(inter, hidden);
  const std::vector<float> wd = host_matrix(hidden, inter);
  const std::vector<float> bq = random_floats(qw, rng), bk = random_floats(kvw, rng), bv = random_floats(kvw, rng);
  std::vector<std::unique_ptr<Buffer>> owners(16);
  int next = 0;
  auto matrices = [&](const std::vector<float>& host, int64_t out, int64_t in) {
    return std::pair{gpu->upload_matrix(host.data(), out, in, owners[next++]),
                     cpu.upload_matrix(host.data(), out, in, owners[next++])};
  };
  const auto [gq, cq] = matrices(wq, qw, hidden);
  const auto [gk, ck] = matrices(wk, kvw, hidden);
  const auto [gv, cv] = matrices(wv, kvw, hidden);
  const auto [gg, cg] = matrices(wg, inter, hidden);
  const auto [gu, cu] = matrices(wu, inter, hidden);
  const auto [gd, cd] = matrices(wd, hidden, inter);
  const Vector gbq = gpu->upload_vector(bq.data(), qw, owners[next++]);
  const Vector gbk = gpu->upload_vector(bk.data(), kvw, owners[next++]);
  const Vector gbv = gpu->upload_vector(bv.data(), kvw, owners[next++]);
  const Vector cbq{const_cast<float*>(bq.data()), qw}, cbk{const_cast<float*>(bk.data()), kvw},
      cbv{const_cast<float*>(bv.data()), kvw};

  dynamic_cast<CudaBackend&>(*gpu).set_gemv_everywhere(true);
  for (const int64_t rows : {1, 6}) {
    const std::vector<float> x = round_bf16(random_floats(rows * hidden, rng));
    const std::vector<float> act = round_bf16(random_floats(rows * inter, rng));
    const std::vector<float> residual = random_floats(rows * hidden, rng);
    auto gx = upload(*gpu, x, rows, hidden);
    auto gact = upload(*gpu, act, rows, inter);
    Tensor cx{const_cast<float*>(x.data()), rows, hidden}, cact{const_cast<float*>(act.data()), rows, inter};

    // q/k/v in one call, against the CPU and against three CUDA matmuls.
    {
      auto oq = upload(*gpu, std::vector<float>(rows * qw, NAN), rows, qw);
      auto ok = upload(*gpu, std::vector<float>(rows * kvw, NAN), rows, kvw);
      auto ov = upload(*gpu, std::vector<float>(rows * kvw, NAN), rows, kvw);
      const Matrix gws[] = {gq, gk, gv};
      const Vector gbs[] = {gbq, gbk, gbv};
      const Tensor gouts[] = {oq.view, ok.view, ov.view};
      gpu->matmul_shared_input(gx.view, nullptr, gws, gbs, gouts);
      std::vector<float> cq_out(rows * qw), ck_out(rows * kvw), cv_out(rows * kvw);
      const Matrix cws[] = {cq, ck, cv};
      const Vector cbs[] = {cbq, cbk, cbv};
      const Tensor couts[] = {{cq_out.data(), rows, qw}, {ck_out.data(), rows, kvw}, {cv_out.data(), rows, kvw}};
      cpu.matmul_shared_input(cx, nullptr, cws, cbs, couts);
      const std::vector<float> got_q = download(*gpu, oq.view), got_k = download(*gpu, ok.view),
                               got_v = download(*gpu, ov.view);
      EXPECT_LE(test::relative_max_error(got_q, cq_out), 1e-4) << rows;
      EXPECT_LE(test::relative_max_error(got_k, ck_out), 1e-4) << rows;
      EXPECT_LE(test::relative_max_error(got_v, cv_out), 1e-4) << rows;
      auto sq = upload(*gpu, std::vector<float>(rows * qw, NAN), rows, qw);
      auto sv = upload(*gpu, std::vector<float>(rows * kvw, NAN), rows, kvw);
      gpu->matmul(gx.view, gq, gbq, sq.view);
      gpu->matmul(gx.view, gv, gbv, sv.view);
      EXPECT_EQ(download(*gpu, sq.view), got_q) << rows;
      EXPECT_EQ(download(*gpu, sv.view), got_v) << rows;
    }
    // gate/up with SwiGLU in one call.
    {
      auto gate = upload(*gpu, std::vector<float>(rows * inter, NAN), rows, inter);
      auto up = upload(*gpu, std::vector<float>(rows * inter, NAN), rows, inter);
      auto fused = upload(*gpu, std::vector<float>(rows * inter, NAN), rows, inter);
      gpu->matmul_swiglu(gx.view, nullptr, gg, gu, gate.view, up.view, fused.view);
      const std::vector<float> got = download(*gpu, fused.view);
      std::vector<float> c_gate(rows * inter), c_up(rows * inter);
      const Tensor cgate{c_gate.data(), rows, inter}, cup{c_up.data(), rows, inter};
      cpu.matmul_swiglu(cx, nullptr, cg, cu, cgate, cup, cgate);
      EXPECT_LE(test::relative_max_error(got, c_gate), 1e-4) << rows;
      gpu->matmul(gx.view, gg, {}, gate.view);
      gpu->matmul(gx.view, gu, {}, up.view);
      gpu->silu_mul(gate.view, up.view, gate.view);
      EXPECT_EQ(download(*gpu, gate.view), got) << rows;
    }
    // residual += act @ W_down^T in one call.
    {
      auto res = upload(*gpu, residual, rows, hidden);
      auto scratch = upload(*gpu, std::vector<float>(rows * hidden, NAN), rows, hidden);
      gpu->matmul_residual_add(gact.view, gd, scratch.view, res.view);
      const std::vector<float> got = download(*gpu, res.view);
      std::vector<float> c_res = residual, c_scratch(rows * hidden);
      cpu.matmul_residual_add(cact, cd, {c_scratch.data(), rows, hidden}, {c_res.data(), rows, hidden});
      EXPECT_LE(test::relative_max_error(got, c_res), 1e-4) << rows;
      auto sep = upload(*gpu, residual, rows, hidden);
      gpu->matmul(gact.view, gd, {}, scratch.view);
      gpu->add(sep.view, scratch.view, sep.view);
      EXPECT_EQ(download(*gpu, sep.view), got) << rows;
    }
  }
}

// The fused input RMSNorm (q/k/v and gate/up of rms_norm(x), as the forward pass calls them) for a
// narrow (<= 1024 columns: one warp per row) and a wide hidden size: against the CPU's rms_norm then
// products (1e-2: the CPU multiplies the f32 normalized rows, the GPU their bf16 rounding), and
// against the CUDA backend's own rms_norm then products: bit for bit (the same sums in the same
// order). 4104 columns: a wide row where 8 threads take a 17th value (4104 = 16·256 + 8), and at 3
// and 8 rows each thread stages several 8-value entries (rows·k/8 > the block's 512 threads).
TEST_F(CudaOps, FusedInputNormMatchesRmsNormThenProducts) {
  dynamic_cast<CudaBackend&>(*gpu).set_gemv_everywhere(true);
  for (const int64_t hidden : {520, 1032, 4104}) {
    const int64_t qw = 136, kvw = 40, inter = 264;
    const std::vector<float> wq = round_bf16(random_floats(qw * hidden, rng, 0.05f));
    const std::vector<float> wk = round_bf16(random_floats(kvw * hidden, rng, 0.05f));
    const std::vector<float> wg = round_bf16(random_floats(inter * hidden, rng, 0.05f));
    const std::vector<float> wu = round_bf16(random_floats(inter * hidden, rng, 0.05f));
    std::vector<float> gain = random_floats(hidden, rng, 0.5f);
    for (float& g : gain) g += 1.0f;
    std::vector<std::unique_ptr<Buffer>> owners(9);
    const Matrix gq = gpu->upload_matrix(wq.data(), qw, hidden, owners[0]);
    const Matrix gk = gpu->upload_matrix(wk.data(), kvw, hidden, owners[1]);
    const Matrix gg = gpu->upload_matrix(wg.data(), inter, hidden, owners[2]);
    const Matrix gu = gpu->upload_matrix(wu.data(), inter, hidden, owners[3]);
    const Matrix cq = cpu.upload_matrix(wq.data(), qw, hidden, owners[4]);
    const Matrix ck = cpu.upload_matrix(wk.data(), kvw, hidden, owners[5]);
    const Matrix cg = cpu.upload_matrix(wg.data(), inter, hidden, owners[6]);
    const Matrix cu = cpu.upload_matrix(wu.data(), inter, hidden, owners[7]);
    const Vector ggain = gpu->upload_vector(gain.data(), hidden, owners[8]);
    const float eps = 1e-5f;
    for (const int64_t rows : {1, 3, 8}) {
      const std::vector<float> x = random_floats(rows * hidden, rng);
      auto gx = upload(*gpu, x, rows, hidden);
      auto gh = upload(*gpu, std::vector<float>(rows * hidden, NAN), rows, hidden);
      auto oq = upload(*gpu, std::vector<float>(rows * qw, NAN), rows, qw);
      auto ok = upload(*gpu, std::vector<float>(rows * kvw, NAN), rows, kvw);
      auto gate = upload(*gpu, std::vector<float>(rows * inter, NAN), rows, inter);
      auto up = upload(*gpu, std::vector<float>(rows * inter, NAN), rows, inter);
      const Backend::InputNorm gnorm{.weight = ggain, .eps = eps, .normed = gh.view};
      const Matrix gws[] = {gq, gk};
      const Vector no_bias[] = {{}, {}};
      const Tensor gouts[] = {oq.view, ok.view};
      gpu->matmul_shared_input(gx.view, &gnorm, gws, no_bias, gouts);
      gpu->matmul_swiglu(gx.view, &gnorm, gg, gu, gate.view, up.view, gate.view);
      const std::vector<float> got_q = download(*gpu, oq.view), got_k = download(*gpu, ok.view),
                               got_s = download(*gpu, gate.view);

      // The CPU backend: the seam's defaults (rms_norm into h, then the separate products).
      std::vector<float> ch(rows * hidden), c_q(rows * qw), c_k(rows * kvw), c_g(rows * inter), c_u(rows * inter);
      const Backend::InputNorm cnorm{.weight = {gain.data(), hidden}, .eps = eps, .normed = {ch.data(), rows, hidden}};
      const Matrix cws[] = {cq, ck};
      const Tensor couts[] = {{c_q.data(), rows, qw}, {c_k.data(), rows, kvw}};
      const Tensor cx{const_cast<float*>(x.data()), rows, hidden};
      cpu.matmul_shared_input(cx, &cnorm, cws, no_bias, couts);
      cpu.matmul_swiglu(cx, &cnorm, cg, cu, {c_g.data(), rows, inter}, {c_u.data(), rows, inter},
                        {c_g.data(), rows, inter});
      EXPECT_LE(test::relative_max_error(got_q, c_q), 1e-2) << hidden << " x " << rows;
      EXPECT_LE(test::relative_max_error(got_k, c_k), 1e-2) << hidden << " x " << rows;
      EXPECT_LE(test::relative_max_error(got_s, c_g), 1e-2) << hidden << " x " << rows;

      // The CUDA backend's separate ops.
      auto sq = upload(*gpu, std::vector<float>(rows * qw, NAN), rows, qw);
      gpu->rms_norm(gx.view, ggain, eps, gh.view);
      gpu->matmul(gh.view, gq, {}, sq.view);
      gpu->matmul(gh.view, gg, {}, gate.view);
      gpu->matmul(gh.view, gu, {}, up.view);
      gpu->silu_mul(gate.view, up.view, gate.view);
      const std::vector<float> sep_q = download(*gpu, sq.view), sep_s = download(*gpu, gate.view);
      EXPECT_EQ(got_q, sep_q) << hidden << " x " << rows;
      EXPECT_EQ(got_s, sep_s) << hidden << " x " << rows;
    }
  }
}

// The GEMV's tile build (gemv_tiles.cu: every k of kGemvTileKs, widths multiples of 16, from
// kGemvTileMinRows rows): q/k/v with the fused norm (three segments: tiles of one block cross segment
// boundaries), gate/up with SwiGLU, a product with bias and o + residual, against the CPU on
// bf16-rounded inputs (1e-4; 1e-2 with the norm: the CPU multiplies the f32 normalized rows) and the
// fused norm bit for bit against the CUDA backend's rms_norm then products (its sums in
// elementwise.cu's order). Widths of 33, 5 and 65 tiles: more tiles than some blocks take, fewer
// than the SMs.
TEST_F(CudaOps, GemvTileBuildMatchesCpuAndSeparateOps) {
  dynamic_cast<CudaBackend&>(*gpu).set_gemv_everywhere(true);
  for (const int64_t hidden : cuda::kGemvTileKs) {
    const int64_t qw = 528, kvw = 80, inter = 1040;
    auto host_matrix = [&](int64_t out, int64_t in) { return round_bf16(random_floats(out * in, rng, 0.05f)); };
    const std::vector<float> wq = host_matrix(qw, hidden), wk = host_matrix(kvw, hidden), wv = host_matrix(kvw, hidden);
    const std::vector<float> wg = host_matrix(inter, hidden), wu = host_matrix(inter, hidden);
    const std::vector<float> wo = host_matrix(hidden, hidden), bq = random_floats(qw, rng);
    std::vector<float> gain = random_floats(hidden, rng, 0.5f);
    for (float& g : gain) g += 1.0f;
    std::vector<std::unique_ptr<Buffer>> owners(16);
    int next = 0;
    auto matrices = [&](const std::vector<float>& host, int64_t out, int64_t in) {
      return std::pair{gpu->upload_matrix(host.data(), out, in, owners[next++]),
                       cpu.upload_matrix(host.data(), out, in, owners[next++])};
    };
    const auto [gq, cq] = matrices(wq, qw, hidden);
    const auto [gk, ck] = matrices(wk, kvw, hidden);
    const auto [gv, cv] = matrices(wv, kvw, hidden);
    const auto [gg, cg] = matrices(wg, inter, hidden);
    const auto [gu, cu] = matrices(wu, inter, hidden);
    const auto [go, co] = matrices(wo, hidden, hidden);
    const Vector ggain = gpu->upload_vector(gain.data(), hidden, owners[next++]);
    const Vector gbq = gpu->upload_vector(bq.data(), qw, owners[next++]);
    const float eps = 1e-5f;
    for (const int64_t rows : {3, 5, 8}) {
      const std::vector<float> x = random_floats(rows * hidden, rng);
      const std::vector<float> x_rounded = round_bf16(x);
      const Tensor cx{const_cast<float*>(x.data()), rows, hidden}, cxr{const_cast<float*>(x_rounded.data()), rows, hidden};
      auto gx = upload(*gpu, x, rows, hidden);
      auto gh = upload(*gpu, std::vector<float>(rows * hidden, NAN), rows, hidden);
      const std::string at = std::to_string(hidden) + " x " + std::to_string(rows);

      // q/k/v with the fused norm.
      auto oq = upload(*gpu, std::vector<float>(rows * qw, NAN), rows, qw);
      auto ok = upload(*gpu, std::vector<float>(rows * kvw, NAN), rows, kvw);
      auto ov = upload(*gpu, std::vector<float>(rows * kvw, NAN), rows, kvw);
      const Backend::InputNorm gnorm{.weight = ggain, .eps = eps, .normed = gh.view};
      const Matrix gws[] = {gq, gk, gv};
      const Vector no_bias[] = {{}, {}, {}};
      const Tensor gouts[] = {oq.view, ok.view, ov.view};
      gpu->matmul_shared_input(gx.view, &gnorm, gws, no_bias, gouts);
      const std::vector<float> got_q = download(*gpu, oq.view), got_v = download(*gpu, ov.view);
      std::vector<float> ch(rows * hidden), c_q(rows * qw), c_k(rows * kvw), c_v(rows * kvw);
      const Backend::InputNorm cnorm{.weight = {gain.data(), hidden}, .eps = eps, .normed = {ch.data(), rows, hidden}};
      const Matrix cws[] = {cq, ck, cv};
      const Tensor couts[] = {{c_q.data(), rows, qw}, {c_k.data(), rows, kvw}, {c_v.data(), rows, kvw}};
      cpu.matmul_shared_input(cx, &cnorm, cws, no_bias, couts);
      EXPECT_LE(test::relative_max_error(got_q, c_q), 1e-2) << at;
      EXPECT_LE(test::relative_max_error(download(*gpu, ok.view), c_k), 1e-2) << at;
      EXPECT_LE(test::relative_max_error(got_v, c_v), 1e-2) << at;
      auto sq = upload(*gpu, std::vector<float>(rows * qw, NAN), rows, qw);
      auto sv = upload(*gpu, std::vector<float>(rows * kvw, NAN), rows, kvw);
      gpu->rms_norm(gx.view, ggain, eps, gh.view);
      gpu->matmul(gh.view, gq, {}, sq.view);
      gpu->matmul(gh.view, gv, {}, sv.view);
      EXPECT_EQ(download(*gpu, sq.view), got_q) << at;
      EXPECT_EQ(download(*gpu, sv.view), got_v) << at;

      // gate/up + SwiGLU with the fused norm.
      auto gate = upload(*gpu, std::vector<float>(rows * inter, NAN), rows, inter);
      auto up = upload(*gpu, std::vector<float>(rows * inter, NAN), rows, inter);
      auto fused = upload(*gpu, std::vector<float>(rows * inter, NAN), rows, inter);
      gpu->matmul_swiglu(gx.view, &gnorm, gg, gu, gate.view, up.view, fused.view);
      const std::vector<float> got_s = download(*gpu, fused.view);
      std::vector<float> c_g(rows * inter), c_u(rows * inter);
      cpu.matmul_swiglu(cx, &cnorm, cg, cu, {c_g.data(), rows, inter}, {c_u.data(), rows, inter},
                        {c_g.data(), rows, inter});
      EXPECT_LE(test::relative_max_error(got_s, c_g), 1e-2) << at;
      gpu->rms_norm(gx.view, ggain, eps, gh.view);
      gpu->matmul(gh.view, gg, {}, gate.view);
      gpu->matmul(gh.view, gu, {}, up.view);
      gpu->silu_mul(gate.view, up.view, gate.view);
      EXPECT_EQ(download(*gpu, gate.view), got_s) << at;

      // A product with bias, and o + residual, against the CPU on the bf16-rounded x.
      auto bout = upload(*gpu, std::vector<float>(rows * qw, NAN), rows, qw);
      gpu->matmul(gx.view, gq, gbq, bout.view);
      std::vector<float> c_b(rows * qw);
      cpu.matmul(cxr, cq, {const_cast<float*>(bq.data()), qw}, {c_b.data(), rows, qw});
      EXPECT_LE(test::relative_max_error(download(*gpu, bout.view), c_b), 1e-4) << at;
      const std::vector<float> residual = random_floats(rows * hidden, rng);
      auto res = upload(*gpu, residual, rows, hidden);
      auto scratch = upload(*gpu, std::vector<float>(rows * hidden, NAN), rows, hidden);
      gpu->matmul_residual_add(gx.view, go, scratch.view, res.view);
      std::vector<float> c_res = residual, c_scratch(rows * hidden);
      cpu.matmul_residual_add(cxr, co, {c_scratch.data(), rows, hidden}, {c_res.data(), rows, hidden});
      EXPECT_LE(test::relative_max_error(download(*gpu, res.view), c_res), 1e-4) << at;
    }
  }
}

// The tile build's k-split (kGemvSplitKs, down products): kGemvKParts blocks per tile, met in the
// backend's workspace. Against the CPU on the bf16-rounded x, with bias and with the residual add
// in place; tiles more than the blocks of a part (so blocks take several); a second run equal bit
// for bit (the order of the parts' sum is fixed, and the last part reset the tile counters).
TEST_F(CudaOps, GemvTileBuildSplitsKOverBlocks) {
  dynamic_cast<CudaBackend&>(*gpu).set_gemv_everywhere(true);
  for (const int64_t k : cuda::kGemvSplitKs) {
    const int64_t n = 1040;  // 65 tiles
    const std::vector<float> w = round_bf16(random_floats(n * k, rng, 0.02f)), bias = random_floats(n, rng);
    std::unique_ptr<Buffer> o1, o2, o3;
    const Matrix gw = gpu->upload_matrix(w.data(), n, k, o1);
    const Matrix cw = cpu.upload_matrix(w.data(), n, k, o2);
    const Vector gb = gpu->upload_vector(bias.data(), n, o3);
    for (const int64_t rows : {3, 5, 8}) {
      const std::string at = "k " + std::to_string(k) + ", " + std::to_string(rows) + " rows";
      const std::vector<float> x = random_floats(rows * k, rng), xr = round_bf16(x);
      auto gx = upload(*gpu, x, rows, k);
      // A product with bias.
      auto out = upload(*gpu, std::vector<float>(rows * n, NAN), rows, n);
      gpu->matmul(gx.view, gw, gb, out.view);
      std::vector<float> c_out(rows * n);
      cpu.matmul({const_cast<float*>(xr.data()), rows, k}, cw, {const_cast<float*>(bias.data()), n},
                 {c_out.data(), rows, n});
      const std::vector<float> got = download(*gpu, out.view);
      EXPECT_LE(test::relative_max_error(got, c_out), 1e-4) << at;
      auto again = upload(*gpu, std::vector<float>(rows * n, NAN), rows, n);
      gpu->matmul(gx.view, gw, gb, again.view);
      EXPECT_EQ(download(*gpu, again.view), got) << at;
      // The residual add in place (the down product's form).
      const std::vector<float> residual = random_floats(rows * n, rng);
      auto res = upload(*gpu, residual, rows, n);
      auto scratch = upload(*gpu, std::vector<float>(rows * n, NAN), rows, n);
      gpu->matmul_residual_add(gx.view, gw, scratch.view, res.view);
      std::vector<float> c_res = residual, c_scratch(rows * n);
      cpu.matmul_residual_add({const_cast<float*>(xr.data()), rows, k}, cw, {c_scratch.data(), rows, n},
                              {c_res.data(), rows, n});
      EXPECT_LE(test::relative_max_error(download(*gpu, res.view), c_res), 1e-4) << at;
    }
  }
}

// Which products the backend gives the GEMV by default: up to the rows where it outpaces cuBLAS,
// by product (gemv.h's measured crossovers), on the Llama-3-8B shapes they were measured on.
TEST(GemvRouting, FasterRowsFollowTheMeasuredCrossovers) {
  const int64_t h = 4096, inter = 14336;
  static const float gain[1] = {1.0f};
  auto params = [&](int64_t k, std::initializer_list<int64_t> widths, bool norm) {
    cuda::GemvParams p{.rows = 1, .k = k, .segments = {}, .num_segments = static_cast<int>(widths.size())};
    int s = 0;
    for (const int64_t n : widths) p.segments[s++].n = n;
    if (norm) p.norm_weight = gain;
    return p;
  };
  EXPECT_EQ(cuda::gemv_faster_rows(params(inter, {h}, false)), 8);         // down (+ residual): the k-split
  EXPECT_EQ(cuda::gemv_faster_rows(params(inter, {h + 8}, false)), 4);     // down-like, not a tile shape
  EXPECT_EQ(cuda::gemv_faster_rows(params(12288, {h}, false)), 8);         // Qwen3-8B's down: the k-split
  EXPECT_EQ(cuda::gemv_faster_rows(params(18944, {3584}, false)), 4);      // Qwen2.5-7B's: not a split shape
  EXPECT_EQ(cuda::gemv_faster_rows(params(h, {h}, false)), 8);             // o (+ residual)
  EXPECT_EQ(cuda::gemv_faster_rows(params(h, {h, 1024, 1024}, true)), 8);  // RMSNorm + q/k/v
  EXPECT_EQ(cuda::gemv_faster_rows(params(h, {inter, inter}, true)), 8);   // RMSNorm + gate/up
  EXPECT_EQ(cuda::gemv_faster_rows(params(h, {128256}, true)), 4);         // RMSNorm + LM head
  EXPECT_TRUE(cuda::gemv_tile_shape(params(h, {h, 1024, 1024}, true)));
  EXPECT_TRUE(cuda::gemv_tile_shape(params(2048, {4096}, false)));
  EXPECT_TRUE(cuda::gemv_tile_shape(params(inter, {h}, false)));    // the k-split build
  EXPECT_FALSE(cuda::gemv_tile_shape(params(inter, {h}, true)));    // ... takes no fused norm
  EXPECT_FALSE(cuda::gemv_tile_shape(params(inter, {h, h}, false)));  // ... nor several segments
  EXPECT_FALSE(cuda::gemv_tile_shape(params(inter, {cuda::kGemvSplitMaxN + 16}, false)));  // ... nor wider outputs
  EXPECT_TRUE(cuda::gemv_tile_shape(params(8192, {2048}, false)));   // Llama-3.2-1B's down
  EXPECT_FALSE(cuda::gemv_tile_shape(params(9728, {2560}, false)));  // Qwen3-4B's: no split shape
  EXPECT_TRUE(cuda::gemv_tile_shape(params(3584, {3584, 512, 512}, true)));  // Qwen2.5-7B's q/k/v
  EXPECT_FALSE(cuda::gemv_tile_shape(params(4608, {4608}, false)));  // no tile k
  EXPECT_FALSE(cuda::gemv_tile_shape(params(h, {h, 1024, 1000}, true)));
}

// The routing itself: a product with k > 8192 (down-like) runs on the GEMV up to 4 rows and on cuBLAS
// above, bit for bit as the backend's cuBLAS path (set_small_matmul(false)) computes it; both
// within the CPU comparison's tolerance.
TEST_F(CudaOps, ProductsPastTheGemvCrossoverRunOnCublas) {
  auto& cuda = dynamic_cast<CudaBackend&>(*gpu);
  const int64_t in = 8200, out = 264;
  const std::vector<float> w = round_bf16(random_floats(out * in, rng, 0.05f));
  std::unique_ptr<Buffer> o1, o2;
  const Matrix gw = gpu->upload_matrix(w.data(), out, in, o1);
  const Matrix cw = cpu.upload_matrix(w.data(), out, in, o2);
  for (const int64_t rows : {4, 6}) {
    const std::vector<float> x = round_bf16(random_floats(rows * in, rng));
    const std::vector<float> residual = random_floats(rows * out, rng);
    auto gx = upload(*gpu, x, rows, in);
    auto scratch = upload(*gpu, std::vector<float>(rows * out, NAN), rows, out);
    auto run = [&](bool small, bool everywhere) {
      cuda.set_small_matmul(small);
      cuda.set_gemv_everywhere(everywhere);
      auto res = upload(*gpu, residual, rows, out);
      gpu->matmul_residual_add(gx.view, gw, scratch.view, res.view);
      return download(*gpu, res.view);
    };
    const std::vector<float> routed = run(true, false), gemv = run(true, true), cublas = run(false, false);
    cuda.set_small_matmul(true);
    cuda.set_gemv_everywhere(false);
    EXPECT_EQ(routed, rows <= 4 ? gemv : cublas) << rows << " rows";
    std::vector<float> want = residual, c_scratch(rows * out);
    cpu.matmul_residual_add({const_cast<float*>(x.data()), rows, in}, cw, {c_scratch.data(), rows, out},
                            {want.data(), rows, out});
    EXPECT_LE(test::relative_max_error(routed, want), 1e-4) << rows << " rows";
  }
}

// Past the GEMV's batch sizes (prefill rows) the fused products run as the separate cuBLAS ops.
TEST_F(CudaOps, FusedProductsFallBackBeyondGemvRows) {
  const int64_t rows = 20, hidden = 64, inter = 96;
  const std::vector<float> x = round_bf16(random_floats(rows * hidden, rng));
  const std::vector<float> wg = round_bf16(random_floats(inter * hidden, rng, 0.2f));
  const std::vector<float> wu = round_bf16(random_floats(inter * hidden, rng, 0.2f));
  std::unique_ptr<Buffer> o1, o2, o3, o4;
  const Matrix gg = gpu->upload_matrix(wg.data(), inter, hidden, o1);
  const Matrix gu = gpu->upload_matrix(wu.data(), inter, hidden, o2);
  const Matrix cg = cpu.upload_matrix(wg.data(), inter, hidden, o3);
  const Matrix cu = cpu.upload_matrix(wu.data(), inter, hidden, o4);
  auto gx = upload(*gpu, x, rows, hidden);
  auto gate = upload(*gpu, std::vector<float>(rows * inter, NAN), rows, inter);
  auto up = upload(*gpu, std::vector<float>(rows * inter, NAN), rows, inter);
  gpu->matmul_swiglu(gx.view, nullptr, gg, gu, gate.view, up.view, gate.view);
  std::vector<float> c_gate(rows * inter), c_up(rows * inter);
  cpu.matmul_swiglu({const_cast<float*>(x.data()), rows, hidden}, nullptr, cg, cu, {c_gate.data(), rows, inter},
                    {c_up.data(), rows, inter}, {c_gate.data(), rows, inter});
  EXPECT_LE(test::relative_max_error(download(*gpu, gate.view), c_gate), 1e-4);
}

TEST_F(CudaOps, EmbeddingIsTheBf16RoundedRow) {
  const int64_t vocab = 50, hidden = 24;
  const std::vector<float> table = random_floats(vocab * hidden, rng);
  PlannedInput in = make_plan({0, 5}, {9, 1}, vocab, 16, rng);
  std::unique_ptr<Buffer> owner;
  const Matrix gt = gpu->upload_matrix(table.data(), vocab, hidden, owner);
  auto gout = upload(*gpu, std::vector<float>(in.plan.total_tokens * hidden), in.plan.total_tokens, hidden);
  auto step = gpu->plan(in.plan);
  gpu->embedding(*step, gt, gout.view);
  const std::vector<float> got = download(*gpu, gout.view);
  const std::vector<float> rounded = round_bf16(table);
  for (int64_t r = 0; r < in.plan.total_tokens; ++r) {
    for (int64_t c = 0; c < hidden; ++c) {
      ASSERT_EQ(got[r * hidden + c], rounded[in.plan.token_ids[r] * hidden + c]) << "row " << r << " col " << c;
    }
  }
  // An id outside the vocabulary is an error naming it.
  PlannedInput bad = make_plan({0}, {3}, vocab, 16, rng);
  bad.plan.token_ids[1] = static_cast<int32_t>(vocab);
  auto bad_out = upload(*gpu, std::vector<float>(3 * hidden), 3, hidden);
  auto bad_step = gpu->plan(bad.plan);
  try {
    gpu->embedding(*bad_step, gt, bad_out.view);
    ADD_FAILURE() << "accepted an id outside the vocabulary";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("outside the vocabulary"), std::string::npos) << e.what();
  }
}

TEST_F(CudaOps, RmsNormMatchesCpu) {
  for (const int64_t cols : {8, 64, 1000}) {
    const int64_t rows = 37;
    const std::vector<float> x = random_floats(rows * cols, rng, 3.0f), w = random_floats(cols, rng);
    std::vector<float> want(rows * cols);
    cpu.rms_norm({const_cast<float*>(x.data()), rows, cols}, {w.data(), cols}, 1e-5f, {want.data(), rows, cols});
    std::unique_ptr<Buffer> owner;
    const Vector gw = gpu->upload_vector(w.data(), cols, owner);
    auto gx = upload(*gpu, x, rows, cols);
    gpu->rms_norm(gx.view, gw, 1e-5f, gx.view);  // in place, as the per-head q/k norms run
    EXPECT_LE(test::relative_max_error(download(*gpu, gx.view), want), 1e-5) << "cols " << cols;
  }
}

TEST_F(CudaOps, RopeMatchesCpuAtLongPositions) {
  for (const int64_t head_dim : {8, 64, 128}) {
    PlannedInput in = make_plan({0, 700, 3}, {5, 1, 40}, 100, 16, rng);
    const int64_t t = in.plan.total_tokens, qh = 4, kh = 2;
    std::vector<float> inv_freq(head_dim / 2);
    for (int64_t i = 0; i < head_dim / 2; ++i) inv_freq[i] = std::pow(10000.0f, -2.0f * i / head_dim);
    std::vector<float> q = random_floats(t * qh * head_dim, rng), k = random_floats(t * kh * head_dim, rng);
    auto gq = upload(*gpu, q, t, qh * head_dim);
    auto gk = upload(*gpu, k, t, kh * head_dim);
    std::unique_ptr<Buffer> owner;
    const Vector gf = gpu->upload_vector(inv_freq.data(), head_dim / 2, owner);
    auto gstep = gpu->plan(in.plan);
    gpu->rope(*gstep, gq.view, gk.view, head_dim, gf);
    auto cstep = cpu.plan(in.plan);
    cpu.rope(*cstep, {q.data(), t, qh * head_dim}, {k.data(), t, kh * head_dim}, head_dim,
             {inv_freq.data(), head_dim / 2});
    EXPECT_LE(test::max_abs_error(download(*gpu, gq.view), q), 1e-5) << "head_dim " << head_dim;
    EXPECT_LE(test::max_abs_error(download(*gpu, gk.view), k), 1e-5) << "head_dim " << head_dim;
  }
}

TEST_F(CudaOps, SiluMulAddAndGatherMatchCpu) {
  const int64_t rows = 19, cols = 172;
  const std::vector<float> a = random_floats(rows * cols, rng, 8.0f), b = random_floats(rows * cols, rng, 2.0f);
  auto ga = upload(*gpu, a, rows, cols);
  auto gb = upload(*gpu, b, rows, cols);
  auto gout = upload(*gpu, std::vector<float>(rows * cols), rows, cols);

  std::vector<float> want(rows * cols);
  cpu.silu_mul({const_cast<float*>(a.data()), rows, cols}, {const_cast<float*>(b.data()), rows, cols},
               {want.data(), rows, cols});
  gpu->silu_mul(ga.view, gb.view, gout.view);
  EXPECT_LE(test::relative_max_error(download(*gpu, gout.view), want), 1e-6);

  cpu.add({const_cast<float*>(a.data()), rows, cols}, {const_cast<float*>(b.data()), rows, cols},
          {want.data(), rows, cols});
  gpu->add(ga.view, gb.view, ga.view);  // out aliases a, as the residual adds run
  EXPECT_EQ(download(*gpu, ga.view), want);

  PlannedInput in = make_plan({0, 4, 9}, {6, 1, 12}, 100, 16, rng, /*all_logits=*/true);
  const int64_t t = in.plan.total_tokens;
  const std::vector<float> x = random_floats(t * cols, rng);
  auto gx = upload(*gpu, x, t, cols);
  const int64_t nl = in.plan.num_logit_rows();
  auto gl = upload(*gpu, std::vector<float>(nl * cols), nl, cols);
  auto gstep = gpu->plan(in.plan);
  gpu->gather_logit_rows(*gstep, gx.view, gl.view);
  const std::vector<float> got = download(*gpu, gl.view);
  for (int64_t i = 0; i < nl; ++i) {
    EXPECT_EQ(0, std::memcmp(got.data() + i * cols, x.data() + in.plan.logit_rows[i] * cols, cols * sizeof(float)))
        << "logit row " << i;
  }
}

// The KV write on CUDA stores the same bytes as the CPU backend, for every format and rotation.
TEST_F(CudaOps, KvWriteIsBitExactWithCpu) {
  using quant::KvDtype;
  for (const int64_t head_dim : {8, 64}) {  // 8: the generic kernel; 64: the fused one
    for (const KvDtype dtype : {KvDtype::kF32, KvDtype::kBF16, KvDtype::kFP8, KvDtype::kNVFP4, KvDtype::kK8V4}) {
      for (const quant::Rotation rotation : {quant::Rotation::kNone, quant::Rotation::kHadamard}) {
        if (dtype == KvDtype::kNVFP4 && head_dim % 16 != 0) continue;
        if (dtype == KvDtype::kK8V4 && head_dim % 16 != 0) continue;
        const int64_t kv_heads = 2, layers = 2, page_size = 16;
        const cache::PageLayout layout({.num_layers = layers, .kv_heads = kv_heads, .head_dim = head_dim}, dtype,
                                       page_size);
        const cache::KvGlobalScales scales{{0.5f, 1.0f}, {1.0f, 0.25f}};
        PlannedInput in = make_plan({0, 13, 30}, {21, 1, 7}, 100, page_size, rng);
        const int64_t t = in.plan.total_tokens, num_pages = 12;
        const std::vector<float> k = random_floats(t * kv_heads * head_dim, rng, 4.0f);
        const std::vector<float> v = random_floats(t * kv_heads * head_dim, rng, 4.0f);
        std::vector<uint8_t> cpu_pool(num_pages * layout.page_bytes(), 0);
        const KvCacheView cpu_view{cpu_pool.data(), num_pages, &layout, &scales, rotation};
        auto cstep = cpu.plan(in.plan);
        cpu.kv_write(*cstep, cpu_view, 1, {const_cast<float*>(k.data()), t, kv_heads * head_dim},
                     {const_cast<float*>(v.data()), t, kv_heads * head_dim});

        auto gpool = gpu->allocate(num_pages * layout.page_bytes());  // zero-filled like the CPU pool
        const KvCacheView gpu_view{static_cast<uint8_t*>(gpool->data()), num_pages, &layout, &scales, rotation};
        auto gk = upload(*gpu, k, t, kv_heads * head_dim);
        auto gv = upload(*gpu, v, t, kv_heads * head_dim);
        auto gstep = gpu->plan(in.plan);
        gpu->kv_write(*gstep, gpu_view, 1, gk.view, gv.view);
        std::vector<uint8_t> got(cpu_pool.size());
        gpu->copy_to_host(got.data(), gpool->data(), static_cast<int64_t>(got.size()));
        EXPECT_EQ(got, cpu_pool) << quant::kv_dtype_name(dtype) << " head_dim " << head_dim << " rotation "
                                 << static_cast<int>(rotation);
      }
    }
  }
}

// rope_kv_write: on CUDA one kernel for head_dim 64/128/256 (the seam's default, rope then kv_write,
// for 8). q and k come back rotated within rope's tolerance of the CPU's rope; the pool holds, byte
// for byte, what the CPU's kv_write stores for the k the CUDA call left (and v), for every format
// and rotation.
TEST_F(CudaOps, RopeKvWriteIsRopeThenKvWrite) {
  using quant::KvDtype;
  for (const int64_t head_dim : {8, 64, 128, 256}) {
    for (const KvDtype dtype : {KvDtype::kF32, KvDtype::kBF16, KvDtype::kFP8, KvDtype::kNVFP4, KvDtype::kK8V4}) {
      for (const quant::Rotation rotation : {quant::Rotation::kNone, quant::Rotation::kHadamard}) {
        if ((dtype == KvDtype::kNVFP4 || dtype == KvDtype::kK8V4) && head_dim % 16 != 0) continue;
        const int64_t q_heads = 4, kv_heads = 2, layers = 2, page_size = 16, layer = 1;
        const cache::PageLayout layout({.num_layers = layers, .kv_heads = kv_heads, .head_dim = head_dim}, dtype,
                                       page_size);
        const cache::KvGlobalScales scales{{0.5f, 1.0f}, {1.0f, 0.25f}};
        PlannedInput in = make_plan({0, 700, 30}, {21, 1, 7}, 100, page_size, rng);
        const int64_t t = in.plan.total_tokens, num_pages = 64;
        std::vector<float> inv_freq(head_dim / 2);
        for (int64_t i = 0; i < head_dim / 2; ++i) inv_freq[i] = std::pow(10000.0f, -2.0f * i / head_dim);
        std::vector<float> q = random_floats(t * q_heads * head_dim, rng, 4.0f);
        std::vector<float> k = random_floats(t * kv_heads * head_dim, rng, 4.0f);
        const std::vector<float> v = random_floats(t * kv_heads * head_dim, rng, 4.0f);
        const std::string what = fmt::format("{} head_dim {} rotation {}", quant::kv_dtype_name(dtype), head_dim,
                                             static_cast<int>(rotation));

        auto gpool = gpu->allocate(num_pages * layout.page_bytes());
        const KvCacheView gpu_view{static_cast<uint8_t*>(gpool->data()), num_pages, &layout, &scales, rotation};
        auto gq = upload(*gpu, q, t, q_heads * head_dim);
        auto gk = upload(*gpu, k, t, kv_heads * head_dim);
        auto gv = upload(*gpu, v, t, kv_heads * head_dim);
        std::unique_ptr<Buffer> owner;
        const Vector gf = gpu->upload_vector(inv_freq.data(), head_dim / 2, owner);
        auto gstep = gpu->plan(in.plan);
        gpu->rope_kv_write(*gstep, gpu_view, layer, gq.view, gk.view, gv.view, head_dim, gf);
        std::vector<uint8_t> got(num_pages * layout.page_bytes());
        gpu->copy_to_host(got.data(), gpool->data(), static_cast<int64_t>(got.size()));
        const std::vector<float> got_q = download(*gpu, gq.view), got_k = download(*gpu, gk.view);
        EXPECT_EQ(download(*gpu, gv.view), v) << what;  // v is read, never written

        auto cstep = cpu.plan(in.plan);
        cpu.rope(*cstep, {q.data(), t, q_heads * head_dim}, {k.data(), t, kv_heads * head_dim}, head_dim,
                 {inv_freq.data(), head_dim / 2});
        EXPECT_LE(test::max_abs_error(got_q, q), 4e-5) << what;  // 4.0-scaled inputs: rope's 1e-5 × 4
        EXPECT_LE(test::max_abs_error(got_k, k), 4e-5) << what;
        std::vector<uint8_t> want(got.size(), 0);
        const KvCacheView cpu_view{want.data(), num_pages, &layout, &scales, rotation};
        cpu.kv_write(*cstep, cpu_view, layer, {const_cast<float*>(got_k.data()), t, kv_heads * head_dim},
                     {const_cast<float*>(v.data()), t, kv_heads * head_dim});
        EXPECT_EQ(got, want) << what;
        // Something was written (the pool starts zeroed).
        EXPECT_NE(std::count(got.begin(), got.end(), uint8_t{0}), static_cast<std::ptrdiff_t>(got.size())) << what;
      }
    }
  }
}

TEST_F(CudaOps, StepFromAnotherBackendIsRejected) {
  PlannedInput in = make_plan({0}, {4}, 10, 16, rng);
  auto cstep = cpu.plan(in.plan);
  std::vector<float> table = random_floats(10 * 8, rng);
  std::unique_ptr<Buffer> owner;
  const Matrix gt = gpu->upload_matrix(table.data(), 10, 8, owner);
  auto gout = upload(*gpu, std::vector<float>(4 * 8), 4, 8);
  EXPECT_THROW(gpu->embedding(*cstep, gt, gout.view), Error);
}

}  // namespace
}  // namespace nibble::backend
