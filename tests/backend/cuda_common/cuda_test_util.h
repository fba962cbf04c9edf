#pragma once
// Helpers shared by the CUDA kernel tests: a visible skip without a GPU, device buffers, a pool of
// pages filled on the host, and random page tables. Every buffer is plain bytes or f32 as noted.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <span>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/cuda_check.h"

namespace nibble::cuda::test {

// max|got - want| / (max|want| + 1e-3): a logit difference relative to the logits' scale; infinite if
// got has a non-finite value or the sizes differ (the whole-model CUDA-vs-CPU comparisons).
inline double logit_error(std::span<const float> got, std::span<const float> want) {
  if (got.size() != want.size()) return INFINITY;
  double err = 0, scale = 1e-3;
  for (size_t i = 0; i < want.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    err = std::max(err, std::fabs(static_cast<double>(got[i]) - want[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(want[i])));
  }
  return err / scale;
}

// Empty when a CUDA device is usable, else the reason (used in GTEST_SKIP messages).
inline std::string no_device_reason() {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) return std::string("no CUDA device: ") + cudaGetErrorString(status);
  if (count == 0) return "no CUDA device: cudaGetDeviceCount returned 0";
  return "";
}

#define NIBBLE_SKIP_WITHOUT_GPU()                                  \
  do {                                                             \
    const std::string reason_ = ::nibble::cuda::test::no_device_reason(); \
    if (!reason_.empty()) GTEST_SKIP() << reason_;                 \
  } while (0)

// A device allocation of `bytes` bytes, freed on destruction.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    if (bytes > 0) NIBBLE_CUDA_CHECK(cudaMalloc(&ptr_, bytes));
  }
  ~DeviceBuffer() {
    if (ptr_) cudaFree(ptr_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) { o.ptr_ = nullptr, o.bytes_ = 0; }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    std::swap(ptr_, o.ptr_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }

  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  size_t bytes() const { return bytes_; }

  template <typename T>
  static DeviceBuffer from(const std::vector<T>& host) {
    DeviceBuffer b(host.size() * sizeof(T));
    if (!host.empty()) NIBBLE_CUDA_CHECK(cudaMemcpy(b.ptr_, host.data(), b.bytes_, cudaMemcpyHostToDevice));
    return b;
  }
  template <typename T>
  std::vector<T> to_host() const {
    std::vector<T> host(bytes_ / sizeof(T));
    if (!host.empty()) NIBBLE_CUDA_CHECK(cudaMemcpy(host.data(), ptr_, host.size() * sizeof(T), cudaMemcpyDeviceToHost));
    return host;
  }
  void fill(uint8_t byte) {
    if (bytes_ > 0) NIBBLE_CUDA_CHECK(cudaMemset(ptr_, byte, bytes_));
  }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

inline int device_sm_count() {
  int device = 0, sms = 0;
  NIBBLE_CUDA_CHECK(cudaGetDevice(&device));
  NIBBLE_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  return sms;
}

// Page tables [num_seqs][max_pages] for sequences of the given lengths, every page a distinct
// page id drawn from a shuffled pool of `num_pages` (so neighbouring tokens live in scattered
// pages); unused entries -1.
struct PageTables {
  int64_t max_pages = 0;
  int64_t num_pages = 0;
  std::vector<int32_t> table;
};

inline PageTables make_page_tables(const std::vector<int32_t>& seq_lens, int64_t page_size, std::mt19937& rng) {
  PageTables pt;
  int64_t total = 0;
  for (int32_t len : seq_lens) {
    const int64_t pages = (len + page_size - 1) / page_size;
    pt.max_pages = std::max(pt.max_pages, pages);
    total += pages;
  }
  pt.num_pages = total + 3;  // a few pages no sequence uses
  std::vector<int32_t> ids(pt.num_pages);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  pt.table.assign(seq_lens.size() * pt.max_pages, -1);
  size_t next = 0;
  for (size_t s = 0; s < seq_lens.size(); ++s) {
    const int64_t pages = (seq_lens[s] + page_size - 1) / page_size;
    for (int64_t i = 0; i < pages; ++i) pt.table[s * pt.max_pages + i] = ids[next++];
  }
  return pt;
}

}  // namespace nibble::cuda::test
