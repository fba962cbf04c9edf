// Fuzz target for parse_npy: any input either parses into a consistent array or throws
// nibble::Error; anything else (a crash, a sanitizer report, another exception) is a finding.
// A parsed array must also survive serialize -> parse unchanged.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>

#include "common/error.h"
#include "common/npy.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  nibble::NpyArray array;
  try {
    array = nibble::parse_npy(std::span<const uint8_t>(data, size));
  } catch (const nibble::Error&) {
    return 0;  // rejected with a message: the expected outcome for most inputs
  }
  uint64_t numel = 1;
  for (int64_t d : array.shape) {
    if (d < 0) std::abort();
    numel *= static_cast<uint64_t>(d);
  }
  if (numel != array.data.size()) std::abort();
  const nibble::NpyArray again = nibble::parse_npy(nibble::serialize_npy(array.shape, array.data));
  if (again.shape != array.shape || again.data.size() != array.data.size()) std::abort();
  if (!array.data.empty() && std::memcmp(again.data.data(), array.data.data(), array.data.size() * sizeof(float)) != 0)
    std::abort();
  return 0;
}
