// The KV write and the three attention paths of the CPU backend, for every KV format with and
// without the Hadamard rotation, against an independent oracle: the pool bytes are dequantized
// with the format definitions (quant/kv_format.h), rotated back with an explicit Hadamard matrix,
// and attention is computed in double precision by the textbook formula. Prefill uses the chunk's
// raw K/V (full precision); decode reads every key from the pages; extend reads the prefix from the
// pages and its own chunk raw.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <random>

#include "backend/cpu/cpu_backend.h"
#include "common/error.h"
#include "quant/kv_format.h"

namespace nibble::backend {
namespace {

using quant::KvDtype;
using quant::Rotation;

constexpr int64_t kHeads = 4, kKvHeads = 2, kHeadDim = 64, kLayers = 2, kPageSize = 16, kNumPages = 24;

// Explicit normalized Sylvester Hadamard matrix: H[i][j] = (-1)^popcount(i & j) / sqrt(n).
std::vector<double> hadamard_matrix(int n) {
  std::vector<double> h(n * n);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) h[i * n + j] = (std::popcount(static_cast<unsigned>(i & j)) % 2 ? -1.0 : 1.0) / std::sqrt(n);
  return h;
}

std::vector<double> apply(const std::vector<double>& h, const double* x, int n) {
  std::vector<double> y(n, 0.0);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) y[i] += h[i * n + j] * x[j];
  return y;
}

struct Fixture {
  KvDtype dtype;
  Rotation rotation;
  CpuBackend backend{{.num_threads = 2}};
  cache::PageLayout layout{{.num_layers = kLayers, .kv_heads = kKvHeads, .head_dim = kHeadDim}, dtype, kPageSize};
  cache::KvGlobalScales scales{{0.5f, 1.0f}, {1.0f, 0.25f}};  // non-trivial g per layer and K/V
  std::vector<uint8_t> pool = std::vector<uint8_t>(kNumPages * layout.page_bytes(), 0);
  std::mt19937 rng{1234};

  Fixture(KvDtype d, Rotation r) : dtype(d), rotation(r) {}

  KvCacheView view() { return {pool.data(), kNumPages, &layout, &scales, rotation}; }

  std::vector<float> random(int64_t n, float stddev = 1.0f) {
    std::normal_distribution<float> normal(0.0f, stddev);
    std::vector<float> v(n);
    for (float& x : v) x = normal(rng);
    // A few outliers per vector: what the rotation is for.
    for (int64_t i = 0; i < n; i += 37) v[i] *= 6.0f;
    return v;
  }

  // The dequantized vector the cache holds (in the rotated space when rotating) for position `pos` of a sequence with page table `pages`.
  std::vector<double> stored(const std::vector<int32_t>& pages, int64_t layer, bool key, int64_t head, int64_t pos) {
    const cache::KvPartLayout& part = key ? layout.k(layer) : layout.v(layer);
    const uint8_t* base = pool.data() + pages[pos / kPageSize] * layout.page_bytes();
    std::vector<float> out(kHeadDim);
    quant::dequantize_head_vector(part.format, base + part.data_at(head, pos % kPageSize),
                                  base + part.scales_at(head, pos % kPageSize), kHeadDim,
                                  key ? scales.k[layer] : scales.v[layer], out.data());
    return {out.begin(), out.end()};
  }
};

struct SeqSpec {
  int64_t prefix;                // tokens already cached (written by an earlier step)
  int64_t new_tokens;
  std::vector<int32_t> pages;    // page table
};

// Writes the prefix of each sequence with one earlier prefill step (raw K/V random).
void write_prefixes(Fixture& f, const std::vector<SeqSpec>& seqs, int64_t layer) {
  std::vector<SequenceStep> steps;
  std::vector<std::vector<int32_t>> tokens;
  for (const SeqSpec& s : seqs) tokens.emplace_back(std::max<int64_t>(s.prefix, 0), 0);
  for (size_t i = 0; i < seqs.size(); ++i) {
    if (seqs[i].prefix > 0) steps.push_back({.first_position = 0, .tokens = tokens[i], .pages = seqs[i].pages});
  }
  if (steps.empty()) return;
  const StepPlan plan = make_step_plan(steps, kPageSize, kNumPages);
  const int64_t width = kKvHeads * kHeadDim;
  std::vector<float> k = f.random(plan.total_tokens * width), v = f.random(plan.total_tokens * width);
  cpu_kv_write(f.backend.pool(), plan, f.view(), layer, {k.data(), plan.total_tokens, width},
               {v.data(), plan.total_tokens, width});
}

