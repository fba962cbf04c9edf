// The page layout against the contract in page_layout.h, recomputed here from the definitions of the
// formats (bits per element, one 1-byte E4M3 scale per 16 nvfp4 elements) rather than taken from the
// quant headers, and checked by painting every byte range a page hands out.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cache/kv_accounting.h"
#include "cache/page_layout.h"
#include "common/error.h"

namespace nibble::cache {
namespace {

using quant::ElemFormat;
using quant::KvDtype;

constexpr KvDtype kAllDtypes[] = {KvDtype::kF32, KvDtype::kBF16, KvDtype::kFP8, KvDtype::kNVFP4, KvDtype::kK8V4};

// The definition: element bits, and block-scale bytes per head vector.
int64_t element_bits(ElemFormat f) {
  switch (f) {
    case ElemFormat::kF32: return 32;
    case ElemFormat::kBF16: return 16;
    case ElemFormat::kFP8: return 8;
    case ElemFormat::kNVFP4: return 4;
  }
  return 0;
}
int64_t scale_bytes_per_vector(ElemFormat f, int64_t head_dim) { return f == ElemFormat::kNVFP4 ? head_dim / 16 : 0; }
ElemFormat k_format(KvDtype d) { return d == KvDtype::kF32 ? ElemFormat::kF32 : d == KvDtype::kBF16 ? ElemFormat::kBF16
                                        : d == KvDtype::kNVFP4 ? ElemFormat::kNVFP4 : ElemFormat::kFP8; }
ElemFormat v_format(KvDtype d) { return d == KvDtype::kK8V4 ? ElemFormat::kNVFP4 : k_format(d); }
int64_t round_up_16(int64_t n) { return (n + 15) / 16 * 16; }
bool uses_nvfp4(KvDtype d) { return d == KvDtype::kNVFP4 || d == KvDtype::kK8V4; }

struct Case {
  KvDtype dtype;
  int64_t head_dim;
  int64_t page_size;
  int64_t kv_heads;
  int64_t layers;
};

std::string describe(const Case& c) {
  return std::string(quant::kv_dtype_name(c.dtype)) + " d=" + std::to_string(c.head_dim) + " page=" +
         std::to_string(c.page_size) + " heads=" + std::to_string(c.kv_heads) + " layers=" + std::to_string(c.layers);
}

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  for (KvDtype dtype : kAllDtypes) {
    for (int64_t head_dim : {8, 16, 64, 128, 256}) {
      if (head_dim == 8 && uses_nvfp4(dtype)) continue;  // nvfp4 needs whole 16-element blocks
      for (int64_t page_size : {1, 16, 32, 64}) {
        for (int64_t kv_heads : {1, 3}) {  // 3: odd head counts must still pad correctly
          cases.push_back({dtype, head_dim, page_size, kv_heads, kv_heads == 1 ? 1 : 2});
        }
      }
    }
  }
  return cases;
}

// Marks [begin, begin + n) as owned by `owner`; fails on a byte outside the page or already owned.
void paint(std::vector<int>& page, int64_t begin, int64_t n, int owner, const std::string& what) {
  ASSERT_GE(begin, 0) << what;
  ASSERT_LE(begin + n, static_cast<int64_t>(page.size())) << what << " runs past the page";
  for (int64_t i = begin; i < begin + n; ++i) {
    ASSERT_EQ(page[i], -1) << what << ": byte " << i << " already belongs to range " << page[i];
    page[i] = owner;
  }
}

TEST(PageLayout, OffsetsSizesAndNoOverlapForEveryFormatAndShape) {
  for (const Case& c : all_cases()) {
    SCOPED_TRACE(describe(c));
    const PageLayout layout({.num_layers = c.layers, .kv_heads = c.kv_heads, .head_dim = c.head_dim}, c.dtype,
                            c.page_size);
    EXPECT_EQ(layout.page_size(), c.page_size);

    int64_t expected_offset = 0;
    int64_t exact_bytes = 0;  // unpadded bytes actually handed out
    std::vector<int> page(layout.page_bytes(), -1);
    int owner = 0;
    for (int64_t layer = 0; layer < c.layers; ++layer) {
      for (int side = 0; side < 2; ++side) {
        const KvPartLayout& part = side == 0 ? layout.k(layer) : layout.v(layer);
        const ElemFormat f = side == 0 ? k_format(c.dtype) : v_format(c.dtype);
        const int64_t row = c.head_dim * element_bits(f) / 8;
        const int64_t scale_row = scale_bytes_per_vector(f, c.head_dim);
        const int64_t rows = c.kv_heads * c.page_size;
        EXPECT_EQ(part.format, f);
        EXPECT_EQ(part.data_row_bytes, row);
        EXPECT_EQ(part.scale_row_bytes, scale_row);
        // Parts follow one another: [layer 0 K][layer 0 V][layer 1 K]...
        EXPECT_EQ(part.data_offset, expected_offset);
        EXPECT_EQ(part.scale_offset, part.data_offset + round_up_16(rows * row));
        EXPECT_EQ(part.bytes, round_up_16(rows * row) + round_up_16(rows * scale_row));
        EXPECT_EQ(part.data_offset % 16, 0);
        EXPECT_EQ(part.scale_offset % 16, 0);
        expected_offset += part.bytes;

        for (int64_t head = 0; head < c.kv_heads; ++head) {
          // HND: one head's token slots are one contiguous run.
          EXPECT_EQ(part.data_at(head, 0), part.data_offset + head * c.page_size * row);
          for (int64_t slot = 0; slot < c.page_size; ++slot) {
            paint(page, part.data_at(head, slot), row, owner++, "data");
            exact_bytes += row;
            if (scale_row > 0) {
              EXPECT_EQ(part.scales_at(head, slot), part.scale_offset + (head * c.page_size + slot) * scale_row);
              paint(page, part.scales_at(head, slot), scale_row, owner++, "scales");
              exact_bytes += scale_row;
            }
          }
        }
        if (HasFatalFailure()) return;
      }
    }
    EXPECT_EQ(layout.page_bytes(), expected_offset);
    EXPECT_EQ(layout.page_bytes() % 16, 0);
    // Everything handed out is exactly the per-token figure times the page's tokens...
    EXPECT_EQ(exact_bytes, layout.bytes_per_token() * c.page_size);
    // ...and padding is less than 16 bytes per section (two sections per part at most).
    EXPECT_LT(layout.page_bytes() - exact_bytes, 2 * 2 * c.layers * 16);
  }
}

TEST(PageLayout, BytesPerTokenFromTheDefinition) {
  for (const Case& c : all_cases()) {
    SCOPED_TRACE(describe(c));
    const PageLayout layout({.num_layers = c.layers, .kv_heads = c.kv_heads, .head_dim = c.head_dim}, c.dtype,
                            c.page_size);
    const auto vector_bytes = [&](ElemFormat f) {
      return c.head_dim * element_bits(f) / 8 + scale_bytes_per_vector(f, c.head_dim);
    };
    const int64_t expected = c.kv_heads * (vector_bytes(k_format(c.dtype)) + vector_bytes(v_format(c.dtype)));
    EXPECT_EQ(layout.bytes_per_token_per_layer(), expected);
    EXPECT_EQ(kv_bytes_per_token_per_layer(c.dtype, c.kv_heads, c.head_dim), expected);
    EXPECT_EQ(layout.bytes_per_token(), expected * c.layers);
  }
}

TEST(PageLayout, Nvfp4IsNineSixteenthsOfFp8) {
  for (int64_t head_dim : {16, 32, 64, 128, 256, 512}) {
    for (int64_t kv_heads : {1, 2, 4, 8}) {
      const int64_t fp8 = kv_bytes_per_token_per_layer(KvDtype::kFP8, kv_heads, head_dim);
      const int64_t nvfp4 = kv_bytes_per_token_per_layer(KvDtype::kNVFP4, kv_heads, head_dim);
      EXPECT_EQ(nvfp4 * 16, fp8 * 9) << head_dim << " " << kv_heads;
      EXPECT_DOUBLE_EQ(static_cast<double>(nvfp4) / static_cast<double>(fp8), 0.5625);
    }
  }
}

TEST(PageLayout, SeedWorkedExample) {
  // Qwen3.8-27B: 16 full-attention layers × 4 KV heads × head_dim 256, K and V = 32,768 elements.
  const KvGeometry g{.num_layers = 16, .kv_heads = 4, .head_dim = 256};
  EXPECT_EQ(PageLayout(g, KvDtype::kFP8, 64).bytes_per_token(), 32768);   // 32.00 KiB
  EXPECT_EQ(PageLayout(g, KvDtype::kNVFP4, 64).bytes_per_token(), 18432);  // 18.00 KiB
  EXPECT_EQ(PageLayout(g, KvDtype::kBF16, 64).bytes_per_token(), 65536);
  EXPECT_EQ(PageLayout(g, KvDtype::kF32, 64).bytes_per_token(), 131072);
  EXPECT_EQ(PageLayout(g, KvDtype::kK8V4, 64).bytes_per_token(), 16 * 4 * (256 + 128 + 16));  // 25,600
  // No padding at this shape: a 64-token page is exactly 64 tokens' worth.
  EXPECT_EQ(PageLayout(g, KvDtype::kNVFP4, 64).page_bytes(), 64 * 18432);
  EXPECT_EQ(PageLayout(g, KvDtype::kFP8, 64).page_bytes(), 64 * 32768);
}

TEST(PageLayout, PaddingWhenScaleSectionIsNotWhole) {
  // nvfp4, head_dim 16, 1 head, page 1: data 8 B -> 16, scales 1 B -> 16; a part is 32 bytes.
  const PageLayout layout({.num_layers = 1, .kv_heads = 1, .head_dim = 16}, KvDtype::kNVFP4, 1);
  EXPECT_EQ(layout.k(0).bytes, 32);
  EXPECT_EQ(layout.v(0).data_offset, 32);
  EXPECT_EQ(layout.v(0).scale_offset, 48);
  EXPECT_EQ(layout.page_bytes(), 64);
  EXPECT_EQ(layout.bytes_per_token(), 18);
}

TEST(PageLayout, RejectsBadGeometry) {
  EXPECT_THROW(PageLayout({.num_layers = 1, .kv_heads = 1, .head_dim = 8}, KvDtype::kNVFP4, 16), nibble::Error);
  EXPECT_THROW(PageLayout({.num_layers = 1, .kv_heads = 1, .head_dim = 24}, KvDtype::kK8V4, 16), nibble::Error);
  EXPECT_THROW(PageLayout({.num_layers = 1, .kv_heads = 1, .head_dim = 0}, KvDtype::kFP8, 16), nibble::Error);
  EXPECT_THROW(PageLayout({.num_layers = 0, .kv_heads = 1, .head_dim = 64}, KvDtype::kFP8, 16), nibble::Error);
  EXPECT_THROW(PageLayout({.num_layers = 1, .kv_heads = 0, .head_dim = 64}, KvDtype::kFP8, 16), nibble::Error);
  EXPECT_THROW(PageLayout({.num_layers = 1, .kv_heads = 1, .head_dim = 64}, KvDtype::kFP8, 0), nibble::Error);
  EXPECT_NO_THROW(PageLayout({.num_layers = 1, .kv_heads = 1, .head_dim = 24}, KvDtype::kFP8, 16));
}

TEST(KvAccounting, CapacityFromBudget) {
  const PageLayout layout({.num_layers = 16, .kv_heads = 4, .head_dim = 256}, KvDtype::kNVFP4, 64);
  const int64_t page = 64 * 18432;
  EXPECT_EQ(kv_capacity(layout, 0).pages, 0);
  EXPECT_EQ(kv_capacity(layout, page - 1).pages, 0);
  EXPECT_EQ(kv_capacity(layout, page).pages, 1);
  const KvCapacity c = kv_capacity(layout, 10 * page + page / 2);
  EXPECT_EQ(c.pages, 10);
  EXPECT_EQ(c.tokens, 640);
  EXPECT_THROW(kv_capacity(layout, -1), nibble::Error);
}

}  // namespace
}  // namespace nibble::cache
