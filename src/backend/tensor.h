#pragma once
// Views of memory that lives on a backend's device (host memory for the CPU backend). A view never
// owns its bytes; a Buffer does. Every view carries its shape so each op can check it.
#include <cstdint>
#include <memory>

namespace nibble::backend {

// A row-major float32 matrix view: data[rows][cols], contiguous, in the backend's memory.
// Activations are [tokens, features]; per-head views reshape the same bytes, e.g. q [tokens,
// heads * head_dim] is also [tokens * heads, head_dim].
struct Tensor {
  float* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;

  int64_t numel() const { return rows * cols; }
  float* row(int64_t r) const { return data + r * cols; }
  // The same bytes seen as [numel / cols_new, cols_new] (cols_new must divide numel).
  Tensor reshaped(int64_t cols_new) const { return {data, numel() / cols_new, cols_new}; }
  // Rows [first, first + count).
  Tensor rows_slice(int64_t first, int64_t count) const { return {data + first * cols, count, cols}; }
};

// A weight matrix W [out_features, in_features] (row-major, as Hugging Face stores nn.Linear),
// in the backend's memory and the backend's weight dtype (float32 on the CPU).
struct Matrix {
  const void* data = nullptr;
  int64_t out_features = 0;
  int64_t in_features = 0;
};

// A weight vector [size] (norm weights, biases) in the backend's memory, float32.
struct Vector {
  const float* data = nullptr;
  int64_t size = 0;
};

// Bytes owned by a backend (device memory for CUDA); freed when the Buffer is destroyed.
class Buffer {
 public:
  virtual ~Buffer() = default;
  virtual void* data() = 0;
  virtual int64_t bytes() const = 0;
  float* floats() { return static_cast<float*>(data()); }
};

}  // namespace nibble::backend