// One step over `seqs` for layer `layer`: kv_write + attention, compared with the oracle.
void check_step(Fixture& f, const std::vector<SeqSpec>& seqs, int64_t layer, double tolerance) {
  write_prefixes(f, seqs, layer);
  std::vector<std::vector<int32_t>> tokens;
  for (const SeqSpec& s : seqs) tokens.emplace_back(s.new_tokens, 0);
  std::vector<SequenceStep> steps;
  for (size_t i = 0; i < seqs.size(); ++i) {
    steps.push_back({.first_position = seqs[i].prefix, .tokens = tokens[i], .pages = seqs[i].pages});
  }
  const StepPlan plan = make_step_plan(steps, kPageSize, kNumPages);
  const int64_t t = plan.total_tokens, kv_width = kKvHeads * kHeadDim, q_width = kHeads * kHeadDim;
  std::vector<float> q = f.random(t * q_width), k = f.random(t * kv_width), v = f.random(t * kv_width);
  std::vector<float> out(t * q_width, NAN);
  const AttentionShape shape{kHeads, kKvHeads, kHeadDim, 1.0f / std::sqrt(static_cast<float>(kHeadDim))};
  PlannedStep step(plan);
  f.backend.kv_write(step, f.view(), layer, {k.data(), t, kv_width}, {v.data(), t, kv_width});
  f.backend.attention(step, f.view(), layer, shape, {q.data(), t, q_width}, {k.data(), t, kv_width},
                      {v.data(), t, kv_width}, {out.data(), t, q_width});

  const bool rotate = f.rotation == Rotation::kHadamard;
  const std::vector<double> h = hadamard_matrix(kHeadDim);
  double max_err = 0.0;
  for (size_t s = 0; s < seqs.size(); ++s) {
    const SequencePlan& sp = plan.seqs[s];
    for (int64_t i = 0; i < sp.num_new_tokens; ++i) {
      const int64_t row = plan.token_begin[s] + i;
      const int64_t pos = sp.first_position + i;
      for (int64_t head = 0; head < kHeads; ++head) {
        const int64_t kvh = head / (kHeads / kKvHeads);
        // Keys/values this query sees, in the space the cache holds them (rotated when rotating).
        std::vector<double> qd(q.begin() + row * q_width + head * kHeadDim,
                               q.begin() + row * q_width + (head + 1) * kHeadDim);
        if (rotate) qd = apply(h, qd.data(), kHeadDim);
        std::vector<std::vector<double>> keys, values;
        const int64_t from_pages = sp.path() == AttentionPath::kDecode ? sp.context_after : sp.first_position;
        for (int64_t p = 0; p < from_pages; ++p) {
          keys.push_back(f.stored(seqs[s].pages, layer, true, kvh, p));
          values.push_back(f.stored(seqs[s].pages, layer, false, kvh, p));
        }
        if (sp.path() != AttentionPath::kDecode) {
          for (int64_t j = 0; j <= i; ++j) {
            const int64_t r = plan.token_begin[s] + j;
            std::vector<double> kr(k.begin() + r * kv_width + kvh * kHeadDim, k.begin() + r * kv_width + (kvh + 1) * kHeadDim);
            std::vector<double> vr(v.begin() + r * kv_width + kvh * kHeadDim, v.begin() + r * kv_width + (kvh + 1) * kHeadDim);
            keys.push_back(rotate ? apply(h, kr.data(), kHeadDim) : kr);
            values.push_back(rotate ? apply(h, vr.data(), kHeadDim) : vr);
          }
        }
        ASSERT_EQ(static_cast<int64_t>(keys.size()), pos + 1);
        std::vector<double> scores;
        for (const auto& key : keys) {
          double dot = 0;
          for (int64_t d = 0; d < kHeadDim; ++d) dot += qd[d] * key[d];
          scores.push_back(dot / std::sqrt(static_cast<double>(kHeadDim)));
        }
        const double m = *std::max_element(scores.begin(), scores.end());
        double total = 0;
        for (double& sc : scores) total += (sc = std::exp(sc - m));
        std::vector<double> o(kHeadDim, 0.0);
        for (size_t j = 0; j < keys.size(); ++j)
          for (int64_t d = 0; d < kHeadDim; ++d) o[d] += scores[j] / total * values[j][d];
        if (rotate) o = apply(h, o.data(), kHeadDim);  // H is its own inverse
        for (int64_t d = 0; d < kHeadDim; ++d) {
          max_err = std::max(max_err, std::fabs(o[d] - out[row * q_width + head * kHeadDim + d]));
        }
      }
    }
  }
  EXPECT_LE(max_err, tolerance) << quant::kv_dtype_name(f.dtype) << (rotate ? " + hadamard" : "");
}

