// The CUDA write path must store exactly the bytes the CPU reference (quant::quantize_head_vector,
// after quant::hadamard_inplace when rotating) produces, at exactly the slots the page tables name,
// and nothing else: both pools start poisoned with the same byte and are compared whole. Both nvfp4
// block-scale rules: amax/6 and "4 over 6" (quant::nvfp4_quantize_block_4over6 per block, as the
// CPU backend's write does), the latter also on near-tie blocks (nvfp4_near_ties.h).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <ostream>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "backend/cuda/kv_write.h"
#include "backend/cuda_kv_write/nvfp4_near_ties.h"
#include "backend/cuda_common/cuda_test_util.h"
#include "cache/page_layout.h"
#include "common/error.h"
#include "quant/bf16.h"
#include "quant/hadamard.h"
#include "quant/kv_format.h"
#include "quant/nvfp4.h"

namespace nibble::cuda {
namespace {

using quant::KvDtype;
using quant::Nvfp4ScaleRule;
using quant::Rotation;
using test::DeviceBuffer;

constexpr uint8_t kPoison = 0xA5;

struct WriteCase {
  KvDtype dtype;
  int head_dim;
  Rotation rotation;
  int page_size;
  ActivationDtype input;
  Nvfp4ScaleRule rule = Nvfp4ScaleRule::kAmaxOver6;
};

std::string case_name(const testing::TestParamInfo<WriteCase>& info) {
  const WriteCase& c = info.param;
  return std::string(quant::kv_dtype_name(c.dtype)) + "_d" + std::to_string(c.head_dim) +
         (c.rotation == Rotation::kHadamard ? "_rot" : "_norot") + "_p" + std::to_string(c.page_size) +
         (c.input == ActivationDtype::kBF16 ? "_inbf16" : "_inf32") +
         (c.rule == Nvfp4ScaleRule::kFourOverSix ? "_4over6" : "");
}

// gtest prints a parameter in the ctest name: the case name, not the struct's (padding) bytes.
void PrintTo(const WriteCase& c, std::ostream* os) {
  *os << case_name(testing::TestParamInfo<WriteCase>(c, 0));
}

// Head vectors with awkward values: ordinary normals at varying magnitudes, an all-zero vector,
// tiny values (E4M3 subnormal scales, zero blocks), huge values (saturation) and, unless rotating
// (H would turn Inf into NaN, whose sign bit is the one documented difference), an infinity.
std::vector<float> make_inputs(int64_t vectors, int head_dim, bool with_inf, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(vectors * head_dim);
  for (int64_t v = 0; v < vectors; ++v) {
    float magnitude = std::ldexp(1.0f, static_cast<int>(rng() % 13) - 6);
    if (v % 11 == 3) magnitude = 1e-7f;
    if (v % 13 == 5) magnitude = 3e4f;
    for (int d = 0; d < head_dim; ++d) x[v * head_dim + d] = normal(rng) * magnitude;
    if (v % 17 == 7) std::fill_n(x.begin() + v * head_dim, head_dim, 0.0f);
    if (with_inf && v % 19 == 9) x[v * head_dim + 5] = -std::numeric_limits<float>::infinity();
  }
  return x;
}

// Where the new rows go and what they hold: rows [num_tokens][kv_heads][head_dim] f32 (for a bf16
// input, the values the device receives as bf16, already exactly representable).
struct WriteInputs {
  std::vector<int32_t> positions, row_sequence;
  test::PageTables pt;
  std::vector<float> k, v;
};

// Runs kv_write on `in` and compares the whole pool, byte for byte, with the CPU reference applied
// to the same rows (quant::hadamard_inplace, then quant::quantize_head_vector; under the 4-over-6
// rule an nvfp4 part is quant::nvfp4_quantize_block_4over6 per block, the CPU backend's loop).
// `four_picks` (if given) counts the nvfp4 blocks where the reference kept the amax/4 candidate.
void expect_pool_matches_cpu(const WriteCase& c, const WriteInputs& in, int64_t kv_heads, float g_k, float g_v,
                             int64_t* four_picks = nullptr) {
  const int64_t layer = 1;  // write the second layer: exercises the per-layer part offsets
  const cache::PageLayout layout({.num_layers = 2, .kv_heads = kv_heads, .head_dim = c.head_dim}, c.dtype, c.page_size);
  const auto& pt = in.pt;
  const auto& positions = in.positions;
  const auto& row_sequence = in.row_sequence;
  const int64_t num_tokens = static_cast<int64_t>(positions.size());
  const std::vector<float>& k_in = in.k;
  const std::vector<float>& v_in = in.v;
  std::vector<uint16_t> k_bf16(k_in.size()), v_bf16(v_in.size());
  if (c.input == ActivationDtype::kBF16) {
    for (size_t i = 0; i < k_in.size(); ++i) {
      k_bf16[i] = quant::bf16_from_f32(k_in[i]), v_bf16[i] = quant::bf16_from_f32(v_in[i]);
      ASSERT_EQ(quant::f32_from_bf16(k_bf16[i]), k_in[i]) << "bf16 input rows must be bf16 values";
      ASSERT_EQ(quant::f32_from_bf16(v_bf16[i]), v_in[i]) << "bf16 input rows must be bf16 values";
    }
  }

  // Expected pool: poisoned, then every written head vector quantized by the CPU reference.
  const int64_t pool_bytes = pt.num_pages * layout.page_bytes();
  std::vector<uint8_t> expected(pool_bytes, kPoison);
  for (int64_t t = 0; t < num_tokens; ++t) {
    if (row_sequence[t] < 0) continue;
    const int64_t page = pt.table[row_sequence[t] * pt.max_pages + positions[t] / c.page_size];
    const int64_t slot = positions[t] % c.page_size;
    for (int64_t h = 0; h < kv_heads; ++h) {
      for (int part = 0; part < 2; ++part) {
        const cache::KvPartLayout& L = part == 0 ? layout.k(layer) : layout.v(layer);
        const std::vector<float>& src = part == 0 ? k_in : v_in;
        std::vector<float> x(src.begin() + (t * kv_heads + h) * c.head_dim,
                             src.begin() + (t * kv_heads + h + 1) * c.head_dim);
        if (c.rotation == Rotation::kHadamard) quant::hadamard_inplace(x.data(), c.head_dim);
        uint8_t* base = expected.data() + page * layout.page_bytes();
        const float g = part == 0 ? g_k : g_v;
        if (L.format == quant::ElemFormat::kNVFP4 && c.rule == Nvfp4ScaleRule::kFourOverSix) {
          uint8_t* codes = base + L.data_at(h, slot);    // [head_dim / 2]
          uint8_t* scales = base + L.scales_at(h, slot);  // [head_dim / 16]
          for (int b = 0; b < c.head_dim / quant::kNvfp4Block; ++b) {
            const float* block = x.data() + b * quant::kNvfp4Block;
            scales[b] = quant::nvfp4_quantize_block_4over6(block, g, codes + b * quant::kNvfp4BlockBytes);
            if (four_picks && scales[b] != quant::nvfp4_block_scale(block, g)) ++*four_picks;
          }
          continue;
        }
        quant::quantize_head_vector(L.format, x.data(), c.head_dim, g, base + L.data_at(h, slot),
                                    base + L.scales_at(h, slot));
      }
    }
  }

  DeviceBuffer pool(pool_bytes);
  pool.fill(kPoison);
  const DeviceBuffer d_k = c.input == ActivationDtype::kBF16 ? DeviceBuffer::from(k_bf16) : DeviceBuffer::from(k_in);
  const DeviceBuffer d_v = c.input == ActivationDtype::kBF16 ? DeviceBuffer::from(v_bf16) : DeviceBuffer::from(v_in);
  const DeviceBuffer d_pos = DeviceBuffer::from(positions), d_seq = DeviceBuffer::from(row_sequence);
  const DeviceBuffer d_pt = DeviceBuffer::from(pt.table);
  kv_write({.k = d_k.as<void>(),
            .v = d_v.as<void>(),
            .input_dtype = c.input,
            .positions = d_pos.as<int32_t>(),
            .row_sequence = d_seq.as<int32_t>(),
            .page_tables = d_pt.as<int32_t>(),
            .pool = pool.as<uint8_t>(),
            .num_tokens = num_tokens,
            .max_pages_per_seq = pt.max_pages,
            .page_bytes = layout.page_bytes(),
            .k_layout = layout.k(layer),
            .v_layout = layout.v(layer),
            .k_global_scale = g_k,
            .v_global_scale = g_v,
            .rotation = c.rotation,
            .nvfp4_scale_rule = c.rule},
           nullptr);
  NIBBLE_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<uint8_t> actual = pool.to_host<uint8_t>();
  ASSERT_EQ(actual.size(), expected.size());
  int64_t mismatches = 0, first = -1;
  for (int64_t i = 0; i < pool_bytes; ++i) {
    if (actual[i] != expected[i]) {
      if (first < 0) first = i;
      ++mismatches;
    }
  }
  EXPECT_EQ(mismatches, 0) << "first differing byte " << first << " (page " << first / layout.page_bytes()
                           << ", offset " << first % layout.page_bytes() << "): expected "
                           << int(first >= 0 ? expected[first] : 0) << " got " << int(first >= 0 ? actual[first] : 0);
}

class CudaKvWrite : public testing::TestWithParam<WriteCase> {};

TEST_P(CudaKvWrite, MatchesCpuQuantizationByteForByte) {
  NIBBLE_SKIP_WITHOUT_GPU();
  const WriteCase c = GetParam();
  std::mt19937 rng(1234 + c.head_dim + c.page_size);
  const int64_t kv_heads = 3;
  // Page 16: scales that need the true division; page 64: powers of two (g = 1 is the default),
  // which the kernel multiplies by 1/g instead (exact) — both paths are compared byte for byte.
  // 4 over 6 (nvfp4 and k8v4 only): g = 0.37 (a calibrated-looking scale) or 1 on both parts, so
  // k8v4's nvfp4 V sees both too.
  const bool four_over_six = c.rule == Nvfp4ScaleRule::kFourOverSix;
  const float g_k = c.page_size == 16 ? 0.37f : 1.0f;
  const float g_v = four_over_six ? g_k : c.page_size == 16 ? 1.7f : 0.25f;

  // Three sequences; the new rows are scattered positions (decode-like and prefill-like runs), one
  // padding row (sequence -1) that must not be written.
  const std::vector<int32_t> seq_lens = {5, 2 * c.page_size + 9, 70};
  const auto pt = test::make_page_tables(seq_lens, c.page_size, rng);
  std::vector<int32_t> positions, row_sequence;
  for (int32_t pos : {4}) positions.push_back(pos), row_sequence.push_back(0);
  for (int32_t pos = c.page_size - 3; pos < 2 * c.page_size + 9; ++pos) positions.push_back(pos), row_sequence.push_back(1);
  positions.push_back(0), row_sequence.push_back(-1);
  for (int32_t pos : {69, 0, 31}) positions.push_back(pos), row_sequence.push_back(2);
  const int64_t num_tokens = static_cast<int64_t>(positions.size());

  const bool with_inf = c.rotation == Rotation::kNone;
  WriteInputs in{.positions = positions, .row_sequence = row_sequence, .pt = pt};
  in.k = make_inputs(num_tokens * kv_heads, c.head_dim, with_inf, rng);
  in.v = make_inputs(num_tokens * kv_heads, c.head_dim, with_inf, rng);
  // bf16 input: the device gets bf16 bits, the reference their exact f32 values.
  if (c.input == ActivationDtype::kBF16) {
    for (float& x : in.k) x = quant::f32_from_bf16(quant::bf16_from_f32(x));
    for (float& x : in.v) x = quant::f32_from_bf16(quant::bf16_from_f32(x));
  }
  int64_t four_picks = 0;
  expect_pool_matches_cpu(c, in, kv_heads, g_k, g_v, &four_picks);
  // The data exercise both outcomes of the rule: some blocks keep amax/4 (and most amax/6).
  if (four_over_six) EXPECT_GT(four_picks, 0) << "no block took the amax/4 candidate";
}

std::vector<WriteCase> all_cases() {
  std::vector<WriteCase> cases;
  for (KvDtype dtype : {KvDtype::kF32, KvDtype::kBF16, KvDtype::kFP8, KvDtype::kNVFP4, KvDtype::kK8V4})
    for (int head_dim : {64, 128, 256})
      for (Rotation rotation : {Rotation::kNone, Rotation::kHadamard})
        for (int page_size : {16, 64})
          for (ActivationDtype input : {ActivationDtype::kF32, ActivationDtype::kBF16})
            cases.push_back({dtype, head_dim, rotation, page_size, input});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Sweep, CudaKvWrite, testing::ValuesIn(all_cases()), case_name);

// The 4-over-6 rule where it changes bytes: the nvfp4 parts (nvfp4; k8v4's V).
std::vector<WriteCase> four_over_six_cases() {
  std::vector<WriteCase> cases;
  for (WriteCase c : all_cases()) {
    if (c.dtype != KvDtype::kNVFP4 && c.dtype != KvDtype::kK8V4) continue;
    c.rule = Nvfp4ScaleRule::kFourOverSix;
    cases.push_back(c);
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(FourOverSix, CudaKvWrite, testing::ValuesIn(four_over_six_cases()), case_name);

// nvfp4 quotients at and around every E2M1 decision point, for every E4M3 block scale: the kernel
// codes x / (s·g) by a reciprocal (quant/e2m1_reciprocal.h), exact only by proof (g a power of two)
// or by its near-threshold check (other g). Each 16-element block holds 6·s·g (so its scale is s)
// and 15 elements T·s·g stepped by a few ulps (T = 0.25 ... 5, both signs); bf16 inputs round
// those to bf16, which makes exact ties T·s·g common. g = 2^±51 are the ends of the nvfp4 g range
// kv_write admits (s·g then reaches 2^-60 and ~2^59.8, the ends of the rule's range).
std::vector<float> decision_point_rows(int64_t vectors, int head_dim, float g, int salt) {
  constexpr float kThresholds[] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
  std::vector<float> x(vectors * head_dim);
  int64_t counter = salt;
  for (int64_t b = 0; b < vectors * head_dim / 16; ++b) {
    const float s = quant::f32_from_e4m3(static_cast<uint8_t>(1 + (b + salt) % 126));
    const float d = s * g;
    float* block = x.data() + b * 16;
    block[(b + salt) % 16] = (b % 2 ? -6.0f : 6.0f) * d;
    for (int i = 0; i < 16; ++i) {
      if (i == (b + salt) % 16) continue;
      const float t = kThresholds[counter % 7];
      const int ulps = static_cast<int>((counter / 7) % 7) - 3;
      const float center = t * d;
      float value = quant::f32_from_bits(static_cast<uint32_t>(static_cast<int64_t>(quant::f32_bits(center)) + ulps));
      block[i] = counter % 3 == 0 ? -value : value;
      ++counter;
    }
  }
  return x;
}

TEST(CudaKvWriteNvfp4, CodesAtEveryDecisionPointForEveryScaleMatchCpu) {
  NIBBLE_SKIP_WITHOUT_GPU();
  const int64_t kv_heads = 2, num_tokens = 96;  // 96 × 2 × 8 blocks per part at head_dim 128
  for (KvDtype dtype : {KvDtype::kNVFP4, KvDtype::kK8V4}) {
    for (ActivationDtype input : {ActivationDtype::kF32, ActivationDtype::kBF16}) {
      for (float g : {1.0f, 0.125f, 0.37f, 1.7f, 0x1p-51f, 0x1p51f, 0.3000001f}) {
        SCOPED_TRACE(std::string(quant::kv_dtype_name(dtype)) + (input == ActivationDtype::kBF16 ? " bf16" : " f32") +
                     " g " + std::to_string(g));
        const WriteCase c{dtype, 128, Rotation::kNone, 16, input};
        std::mt19937 rng(77);
        WriteInputs in;
        in.pt = test::make_page_tables({static_cast<int32_t>(num_tokens)}, c.page_size, rng);
        for (int32_t pos = 0; pos < num_tokens; ++pos) in.positions.push_back(pos), in.row_sequence.push_back(0);
        in.k = decision_point_rows(num_tokens * kv_heads, c.head_dim, g, 0);
        in.v = decision_point_rows(num_tokens * kv_heads, c.head_dim, g, 5);
        if (input == ActivationDtype::kBF16) {
          for (float& x : in.k) x = quant::f32_from_bf16(quant::bf16_from_f32(x));
          for (float& x : in.v) x = quant::f32_from_bf16(quant::bf16_from_f32(x));
        }
        expect_pool_matches_cpu(c, in, kv_heads, g, g);
      }
    }
  }
}

// Blocks at the edges of the 4-over-6 rule, for global scale g (16 floats each): all zero; amax/6
// rounds to a zero scale but amax/4 does not; ties with zero error on both grids; a +NaN (a
// positive NaN keeps its sign on both sides, so even the NaN scale byte is exact); ±Inf (both
// errors Inf: amax/6 kept); errors that overflow to Inf from finite values; amax/4 saturating the
// E4M3 scale while amax/6 does not.
std::vector<float> four_over_six_edge_blocks(float g, std::mt19937& rng) {
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  std::vector<float> out;
  auto block = [&](float amax, float rest) {  // element 0 = amax, the others random in ±rest
    out.push_back(amax);
    for (int i = 1; i < quant::kNvfp4Block; ++i) out.push_back(unit(rng) * rest);
  };
  for (int i = 0; i < quant::kNvfp4Block; ++i) out.push_back(0.0f);
  block(5.0f * 0x1p-10f * g, 4.0f * 0x1p-10f * g);  // s6 = e4m3(0.83·2^-10) = 0, s4 = 2^-9
  block(-5.5f * 0x1p-10f * g, 0x1p-10f * g);
  // On the E2M1 grids of s = u and of 1.5·u (u = 1, 1/16): at g = 1, err4 = err6 = 0, a tie.
  for (float u : {1.0f, 0.0625f, 3.5f}) {
    for (float v : {6.0f, 3.0f, -1.5f, 0.0f, 1.5f, -3.0f, 6.0f, -6.0f, 0.0f, 3.0f, 1.5f, 0.0f, -1.5f, 3.0f, 0.0f, 6.0f})
      out.push_back(v * u * g);
  }
  block(2.0f * g, 2.0f * g), out[out.size() - 7] = std::numeric_limits<float>::quiet_NaN();
  block(std::numeric_limits<float>::infinity(), 3.0f * g);
  block(1.0f * g, 1.0f * g), out[out.size() - 3] = -std::numeric_limits<float>::infinity();
  block(3e37f, 3e37f);  // scale saturates at 448·g; (q·s·g − x)² overflows to Inf in both candidates
  block(2400.0f * g, 2400.0f * g);  // amax/4 = 600·g saturates to 448·g, amax/6 = 400·g does not
  block(-2000.0f * g, 100.0f * g);
  return out;
}

// The crafted near-tie blocks really are near ties, with both outcomes: checked on the host (no GPU
// needed), so the GPU test below cannot pass vacuously.
TEST(CudaKvWriteNvfp4, NearTieBlocksAreTiesOrWithinTwoUlps) {
  for (float g : {1.0f, 0.37f}) {
    SCOPED_TRACE("g " + std::to_string(g));
    std::vector<float> blocks;
    nvfp4_ties::append_near_tie_blocks(g, 256, 11, blocks);
    ASSERT_EQ(blocks.size(), 256u * quant::kNvfp4Block);
    int64_t ties = 0, one_ulp = 0, four = 0;
    for (size_t b = 0; b < blocks.size() / quant::kNvfp4Block; ++b) {
      const nvfp4_ties::Nvfp4CandidateErrors e =
          nvfp4_ties::nvfp4_candidate_errors(blocks.data() + b * quant::kNvfp4Block, g);
      const int64_t ulps = nvfp4_ties::nvfp4_error_ulps(e);
      ASSERT_LE(ulps, 2);
      EXPECT_GT(e.err6, 0.0f);
      ties += ulps == 0, one_ulp += ulps == 1, four += e.err4 < e.err6;
    }
    EXPECT_GE(ties, 20) << "exact ties (the rule keeps amax/6)";
    EXPECT_GE(one_ulp, 20) << "1-ulp differences";
    EXPECT_GE(four, 20) << "blocks that keep amax/4";
    EXPECT_GE(static_cast<int64_t>(blocks.size() / quant::kNvfp4Block) - four, 100) << "blocks that keep amax/6";
  }
}

// 4 over 6 on the near-tie and edge blocks above, for nvfp4 and k8v4's V: an error sum rounded
// differently from the CPU's (e.g. one contracted FMA) flips the choice on some near-tie blocks.
TEST(CudaKvWriteNvfp4, FourOverSixNearTiesAndEdgeBlocksMatchCpu) {
  NIBBLE_SKIP_WITHOUT_GPU();
  const int64_t kv_heads = 2;
  const int head_dim = 128;
  const int64_t blocks_per_token = kv_heads * head_dim / quant::kNvfp4Block;
  for (KvDtype dtype : {KvDtype::kNVFP4, KvDtype::kK8V4}) {
    for (float g : {1.0f, 0.37f, 1.7f, 0.125f, 0x1p-51f, 0x1p51f}) {
      SCOPED_TRACE(std::string(quant::kv_dtype_name(dtype)) + " g " + std::to_string(g));
      std::mt19937 rng(5);
      std::vector<float> blocks;
      const bool ordinary_g = g == 1.0f || g == 0.37f || g == 1.7f || g == 0.125f;
      if (ordinary_g) nvfp4_ties::append_near_tie_blocks(g, 384, 23, blocks);
      const std::vector<float> edges = four_over_six_edge_blocks(g, rng);
      blocks.insert(blocks.end(), edges.begin(), edges.end());
      // Pad to whole tokens with gaussian blocks, then V = the same blocks in reverse block order.
      std::normal_distribution<float> normal(0.0f, 1.0f);
      while (static_cast<int64_t>(blocks.size() / quant::kNvfp4Block) % blocks_per_token != 0) {
        blocks.push_back(normal(rng) * g);
      }
      const int64_t num_tokens = static_cast<int64_t>(blocks.size()) / (kv_heads * head_dim);
      WriteInputs in;
      in.k = blocks;
      in.v.reserve(blocks.size());
      for (int64_t b = static_cast<int64_t>(blocks.size()) / quant::kNvfp4Block - 1; b >= 0; --b)
        in.v.insert(in.v.end(), blocks.begin() + b * quant::kNvfp4Block, blocks.begin() + (b + 1) * quant::kNvfp4Block);
      const int page_size = 16;
      in.pt = test::make_page_tables({static_cast<int32_t>(num_tokens + 5)}, page_size, rng);
      for (int32_t t = 0; t < num_tokens; ++t) in.positions.push_back(t + 5), in.row_sequence.push_back(0);
      const WriteCase c{dtype, head_dim, Rotation::kNone, page_size, ActivationDtype::kF32,
                        Nvfp4ScaleRule::kFourOverSix};
      int64_t four_picks = 0;
      expect_pool_matches_cpu(c, in, kv_heads, g, g, &four_picks);
      if (ordinary_g) EXPECT_GT(four_picks, 0);
    }
  }
}

// kv_write(p) throws nibble::Error whose message contains `message`.
void expect_rejected(const KvWriteParams& p, const std::string& message) {
  try {
    kv_write(p, nullptr);
    ADD_FAILURE() << "accepted; expected the error \"" << message << "\"";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
  }
}

// Validation happens before any CUDA call, so these run without a GPU too.
TEST(CudaKvWriteErrors, RejectsUnsupportedHeadDimAndBadPointers) {
  const cache::PageLayout layout({.num_layers = 1, .kv_heads = 2, .head_dim = 96}, KvDtype::kBF16, 16);
  int32_t dummy = 0;
  uint8_t byte = 0;
  float f = 0;
  KvWriteParams p{.k = &f, .v = &f, .positions = &dummy, .row_sequence = &dummy, .page_tables = &dummy,
                  .pool = &byte, .num_tokens = 1, .max_pages_per_seq = 1, .page_bytes = layout.page_bytes(),
                  .k_layout = layout.k(0), .v_layout = layout.v(0)};
  expect_rejected(p, "head_dim must be 64, 128 or 256");
  const cache::PageLayout ok({.num_layers = 1, .kv_heads = 2, .head_dim = 64}, KvDtype::kBF16, 16);
  p.k_layout = ok.k(0), p.v_layout = ok.v(0), p.page_bytes = ok.page_bytes();
  p.pool = nullptr;
  EXPECT_THROW(kv_write(p, nullptr), Error);
  p.pool = &byte;
  p.k_global_scale = 0.0f;
  EXPECT_THROW(kv_write(p, nullptr), Error);
  p.k_global_scale = 1.0f;
  p.num_tokens = -1;
  EXPECT_THROW(kv_write(p, nullptr), Error);
  p.num_tokens = 1;
  // nvfp4 takes g in [2^-51, 2^51] only (the division-free E2M1 rule's range); fp8 any g > 0.
  const cache::PageLayout fp4({.num_layers = 1, .kv_heads = 2, .head_dim = 64}, KvDtype::kK8V4, 16);
  p.k_layout = fp4.k(0), p.v_layout = fp4.v(0), p.page_bytes = fp4.page_bytes();
  p.v_global_scale = 0x1p-52f;
  expect_rejected(p, "nvfp4 global scale of v must be in [2^-51, 2^51]");
  p.v_global_scale = 0x1p52f;
  EXPECT_THROW(kv_write(p, nullptr), Error);
  p.v_global_scale = 1.0f;
  // The kernel has an instance per KV dtype's (K, V) pair: k8v4's parts swapped are no such pair.
  p.k_layout = fp4.v(0), p.v_layout = fp4.k(0);
  expect_rejected(p, "K nvfp4 with V fp8 is not the pair of a KV dtype");
  p.k_layout = fp4.k(0), p.v_layout = fp4.v(0);
  p.nvfp4_scale_rule = static_cast<Nvfp4ScaleRule>(7);
  expect_rejected(p, "unknown nvfp4 scale rule 7");
}

}  // namespace
}  // namespace nibble::cuda
