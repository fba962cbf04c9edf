#pragma once
// Where the pool's bytes live. KvPool only needs a base pointer and a size; the host build uses
// HostKvStorage, a CUDA build supplies device memory behind the same interface.
#include <cstdint>
#include <memory>

namespace nibble::cache {

inline constexpr int64_t kKvStorageAlignment = 64;  // cache line; a multiple of kPageAlignment

class KvStorage {
 public:
  virtual ~KvStorage() = default;
  virtual uint8_t* data() = 0;  // aligned to kKvStorageAlignment
  virtual const uint8_t* data() const = 0;
  virtual int64_t bytes() const = 0;
  virtual bool host_accessible() const = 0;  // false for device memory: addresses only, no host reads
};

// Zero-filled host memory, 64-byte aligned. Throws nibble::Error if bytes < 0 or allocation fails.
class HostKvStorage final : public KvStorage {
 public:
  explicit HostKvStorage(int64_t bytes);
  uint8_t* data() override { return data_.get(); }
  const uint8_t* data() const override { return data_.get(); }
  int64_t bytes() const override { return bytes_; }
  bool host_accessible() const override { return true; }

 private:
  struct Free {
    void operator()(uint8_t* p) const;
  };
  std::unique_ptr<uint8_t, Free> data_;
  int64_t bytes_ = 0;
};

}  // namespace nibble::cache