struct Case {
  KvDtype dtype;
  Rotation rotation;
};

class CpuAttention : public ::testing::TestWithParam<Case> {};

std::vector<int32_t> pages(std::initializer_list<int32_t> ids) { return ids; }

TEST_P(CpuAttention, PrefillUsesTheChunksOwnKv) {
  Fixture f(GetParam().dtype, GetParam().rotation);
  check_step(f, {{.prefix = 0, .new_tokens = 37, .pages = pages({5, 2, 9})}}, 0, 2e-5);
}

TEST_P(CpuAttention, DecodeReadsQuantizedPages) {
  Fixture f(GetParam().dtype, GetParam().rotation);
  check_step(f, {{.prefix = 40, .new_tokens = 1, .pages = pages({7, 1, 12})}}, 1, 2e-5);
}

TEST_P(CpuAttention, ExtendReadsPrefixFromPagesAndOwnChunkRaw) {
  Fixture f(GetParam().dtype, GetParam().rotation);
  check_step(f, {{.prefix = 19, .new_tokens = 45, .pages = pages({3, 11, 0, 20})}}, 0, 2e-5);
}

TEST_P(CpuAttention, MixedBatchOfAllThreePaths) {
  Fixture f(GetParam().dtype, GetParam().rotation);
  check_step(f,
             {{.prefix = 0, .new_tokens = 5, .pages = pages({4})},
              {.prefix = 33, .new_tokens = 1, .pages = pages({8, 14, 15})},
              {.prefix = 16, .new_tokens = 16, .pages = pages({6, 13})},
              {.prefix = 70, .new_tokens = 1, .pages = pages({16, 17, 18, 19, 21})}},
             1, 2e-5);
}

TEST_P(CpuAttention, KvWriteStoresBitExactCodesAtPageAndSlot) {
  Fixture f(GetParam().dtype, GetParam().rotation);
  const std::vector<int32_t> table = {9, 3};
  std::vector<int32_t> tokens(20, 0);
  const SequenceStep seq{.first_position = 3, .tokens = tokens, .pages = table};
  const StepPlan plan = make_step_plan(std::span(&seq, 1), kPageSize, kNumPages);
  const int64_t width = kKvHeads * kHeadDim;
  std::vector<float> k = f.random(20 * width), v = f.random(20 * width);
  cpu_kv_write(f.backend.pool(), plan, f.view(), 1, {k.data(), 20, width}, {v.data(), 20, width});
  const std::vector<double> h = hadamard_matrix(kHeadDim);
  for (int64_t i = 0; i < 20; ++i) {
    const int64_t pos = 3 + i;
    const uint8_t* page = f.pool.data() + table[pos / kPageSize] * f.layout.page_bytes();
    for (int which = 0; which < 2; ++which) {
      const cache::KvPartLayout& part = which == 0 ? f.layout.k(1) : f.layout.v(1);
      for (int64_t head = 0; head < kKvHeads; ++head) {
        const float* src = (which == 0 ? k : v).data() + i * width + head * kHeadDim;
        std::vector<float> x(src, src + kHeadDim);
        if (f.rotation == Rotation::kHadamard) {
          std::vector<double> xd(x.begin(), x.end());
          xd = apply(h, xd.data(), kHeadDim);
          // The rotated vector within float rounding: compare dequantized values, not codes.
          std::vector<float> got(kHeadDim), want(kHeadDim);
          std::vector<uint8_t> data(quant::data_bytes(part.format, kHeadDim)), sc(quant::scale_bytes(part.format, kHeadDim) + 1);
          const float g = which == 0 ? f.scales.k[1] : f.scales.v[1];
          quant::dequantize_head_vector(part.format, page + part.data_at(head, pos % kPageSize),
                                        page + part.scales_at(head, pos % kPageSize), kHeadDim, g, got.data());
          for (int64_t d = 0; d < kHeadDim; ++d) EXPECT_TRUE(std::isfinite(got[d]));
          double err = 0, norm = 0;
          for (int64_t d = 0; d < kHeadDim; ++d) err += (got[d] - xd[d]) * (got[d] - xd[d]), norm += xd[d] * xd[d];
          EXPECT_LT(std::sqrt(err / norm), 0.2) << "rotated vector badly reconstructed at position " << pos;
        } else {
          std::vector<uint8_t> data(quant::data_bytes(part.format, kHeadDim)), sc(quant::scale_bytes(part.format, kHeadDim) + 1);
          quant::quantize_head_vector(part.format, x.data(), kHeadDim, which == 0 ? f.scales.k[1] : f.scales.v[1],
                                      data.data(), sc.data());
          ASSERT_TRUE(std::equal(data.begin(), data.end(), page + part.data_at(head, pos % kPageSize)))
              << "position " << pos << " head " << head;
          ASSERT_TRUE(std::equal(sc.begin(), sc.end() - 1, page + part.scales_at(head, pos % kPageSize)));
        }
      }
    }
  }
  // Positions 0..2 of page 9 were never written: still zero.
  const uint8_t* first = f.pool.data() + 9 * f.layout.page_bytes();
  const cache::KvPartLayout& part = f.layout.k(1);
  for (int64_t b = 0; b < part.data_row_bytes; ++b) EXPECT_EQ(first[part.data_at(0, 0) + b], 0);
}

