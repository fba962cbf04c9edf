// CUDA graphs for decode steps (backend/cuda/cuda_graph.h) against the eager path: two models
// loaded from the same directory onto two CUDA backends, one with graphs and one without, run the
// same sequence of steps through Session; every decode step's logits must be bit-identical.
//
// The steps change everything a replay must pick up from its input buffers: lengths grow every
// step and cross page boundaries (page_size 16: the page-table width bucket grows 2 -> 4 -> 8),
// sequences are removed (their pages freed and reused by a new sequence: other page tables), and
// the batch changes 4 -> 2 -> 1 -> 4 (each a graph bucket, so both sides run identical shapes). A
// batch of 3 is padded to the bucket 4 on the graph side only; its rows pass through cuBLAS in a
// different batch, so that phase is held to 1e-5 of the logit scale (and reported when bitwise).
// The graph side must actually have replayed (graph_stats().replays > 0) and never have fallen back
// (mismatches == 0).
//
// Models: the llama3 fixture (head_dim 64: the split-KV decode kernel, nvfp4 and bf16 caches) and
// stories260k (head_dim 8: the chunk kernel decodes).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda_common/cuda_test_util.h"
#include "runtime/session.h"

namespace nibble::runtime {
namespace {

namespace fs = std::filesystem;
using backend::CudaBackend;
using quant::KvDtype;

struct Case {
  fs::path dir;
  KvDtype kv;
};

backend::CudaBackend& cuda_of(LoadedModel& m) { return dynamic_cast<backend::CudaBackend&>(m.backend()); }

int32_t argmax(std::span<const float> row) {
  return static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
}

class CudaGraph : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override { NIBBLE_SKIP_WITHOUT_GPU(); }
};

TEST_P(CudaGraph, ReplayMatchesEagerBitForBit) {
  const Case& c = GetParam();
  LoadedModel graph = load_model({.dir = c.dir, .device = "cuda", .progress = false, .cuda_graphs = true});
  LoadedModel eager = load_model({.dir = c.dir, .device = "cuda", .progress = false, .cuda_graphs = false});
  ASSERT_TRUE(cuda_of(graph).graphs_enabled()) << "NIBBLE_CUDA_GRAPHS is set in the environment";
  ASSERT_FALSE(cuda_of(eager).graphs_enabled());
  const SessionOptions options{.kv_dtype = c.kv, .page_size = 16, .max_context = 120, .max_sequences = 6};
  Session gs(graph, options), es(eager, options);
  const int64_t vocab = gs.vocab_size();
  std::mt19937 rng(7);
  std::uniform_int_distribution<int32_t> token(3, static_cast<int32_t>(vocab) - 1);

  std::vector<SequenceId> live;  // same ids on both sessions (both number them alike)
  std::map<SequenceId, int32_t> next;
  auto add = [&](int64_t prompt_len) {
    const SequenceId g = gs.add_sequence(), e = es.add_sequence();
    ASSERT_EQ(g, e);
    std::vector<int32_t> prompt(static_cast<size_t>(prompt_len));
    for (int32_t& t : prompt) t = token(rng);
    const std::vector<StepInput> in{{.sequence = g, .tokens = prompt}};
    const std::vector<float> lg = gs.step(in), le = es.step(in);
    ASSERT_EQ(lg.size(), le.size());
    next[g] = argmax(le);
    live.push_back(g);
  };
  auto remove = [&](size_t index) {
    gs.remove_sequence(live[index]);
    es.remove_sequence(live[index]);
    live.erase(live.begin() + static_cast<std::ptrdiff_t>(index));
  };
  int64_t compared = 0, bitwise_padded = 0, padded_steps = 0;
  auto decode = [&](int steps, bool exact) {
    for (int i = 0; i < steps; ++i) {
      std::vector<std::vector<int32_t>> tokens;
      for (SequenceId id : live) tokens.push_back({next[id]});
      std::vector<StepInput> in;
      for (size_t s = 0; s < live.size(); ++s) in.push_back({.sequence = live[s], .tokens = tokens[s]});
      const std::vector<float> lg = gs.step(in), le = es.step(in);
      ASSERT_EQ(lg.size(), le.size());
      ASSERT_EQ(lg.size(), live.size() * static_cast<size_t>(vocab));
      const bool same = std::memcmp(lg.data(), le.data(), lg.size() * sizeof(float)) == 0;
      if (exact) {
        ASSERT_TRUE(same) << "graph logits differ from eager at decode step " << i << " with " << live.size()
                          << " sequences, lengths " << gs.length(live[0]);
      } else {
        double err = 0, scale = 1e-3;
        for (size_t k = 0; k < lg.size(); ++k) {
          err = std::max(err, std::fabs(static_cast<double>(lg[k]) - le[k]));
          scale = std::max(scale, std::fabs(static_cast<double>(le[k])));
        }
        EXPECT_LE(err / scale, 1e-5) << "padded batch, step " << i;
        ++padded_steps;
        bitwise_padded += same ? 1 : 0;
      }
      for (size_t s = 0; s < live.size(); ++s) {
        next[live[s]] = argmax(std::span<const float>(le).subspan(s * static_cast<size_t>(vocab), vocab));
      }
      ++compared;
    }
  };
  // 4 sequences of 5..30 tokens: lengths cross 16, 32 (page boundaries) and 64 (table width 4 -> 8).
  for (int64_t len : {5, 14, 30, 17}) add(len);
  decode(38, true);
  remove(1);  // batch 2; the freed pages go to the next sequence
  remove(0);
  decode(6, true);
  remove(0);  // batch 1
  decode(6, true);
  add(9);  // batch 2 again, then 4 with reused pages
  add(3);
  add(20);
  decode(10, true);
  remove(3);  // batch 3: padded to the bucket of 4 on the graph side
  decode(6, false);
  const backend::GraphStats& st = cuda_of(graph).graph_stats();
  std::printf("measured graph %s kv %s: %lld decode steps compared, graph captures %lld replays %lld mismatches "
              "%lld eager %lld; padded batch bitwise equal in %lld of %lld steps\n",
              c.dir.filename().c_str(), std::string(quant::kv_dtype_name(c.kv)).c_str(),
              static_cast<long long>(compared), static_cast<long long>(st.captures), static_cast<long long>(st.replays),
              static_cast<long long>(st.mismatches), static_cast<long long>(st.eager_steps),
              static_cast<long long>(bitwise_padded), static_cast<long long>(padded_steps));
  EXPECT_GT(st.replays, compared / 2) << "most decode steps should replay a graph";
  EXPECT_GT(st.captures, 3) << "several buckets and widths were seen";
  EXPECT_EQ(st.mismatches, 0) << "a replay fell back to the eager ops";
  EXPECT_EQ(cuda_of(eager).graph_stats().captures + cuda_of(eager).graph_stats().replays, 0);
}

const fs::path kFixtures = fs::path(NIBBLE_SOURCE_DIR) / "tests" / "data" / "hf_fixtures";
const fs::path kStories = fs::path(NIBBLE_SOURCE_DIR) / "models" / "stories260k";

INSTANTIATE_TEST_SUITE_P(Models, CudaGraph,
                         ::testing::Values(Case{kFixtures / "llama3_untied", KvDtype::kNVFP4},
                                           Case{kFixtures / "llama3_untied", KvDtype::kBF16},
                                           Case{kStories, KvDtype::kFP8}),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return info.param.dir.filename().string() + "_" +
                                  std::string(quant::kv_dtype_name(info.param.kv));
                         });

// The eager path runs the same kernels in both modes: a plan() with a declared geometry makes the
// split plan there, so attention() never plans; NIBBLE_CUDA_GRAPHS=0 turns graphs off.
TEST(CudaGraphEnv, EnvironmentVariableTurnsGraphsOff) {
  NIBBLE_SKIP_WITHOUT_GPU();
  ::setenv("NIBBLE_CUDA_GRAPHS", "0", 1);
  CudaBackend off(backend::WeightPrecision::kF32, true);
  ::unsetenv("NIBBLE_CUDA_GRAPHS");
  CudaBackend on(backend::WeightPrecision::kF32, true);
  EXPECT_FALSE(off.graphs_enabled());
  EXPECT_TRUE(on.graphs_enabled());
  EXPECT_EQ(off.decode_batch_bucket(3), 3);
  EXPECT_EQ(on.decode_batch_bucket(3), 4);
  EXPECT_EQ(on.decode_batch_bucket(17), 24);
  EXPECT_EQ(on.decode_batch_bucket(1000), 1000);  // above the largest bucket: eager, unpadded
}

}  // namespace
}  // namespace nibble::runtime
