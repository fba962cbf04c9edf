#pragma once
// DeviceArena: ONE cudaMalloc'd block that a benchmark carves all of its buffers from, allocated
// before the first timed case and never freed between cases, so that every case of a sweep reads
// and writes the same device addresses. (Where a fresh cudaMalloc lands moves the time of the same
// bandwidth-bound kernel: on the H200 the fp8 decode kernel took 495 us or 567 us at one shape
// depending on which pool had been freed just before.)
//
// ArenaLayout collects, case by case, the bytes each numbered region needs; region i then starts at
// one fixed offset (the sum of the larger regions' maxima before it, each rounded up to 2 MiB) for
// every case, whatever that case's own sizes are:
//
//   arena: [region 0: max over cases of sizes[0]][region 1: max of sizes[1]] ... each 2 MiB aligned
//
// Region 0 starts at the arena base (cudaMalloc returns >= 2 MiB alignment for large blocks).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "common/error.h"

namespace nibble::bench {

class ArenaLayout {
 public:
  static constexpr int64_t kAlign = int64_t{2} << 20;

  explicit ArenaLayout(size_t num_regions) : max_bytes_(num_regions, 0) {}

  // Records one case: sizes[i] bytes in region i (sizes.size() == number of regions).
  void require(const std::vector<int64_t>& sizes) {
    NIBBLE_CHECK(sizes.size() == max_bytes_.size(), "ArenaLayout::require: {} sizes for {} regions",
                 sizes.size(), max_bytes_.size());
    for (size_t i = 0; i < sizes.size(); ++i) {
      NIBBLE_CHECK(sizes[i] >= 0, "ArenaLayout::require: negative size {} for region {}", sizes[i], i);
      max_bytes_[i] = std::max(max_bytes_[i], sizes[i]);
    }
  }
  int64_t region_bytes(size_t region) const { return max_bytes_.at(region); }
  int64_t offset(size_t region) const {
    NIBBLE_CHECK(region < max_bytes_.size(), "ArenaLayout: region {} of {}", region, max_bytes_.size());
    int64_t at = 0;
    for (size_t i = 0; i < region; ++i) at += round_up(max_bytes_[i]);
    return at;
  }
  int64_t total_bytes() const {
    return std::max<int64_t>(offset(max_bytes_.size() - 1) + round_up(max_bytes_.back()), kAlign);
  }

 private:
  static int64_t round_up(int64_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }
  std::vector<int64_t> max_bytes_;  // [num_regions] largest request seen per region
};

class DeviceArena {
 public:
  // Allocates layout.total_bytes(); fails with a message naming the sizes if the device lacks them.
  explicit DeviceArena(const ArenaLayout& layout) : layout_(layout), bytes_(layout.total_bytes()) {
    size_t free_bytes = 0, total = 0;
    NIBBLE_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total));
    NIBBLE_CHECK(static_cast<size_t>(bytes_) <= free_bytes,
                 "device arena of {} bytes ({:.2f} GiB) does not fit in the {:.2f} GiB free on the device", bytes_,
                 bytes_ / double(int64_t{1} << 30), free_bytes / double(int64_t{1} << 30));
    NIBBLE_CUDA_CHECK(cudaMalloc(&base_, static_cast<size_t>(bytes_)));
  }
  ~DeviceArena() { cudaFree(base_); }
  DeviceArena(const DeviceArena&) = delete;
  DeviceArena& operator=(const DeviceArena&) = delete;

  // Region `region`, checked to hold `bytes` (the case must have been passed to layout.require).
  template <typename T>
  T* at(size_t region, int64_t bytes) const {
    NIBBLE_CHECK(bytes <= layout_.region_bytes(region), "device arena: {} bytes requested in region {} of {} bytes",
                 bytes, region, layout_.region_bytes(region));
    return reinterpret_cast<T*>(static_cast<uint8_t*>(base_) + layout_.offset(region));
  }
  int64_t bytes() const { return bytes_; }

 private:
  ArenaLayout layout_;
  int64_t bytes_ = 0;
  void* base_ = nullptr;
};

}  // namespace nibble::bench
