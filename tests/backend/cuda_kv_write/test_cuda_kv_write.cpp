// The CUDA write path must store exactly the bytes the CPU reference (quant::quantize_head_vector,
// after quant::hadamard_inplace when rotating) produces, at exactly the slots the page tables name,
// and nothing else: both pools start poisoned with the same byte and are compared whole.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "backend/cuda/kv_write.h"
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

constexpr uint8_t kPoison = 0xA5;

struct WriteCase {
  KvDtype dtype;
  int head_dim;
  Rotation rotation;
  int page_size;
  ActivationDtype input;
};

std::string case_name(const testing::TestParamInfo<WriteCase>& info) {
  const WriteCase& c = info.param;
  return std::string(quant::kv_dtype_name(c.dtype)) + "_d" + std::to_string(c.head_dim) +
         (c.rotation == Rotation::kHadamard ? "_rot" : "_norot") + "_p" + std::to_string(c.page_size) +
         (c.input == ActivationDtype::kBF16 ? "_inbf16" : "_inf32");
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

class CudaKvWrite : public testing::TestWithParam<WriteCase> {};

TEST_P(CudaKvWrite, MatchesCpuQuantizationByteForByte) {
  NIBBLE_SKIP_WITHOUT_GPU();
  const WriteCase c = GetParam();
  std::mt19937 rng(1234 + c.head_dim + c.page_size);
  const int64_t kv_heads = 3;
  const int64_t layer = 1;  // write the second layer: exercises the per-layer part offsets
  const cache::PageLayout layout({.num_layers = 2, .kv_heads = kv_heads, .head_dim = c.head_dim}, c.dtype, c.page_size);
  // Page 16: scales that need the true division; page 64: powers of two (g = 1 is the default),
  // which the kernel multiplies by 1/g instead (exact) — both paths are compared byte for byte.
  const float g_k = c.page_size == 16 ? 0.37f : 1.0f, g_v = c.page_size == 16 ? 1.7f : 0.25f;

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
  const std::vector<float> k = make_inputs(num_tokens * kv_heads, c.head_dim, with_inf, rng);
  const std::vector<float> v = make_inputs(num_tokens * kv_heads, c.head_dim, with_inf, rng);
  // bf16 input: the device gets bf16 bits, the reference their exact f32 values.
  std::vector<uint16_t> k_bf16(k.size()), v_bf16(v.size());
  std::vector<float> k_in = k, v_in = v;
  if (c.input == ActivationDtype::kBF16) {
    for (size_t i = 0; i < k.size(); ++i) {
      k_bf16[i] = quant::bf16_from_f32(k[i]), k_in[i] = quant::f32_from_bf16(k_bf16[i]);
      v_bf16[i] = quant::bf16_from_f32(v[i]), v_in[i] = quant::f32_from_bf16(v_bf16[i]);
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
        quant::quantize_head_vector(L.format, x.data(), c.head_dim, part == 0 ? g_k : g_v, base + L.data_at(h, slot),
                                    base + L.scales_at(h, slot));
      }
    }
  }

  DeviceBuffer pool(pool_bytes);
  pool.fill(kPoison);
  const DeviceBuffer d_k = c.input == ActivationDtype::kBF16 ? DeviceBuffer::from(k_bf16) : DeviceBuffer::from(k);
  const DeviceBuffer d_v = c.input == ActivationDtype::kBF16 ? DeviceBuffer::from(v_bf16) : DeviceBuffer::from(v);
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
            .rotation = c.rotation},
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

// Validation happens before any CUDA call, so these run without a GPU too.
TEST(CudaKvWriteErrors, RejectsUnsupportedHeadDimAndBadPointers) {
  const cache::PageLayout layout({.num_layers = 1, .kv_heads = 2, .head_dim = 96}, KvDtype::kBF16, 16);
  int32_t dummy = 0;
  uint8_t byte = 0;
  float f = 0;
  KvWriteParams p{.k = &f, .v = &f, .positions = &dummy, .row_sequence = &dummy, .page_tables = &dummy,
                  .pool = &byte, .num_tokens = 1, .max_pages_per_seq = 1, .page_bytes = layout.page_bytes(),
                  .k_layout = layout.k(0), .v_layout = layout.v(0)};
  try {
    kv_write(p, nullptr);
    FAIL() << "head_dim 96 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("head_dim must be 64, 128 or 256"), std::string::npos) << e.what();
  }
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
}

}  // namespace
}  // namespace nibble::cuda
