#include "cache/kv_storage.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "common/error.h"

namespace nibble::cache {

void HostKvStorage::Free::operator()(uint8_t* p) const { std::free(p); }

HostKvStorage::HostKvStorage(int64_t bytes) : bytes_(bytes) {
  NIBBLE_CHECK(bytes >= 0, "KV storage size cannot be negative ({} bytes)", bytes);
  // aligned_alloc wants a size that is a multiple of the alignment, and a non-zero one.
  const int64_t rounded = std::max<int64_t>(kKvStorageAlignment,
                                            (bytes + kKvStorageAlignment - 1) / kKvStorageAlignment * kKvStorageAlignment);
  auto* p = static_cast<uint8_t*>(std::aligned_alloc(kKvStorageAlignment, static_cast<size_t>(rounded)));
  NIBBLE_CHECK(p != nullptr, "cannot allocate {} bytes of host memory for the KV pool", bytes);
  std::memset(p, 0, static_cast<size_t>(rounded));
  data_.reset(p);
}

}  // namespace nibble::cache
