// Fuzz target: arbitrary bytes parsed as a whole safetensors file, from memory. Any input must
// either parse, with every tensor view inside the buffer, or throw nibble::Error — never crash,
// read out of bounds or allocate without bound. After a successful parse, every tensor's bytes are
// read (so AddressSanitizer sees an out-of-range view) and weight dtypes are converted to float32.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "common/error.h"
#include "model/safetensors.h"
#include "model/tensor_convert.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace nibble::model;
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  try {
    const SafetensorsFile file = SafetensorsFile::from_bytes(bytes, "fuzz");
    uint64_t checksum = 0;
    for (const TensorInfo& info : file.tensors()) {
      const TensorView view = file.get(info.name);
      for (uint64_t i = 0; i < view.byte_size(); ++i) checksum += static_cast<uint8_t>(view.data[i]);
      if (is_weight_dtype(view.dtype())) {
        std::vector<float> out(static_cast<size_t>(info.numel()));  // bounded by the input size
        convert_to_f32(view.dtype(), view.data, out);
      }
    }
    // Keep the reads from being optimized away.
    volatile uint64_t sink = checksum;
    (void)sink;
  } catch (const nibble::Error&) {
    // Rejected input: the expected outcome for most mutations.
  }
  return 0;
}
