// The "4 over 6" nvfp4 block-scale rule through the ops seam: CudaBackend::kv_write with
// KvCacheView::nvfp4_scale_rule = kFourOverSix stores the same bytes as CpuBackend::kv_write, on
// the fused kernel (head_dim 64, 128, 256) and the generic one (head_dim 32), for nvfp4 and k8v4,
// with and without the Hadamard rotation, for g = 1 and calibrated-looking g. The CPU pool under
// 4-over-6 must also differ from the amax/6 one, so the rule visibly reaches the device.
#include <gtest/gtest.h>

#include <numeric>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "backend/cuda_common/cuda_test_util.h"
#include "backend/cuda_ops/seam_test_util.h"
#include "backend/step_plan.h"
#include "cache/page_layout.h"
#include "quant/kv_format.h"
#include "quant/nvfp4.h"

namespace nibble::backend {
namespace {

using quant::KvDtype;
using quant::Nvfp4ScaleRule;
using quant::Rotation;

// One step: sequence s starts at firsts[s] with lens[s] new tokens; pages 0, 1, 2, ... in order.
struct Step {
  std::vector<std::vector<int32_t>> tokens, pages;
  StepPlan plan;
};

Step make_step(const std::vector<int64_t>& firsts, const std::vector<int64_t>& lens, int64_t page_size) {
  Step st;
  int32_t next_page = 0;
  for (size_t s = 0; s < lens.size(); ++s) {
    st.tokens.emplace_back(lens[s], 1);
    std::vector<int32_t> p((firsts[s] + lens[s] + page_size - 1) / page_size);
    std::iota(p.begin(), p.end(), next_page);
    next_page += static_cast<int32_t>(p.size());
    st.pages.push_back(std::move(p));
  }
  std::vector<SequenceStep> seqs;
  for (size_t s = 0; s < lens.size(); ++s)
    seqs.push_back({.first_position = firsts[s], .tokens = st.tokens[s], .pages = st.pages[s]});
  st.plan = make_step_plan(seqs, page_size, next_page);
  return st;
}

TEST(CudaBackendKvWrite, FourOverSixIsBitExactWithCpu) {
  NIBBLE_SKIP_WITHOUT_GPU();
  std::unique_ptr<Backend> gpu = make_backend({.device = "cuda"});
  CpuBackend cpu{{.num_threads = 2}};
  std::mt19937 rng(4606);
  for (const int64_t head_dim : {32, 64, 128, 256}) {  // 32: the generic kernel; others fused
    for (const KvDtype dtype : {KvDtype::kNVFP4, KvDtype::kK8V4}) {
      for (const Rotation rotation : {Rotation::kNone, Rotation::kHadamard}) {
        for (const float g : {1.0f, 0.37f}) {
          SCOPED_TRACE(std::string(quant::kv_dtype_name(dtype)) + " head_dim " + std::to_string(head_dim) +
                       (rotation == Rotation::kHadamard ? " hadamard" : " none") + " g " + std::to_string(g));
          const int64_t kv_heads = 2, layers = 2, page_size = 16, layer = 1;
          const cache::PageLayout layout({.num_layers = layers, .kv_heads = kv_heads, .head_dim = head_dim}, dtype,
                                         page_size);
          const cache::KvGlobalScales scales{{1.0f, g}, {1.0f, g}};  // layer 1 is written
          // Odd token counts, page-unaligned starts (a decode row, a prefill chunk, a short extend).
          const Step st = make_step({0, 13, 30}, {21, 1, 7}, page_size);
          const int64_t t = st.plan.total_tokens, width = kv_heads * head_dim;
          int64_t num_pages = 0;
          for (const auto& p : st.pages) num_pages += static_cast<int64_t>(p.size());
          std::vector<float> k = test::random_floats(t * width, rng, 4.0f);
          std::vector<float> v = test::random_floats(t * width, rng, 4.0f);
          for (int64_t i = 0; i < t * width; i += 97) k[i] *= 300.0f, v[i] *= 1e-3f;  // uneven blocks

          auto cpu_write = [&](Nvfp4ScaleRule rule) {
            std::vector<uint8_t> pool(num_pages * layout.page_bytes(), 0);
            const KvCacheView view{pool.data(), num_pages, &layout, &scales, rotation, rule};
            auto step = cpu.plan(st.plan);
            cpu.kv_write(*step, view, layer, {k.data(), t, width}, {v.data(), t, width});
            return pool;
          };
          const std::vector<uint8_t> want = cpu_write(Nvfp4ScaleRule::kFourOverSix);
          EXPECT_NE(want, cpu_write(Nvfp4ScaleRule::kAmaxOver6)) << "the data never take the amax/4 candidate";

          auto gpool = gpu->allocate(num_pages * layout.page_bytes());  // zero-filled like the CPU pool
          const KvCacheView gview{static_cast<uint8_t*>(gpool->data()), num_pages, &layout, &scales, rotation,
                                  Nvfp4ScaleRule::kFourOverSix};
          auto gk = test::upload(*gpu, k, t, width);
          auto gv = test::upload(*gpu, v, t, width);
          auto gstep = gpu->plan(st.plan);
          gpu->kv_write(*gstep, gview, layer, gk.view, gv.view);
          std::vector<uint8_t> got(want.size());
          gpu->copy_to_host(got.data(), gpool->data(), static_cast<int64_t>(got.size()));
          int64_t mismatches = 0, first = -1;
          for (size_t i = 0; i < got.size(); ++i) {
            if (got[i] != want[i]) mismatches += 1, first = first < 0 ? static_cast<int64_t>(i) : first;
          }
          EXPECT_EQ(mismatches, 0) << "first differing byte " << first;
        }
      }
    }
  }
}

}  // namespace
}  // namespace nibble::backend
