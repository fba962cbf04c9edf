// runtime::measure_kv_amax on models/stories260k against an independent oracle — the K/V an f32
// cache actually stored, read back from the pool's bytes — with and without Hadamard; the
// 4-over-6 nvfp4 rule reaching the CPU cache write; calibrated global scales reaching the pool.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <unistd.h>

#include "cache/kv_scales_file.h"
#include "common/error.h"
#include "e2e/model_support/random_checkpoint.h"
#include "eval/corpus.h"
#include "runtime/calibrate.h"
#include "runtime/session.h"
#include "tokenizer/tokenizer.h"

namespace nibble::runtime {
namespace {

using quant::KvDtype;
using quant::Rotation;

const std::filesystem::path kModel = std::filesystem::path(NIBBLE_SOURCE_DIR) / "models" / "stories260k";

const char* kText =
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the park.\n\n"
    "One day, she saw a big red ball under a tree. She ran to the ball and kicked it very hard.\n\n"
    "The ball flew over the fence and into the garden of an old man. Lily was sad and scared.\n\n"
    "The old man came out with the ball and smiled. He gave it back to Lily and they became friends.\n\n"
    "Tom had a small dog called Max. Max liked to run and jump and bark at the birds in the sky.\n\n";

// Largest |element| per layer of K and V in an f32 pool: every page, head and slot (unused slots
// are zero, which cannot raise an amax). An f32 part stores the cache write's input verbatim.
KvAmax amax_in_pool(const cache::KvPool& pool) {
  const cache::PageLayout& layout = pool.layout();
  const int64_t layers = layout.geometry().num_layers;
  KvAmax out{.k = std::vector<float>(layers, 0.0f), .v = std::vector<float>(layers, 0.0f)};
  for (int64_t page = 0; page < pool.num_pages(); ++page) {
    const uint8_t* base = pool.storage().data() + page * layout.page_bytes();
    for (int64_t layer = 0; layer < layers; ++layer) {
      for (int side = 0; side < 2; ++side) {
        const cache::KvPartLayout& part = side == 0 ? layout.k(layer) : layout.v(layer);
        EXPECT_EQ(part.format, quant::ElemFormat::kF32);
        for (int64_t h = 0; h < part.kv_heads; ++h) {
          for (int64_t slot = 0; slot < part.page_size; ++slot) {
            std::vector<float> row(part.head_dim);  // [head_dim] float32
            std::memcpy(row.data(), base + part.data_at(h, slot), part.head_dim * sizeof(float));
            float& m = side == 0 ? out.k[layer] : out.v[layer];
            for (float x : row) m = std::max(m, std::fabs(x));
          }
        }
      }
    }
  }
  return out;
}

std::vector<std::vector<int32_t>> documents(int64_t context) {
  const Tokenizer tokenizer = Tokenizer::load(kModel);
  return eval::make_documents(tokenizer, kText, {.context = context, .max_documents = 3});
}

class CalibrateOnStories : public ::testing::TestWithParam<std::tuple<Rotation, int64_t>> {};

TEST_P(CalibrateOnStories, AmaxEqualsWhatAnF32CacheStored) {
  const auto [rotation, chunk] = GetParam();
  LoadedModel model = load_model({.dir = kModel, .num_threads = 2});
  const auto docs = documents(24);
  ASSERT_EQ(docs.size(), 3u);
  const KvAmax measured = measure_kv_amax(model, docs, {.rotation = rotation, .prefill_chunk = chunk});
  EXPECT_EQ(measured.tokens, 3 * 24);

  KvAmax oracle{.k = std::vector<float>(5, 0.0f), .v = std::vector<float>(5, 0.0f)};
  for (const auto& doc : docs) {
    Session s(model, {.kv_dtype = KvDtype::kF32, .rotation = rotation, .prefill_chunk = chunk, .max_context = 24});
    s.prefill(doc);
    const KvAmax one = amax_in_pool(s.kv_pool());
    for (int64_t l = 0; l < 5; ++l) {
      oracle.k[l] = std::max(oracle.k[l], one.k[l]);
      oracle.v[l] = std::max(oracle.v[l], one.v[l]);
    }
  }
  ASSERT_EQ(measured.k.size(), 5u);
  for (int64_t l = 0; l < 5; ++l) {
    EXPECT_GT(measured.k[l], 0.0f);
    EXPECT_EQ(measured.k[l], oracle.k[l]) << "layer " << l;
    EXPECT_EQ(measured.v[l], oracle.v[l]) << "layer " << l;
  }
  // The observer is removed afterwards: a later session runs without it.
  Session after(model, {.max_context = 24});
  after.prefill(docs[0]);
  EXPECT_EQ(measure_kv_amax(model, docs, {.rotation = rotation, .prefill_chunk = chunk}).k, measured.k);
}

INSTANTIATE_TEST_SUITE_P(RotationAndChunk, CalibrateOnStories,
                         ::testing::Combine(::testing::Values(Rotation::kNone, Rotation::kHadamard),
                                            ::testing::Values(int64_t{0}, int64_t{7})));

TEST(Calibrate, HadamardChangesTheAmaxOfK) {
  LoadedModel model = load_model({.dir = kModel, .num_threads = 2});
  const auto docs = documents(24);
  const KvAmax plain = measure_kv_amax(model, docs, {});
  const KvAmax rotated = measure_kv_amax(model, docs, {.rotation = Rotation::kHadamard});
  EXPECT_NE(plain.k, rotated.k);
}

TEST(Calibrate, RejectsNoDocumentsAndEmptyDocuments) {
  LoadedModel model = load_model({.dir = kModel, .num_threads = 2});
  EXPECT_THROW(measure_kv_amax(model, {}, {}), Error);
  const std::vector<std::vector<int32_t>> empty_doc(1);
  EXPECT_THROW(measure_kv_amax(model, empty_doc, {}), Error);
}

TEST(Calibrate, SessionTakesCalibratedScalesAndChecksTheirLayerCount) {
  LoadedModel model = load_model({.dir = kModel, .num_threads = 2});
  const KvAmax a = measure_kv_amax(model, documents(24), {});
  const cache::KvScalesFile file = cache::kv_scales_from_amax("stories260k", Rotation::kNone, a.k, a.v);
  const cache::KvGlobalScales g =
      cache::select_kv_global_scales(file, {.num_layers = 5, .dtype = KvDtype::kFP8}, "calibration");
  Session s(model, {.kv_dtype = KvDtype::kFP8, .max_context = 24, .global_scales = g});
  for (int64_t l = 0; l < 5; ++l) {
    EXPECT_EQ(s.kv_pool().global_scales().k[l], a.k[l] / 448.0f);
    EXPECT_EQ(s.kv_pool().global_scales().v[l], a.v[l] / 448.0f);
  }
  cache::KvGlobalScales short_scales = g;
  short_scales.k.pop_back();
  EXPECT_THROW(Session(model, {.kv_dtype = KvDtype::kFP8, .max_context = 24, .global_scales = short_scales}), Error);
}

// 4-over-6 reaches the CPU cache write: layer 0's K (independent of the cache format: it depends
// only on the embeddings) stored by an nvfp4 4-over-6 session equals the block rule applied to the
// K an f32 session stored, and differs from the plain rule somewhere.
TEST(Calibrate, FourOverSixReachesTheCpuCacheWrite) {
  const auto dir = std::filesystem::temp_directory_path() / ("nibble_calibrate_" + std::to_string(::getpid()));
  testing::write_random_checkpoint(dir, {.model_type = "llama", .max_positions = 64});
  LoadedModel model = load_model({.dir = dir, .num_threads = 2});
  std::vector<int32_t> tokens;
  for (int32_t i = 0; i < 32; ++i) tokens.push_back((i * 37 + 5) % 96);
  Session f32(model, {.kv_dtype = KvDtype::kF32, .max_context = 32});
  Session fos(model, {.kv_dtype = KvDtype::kNVFP4, .max_context = 32,
                      .nvfp4_scale_rule = quant::Nvfp4ScaleRule::kFourOverSix});
  f32.prefill(tokens);
  fos.prefill(tokens);
  const cache::KvPartLayout& src = f32.kv_pool().layout().k(0);
  const cache::KvPartLayout& dst = fos.kv_pool().layout().k(0);
  int differs_from_plain = 0, blocks = 0;
  for (int64_t page = 0; page < f32.kv_pool().num_pages(); ++page) {
    const uint8_t* a = f32.kv_pool().storage().data() + page * f32.kv_pool().layout().page_bytes();
    const uint8_t* b = fos.kv_pool().storage().data() + page * fos.kv_pool().layout().page_bytes();
    for (int64_t h = 0; h < src.kv_heads; ++h) {
      for (int64_t slot = 0; slot < src.page_size; ++slot) {
        std::vector<float> k(src.head_dim);  // [head_dim]
        std::memcpy(k.data(), a + src.data_at(h, slot), src.head_dim * sizeof(float));
        for (int64_t blk = 0; blk < src.head_dim / quant::kNvfp4Block; ++blk) {
          uint8_t want[quant::kNvfp4BlockBytes], plain[quant::kNvfp4BlockBytes];
          const uint8_t want_scale = quant::nvfp4_quantize_block_4over6(k.data() + blk * 16, 1.0f, want);
          const uint8_t plain_scale = quant::nvfp4_quantize_block(k.data() + blk * 16, 1.0f, plain);
          EXPECT_EQ(b[dst.scales_at(h, slot) + blk], want_scale);
          EXPECT_EQ(std::memcmp(b + dst.data_at(h, slot) + blk * 8, want, 8), 0);
          differs_from_plain += want_scale != plain_scale;
          ++blocks;
        }
      }
    }
  }
  EXPECT_EQ(blocks, 2 * 2 * 16 * 4);  // pages × kv heads × slots × blocks per head vector
  EXPECT_GT(differs_from_plain, 0);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace nibble::runtime