TEST(CpuAttentionErrors, ShapesAndPagesAreChecked) {
  Fixture f(KvDtype::kF32, Rotation::kNone);
  std::vector<int32_t> tokens(4, 0);
  const std::vector<int32_t> table = {0};
  const SequenceStep seq{.first_position = 0, .tokens = tokens, .pages = table};
  const StepPlan plan = make_step_plan(std::span(&seq, 1), kPageSize, kNumPages);
  std::vector<float> k(4 * 128), bad(3 * 128);
  EXPECT_THROW(cpu_kv_write(f.backend.pool(), plan, f.view(), 0, {k.data(), 4, 128}, {bad.data(), 3, 128}), Error);
  EXPECT_THROW(cpu_kv_write(f.backend.pool(), plan, f.view(), kLayers, {k.data(), 4, 128}, {k.data(), 4, 128}), Error);
  // Too few pages for the tokens, a page outside the pool, no tokens.
  std::vector<int32_t> many(17, 0);
  const SequenceStep too_long{.first_position = 0, .tokens = many, .pages = table};
  EXPECT_THROW(make_step_plan(std::span(&too_long, 1), kPageSize, kNumPages), Error);
  const std::vector<int32_t> outside = {kNumPages};
  const SequenceStep bad_page{.first_position = 0, .tokens = tokens, .pages = outside};
  EXPECT_THROW(make_step_plan(std::span(&bad_page, 1), kPageSize, kNumPages), Error);
  const SequenceStep empty{.first_position = 0, .tokens = {}, .pages = table};
  EXPECT_THROW(make_step_plan(std::span(&empty, 1), kPageSize, kNumPages), Error);
  // A plan made for a larger pool than the view's: the ops refuse its pages, whether the plan
  // carries its largest page id (make_step_plan) or not (built by hand: checked page by page).
  const std::vector<int32_t> beyond = {kNumPages + 1};
  const SequenceStep late_page{.first_position = 0, .tokens = tokens, .pages = beyond};
  StepPlan wide = make_step_plan(std::span(&late_page, 1), kPageSize, kNumPages + 8);
  EXPECT_EQ(wide.max_page_id, kNumPages + 1);
  const Tensor kt{k.data(), 4, 128};
  try {
    cpu_kv_write(f.backend.pool(), wide, f.view(), 0, kt, kt);
    ADD_FAILURE() << "a page outside the pool was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("outside the pool"), std::string::npos) << e.what();
  }
  wide.max_page_id = StepPlan::kMaxPageUnknown;
  EXPECT_THROW(cpu_kv_write(f.backend.pool(), wide, f.view(), 0, kt, kt), Error);
  StepPlan by_hand = plan;
  by_hand.max_page_id = StepPlan::kMaxPageUnknown;
  EXPECT_NO_THROW(cpu_kv_write(f.backend.pool(), by_hand, f.view(), 0, kt, kt));
}

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  for (KvDtype d : {KvDtype::kF32, KvDtype::kBF16, KvDtype::kFP8, KvDtype::kNVFP4, KvDtype::kK8V4})
    for (Rotation r : {Rotation::kNone, Rotation::kHadamard}) cases.push_back({d, r});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Formats, CpuAttention, ::testing::ValuesIn(all_cases()), [](const auto& info) {
  return std::string(quant::kv_dtype_name(info.param.dtype)) +
         (info.param.rotation == Rotation::kHadamard ? "_hadamard" : "_plain");
});

}  // namespace
}  // namespace nibble::backend
