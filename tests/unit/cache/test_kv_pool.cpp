// KvPool: addresses follow the page layout, storage is checked, and the pool's bookkeeping holds.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <memory>

#include "cache/kv_pool.h"
#include "common/error.h"

namespace nibble::cache {
namespace {

using quant::KvDtype;

// A storage that is just someone else's buffer, like device memory would be.
class BorrowedStorage final : public KvStorage {
 public:
  BorrowedStorage(uint8_t* data, int64_t bytes) : data_(data), bytes_(bytes) {}
  uint8_t* data() override { return data_; }
  const uint8_t* data() const override { return data_; }
  int64_t bytes() const override { return bytes_; }
  bool host_accessible() const override { return false; }

 private:
  uint8_t* data_;
  int64_t bytes_;
};

TEST(KvPool, HostStorageIsAlignedZeroedAndSized) {
  const PageLayout layout({.num_layers = 3, .kv_heads = 2, .head_dim = 64}, KvDtype::kNVFP4, 16);
  KvPool pool(layout, 7);
  EXPECT_EQ(pool.num_pages(), 7);
  EXPECT_EQ(pool.storage().bytes(), 7 * layout.page_bytes());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(pool.storage().data()) % 64, 0u);
  EXPECT_TRUE(pool.storage().host_accessible());
  for (int64_t i = 0; i < pool.storage().bytes(); ++i) ASSERT_EQ(pool.storage().data()[i], 0) << i;
  EXPECT_EQ(pool.global_scales().k, std::vector<float>(3, 1.0f));
  EXPECT_EQ(pool.global_scales().v, std::vector<float>(3, 1.0f));
  pool.check_integrity();
}

TEST(KvPool, AddressesFollowTheLayout) {
  const PageLayout layout({.num_layers = 2, .kv_heads = 3, .head_dim = 32}, KvDtype::kK8V4, 16);
  KvPool pool(layout, 5);
  uint8_t* base = pool.storage().data();
  const int64_t page_bytes = layout.page_bytes();
  for (PageId page = 0; page < 5; ++page) {
    EXPECT_EQ(pool.page_address(page), base + page * page_bytes);
    for (int64_t layer = 0; layer < 2; ++layer) {
      EXPECT_EQ(pool.part_address(page, layer, KvSide::kK), base + page * page_bytes + layout.k(layer).data_offset);
      EXPECT_EQ(pool.part_address(page, layer, KvSide::kV), base + page * page_bytes + layout.v(layer).data_offset);
      // k8v4: keys are fp8 (32 B per head vector, no scales), values nvfp4 (16 B + 2 B of scales).
      EXPECT_EQ(pool.part(layer, KvSide::kK).data_row_bytes, 32);
      EXPECT_EQ(pool.part(layer, KvSide::kV).data_row_bytes, 16);
      EXPECT_EQ(pool.part(layer, KvSide::kV).scale_row_bytes, 2);
      EXPECT_THROW(pool.scales_address(page, layer, KvSide::kK, 0, 0), nibble::Error);
      for (int64_t head = 0; head < 3; ++head) {
        for (int64_t slot = 0; slot < 16; ++slot) {
          const KvPartLayout& v = layout.v(layer);
          EXPECT_EQ(pool.data_address(page, layer, KvSide::kV, head, slot),
                    base + page * page_bytes + v.data_offset + (head * 16 + slot) * 16);
          EXPECT_EQ(pool.scales_address(page, layer, KvSide::kV, head, slot),
                    base + page * page_bytes + v.scale_offset + (head * 16 + slot) * 2);
        }
      }
    }
  }
  // The V scale section holds 3 heads × 16 slots × 2 B = 96 B, a multiple of 16 (no padding), so the
  // last scale of the last page ends exactly at the end of the storage.
  EXPECT_EQ(pool.scales_address(4, 1, KvSide::kV, 2, 15) + 2, base + 5 * page_bytes);
}

TEST(KvPool, OutOfRangeAccessThrows) {
  KvPool pool(PageLayout({.num_layers = 2, .kv_heads = 2, .head_dim = 16}, KvDtype::kNVFP4, 4), 3);
  EXPECT_THROW(pool.page_address(3), nibble::Error);
  EXPECT_THROW(pool.page_address(-1), nibble::Error);
  EXPECT_THROW(pool.part_address(0, 2, KvSide::kK), nibble::Error);
  EXPECT_THROW(pool.data_address(0, 0, KvSide::kK, 2, 0), nibble::Error);
  EXPECT_THROW(pool.data_address(0, 0, KvSide::kK, 0, 4), nibble::Error);
  EXPECT_NO_THROW(pool.data_address(2, 1, KvSide::kV, 1, 3));
}

TEST(KvPool, ExternalStorageMustBeLargeEnough) {
  const PageLayout layout({.num_layers = 1, .kv_heads = 1, .head_dim = 64}, KvDtype::kFP8, 16);
  alignas(64) static uint8_t buffer[8192];
  const int64_t need = 3 * layout.page_bytes();  // 3 pages × (K + V: 2 × 16 tokens × 64 B)
  ASSERT_LE(need, static_cast<int64_t>(sizeof buffer));
  EXPECT_THROW(KvPool(layout, 3, std::make_unique<BorrowedStorage>(buffer, need - 1)), nibble::Error);
  EXPECT_THROW(KvPool(layout, 3, std::make_unique<BorrowedStorage>(buffer + 8, need)), nibble::Error);
  KvPool pool(layout, 3, std::make_unique<BorrowedStorage>(buffer, need));
  EXPECT_EQ(pool.page_address(1), buffer + layout.page_bytes());
  EXPECT_FALSE(pool.storage().host_accessible());
}

TEST(KvPool, IntegrityCoversScalesAndAllocator) {
  KvPool pool(PageLayout({.num_layers = 2, .kv_heads = 1, .head_dim = 16}, KvDtype::kNVFP4, 16), 4);
  const auto ids = pool.allocator().allocate(3);
  ASSERT_TRUE(ids.has_value());
  pool.check_integrity();
  pool.global_scales().v[1] = 0.0f;
  EXPECT_THROW(pool.check_integrity(), nibble::Error);
  pool.global_scales().v[1] = std::nanf("");
  EXPECT_THROW(pool.check_integrity(), nibble::Error);
  pool.global_scales().v[1] = 0.25f;
  pool.check_integrity();
  pool.global_scales().k.pop_back();
  EXPECT_THROW(pool.check_integrity(), nibble::Error);
}

}  // namespace
}  // namespace nibble::cache
