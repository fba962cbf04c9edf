#pragma once
// The small kernels of the CUDA forward pass: conversion, embedding, RMSNorm, RoPE, SwiGLU, residual
// add, bias add, row gather/scatter. One host entry per op; each validates its sizes (elementwise.cpp,
// nibble::Error naming expected vs actual) and launches on `stream` (elementwise.cu). No entry
// allocates or synchronizes, so every one is safe inside CUDA-graph capture.
//
// Every pointer is device memory; activations are row-major float32 [rows, cols], the embedding
// table bf16 (quant/bf16.h bits, uint16_t) or float32 (table_dtype).
#include <cuda_runtime.h>

#include <cstdint>

namespace nibble::cuda {

// Element type of a weight table in device memory: bf16 bits (uint16_t) or float32.
enum class WeightDtype : uint8_t { kBF16, kF32 };

// out [n] bf16 = round-to-nearest-even(x [n] f32), quant::bf16_from_f32 bit for bit.
struct ConvertBf16Params {
  const float* x = nullptr;  // [n]
  uint16_t* out = nullptr;   // [n]
  int64_t n = 0;
};
void convert_f32_to_bf16(const ConvertBf16Params& p, cudaStream_t stream);

// out [rows, hidden] = f32(table [vocab, hidden])[token_ids[row]]. Ids must have been checked
// against vocab on the host (the step plan holds them there).
struct EmbeddingParams {
  const int32_t* token_ids = nullptr;  // [rows]
  const void* table = nullptr;         // [vocab, hidden] in table_dtype
  WeightDtype table_dtype = WeightDtype::kBF16;
  float* out = nullptr;                // [rows, hidden]
  int64_t rows = 0;
  int64_t vocab = 0;
  int64_t hidden = 0;
};
void embedding(const EmbeddingParams& p, cudaStream_t stream);

// Fed tokens (backend/step_plan.h, SequenceStep::fed_row): token_ids[t] = the id of sample row
// fed_rows[t] for every t with fed_rows[t] >= 0, read from the drawn ids at ids[row · id_stride]
// (the sampler's results on the device). Rows are not checked here: the caller has.
struct FedTokensParams {
  int32_t* token_ids = nullptr;       // [n]
  const int32_t* fed_rows = nullptr;  // [n]
  const int32_t* ids = nullptr;       // ids[r · id_stride] is row r's drawn id
  int64_t id_stride = 1;              // int32 elements between two rows' ids
  int64_t n = 0;
};
void resolve_fed_tokens(const FedTokensParams& p, cudaStream_t stream);

// out [rows, cols] = x / sqrt(mean(x²) + eps) * weight [cols], per row; out may alias x.
struct RmsNormParams {
  const float* x = nullptr;       // [rows, cols]
  const float* weight = nullptr;  // [cols]
  float* out = nullptr;           // [rows, cols]
  int64_t rows = 0;
  int64_t cols = 0;
  float eps = 0.0f;
};
void rms_norm(const RmsNormParams& p, cudaStream_t stream);

// Rotary embedding in place, Hugging Face rotate-half, angle = positions[row] · inv_freq[i] in f32.
struct RopeParams {
  float* q = nullptr;                  // [rows, q_heads * head_dim]
  float* k = nullptr;                  // [rows, k_heads * head_dim]
  const int32_t* positions = nullptr;  // [rows]
  const float* inv_freq = nullptr;     // [head_dim / 2]
  int64_t rows = 0;
  int64_t q_heads = 0;
  int64_t k_heads = 0;
  int64_t head_dim = 0;  // even
};
void rope(const RopeParams& p, cudaStream_t stream);

// out [n] = silu(gate) · up; out may alias gate or up.
struct SiluMulParams {
  const float* gate = nullptr;  // [n]
  const float* up = nullptr;    // [n]
  float* out = nullptr;         // [n]
  int64_t n = 0;
};
void silu_mul(const SiluMulParams& p, cudaStream_t stream);

// out [n] = a + b; out may alias a or b.
struct AddParams {
  const float* a = nullptr;  // [n]
  const float* b = nullptr;  // [n]
  float* out = nullptr;      // [n]
  int64_t n = 0;
};
void add(const AddParams& p, cudaStream_t stream);

// x [rows, cols] += bias [cols] per row.
struct BiasAddParams {
  float* x = nullptr;           // [rows, cols]
  const float* bias = nullptr;  // [cols]
  int64_t rows = 0;
  int64_t cols = 0;
};
void bias_add(const BiasAddParams& p, cudaStream_t stream);

// Gather: out [count, cols] row i = x row index[i]. Scatter: out row index[i] = x [count, cols] row i.
// x and out must not overlap.
struct RowCopyParams {
  const float* x = nullptr;
  float* out = nullptr;
  const int32_t* index = nullptr;  // [count] row ids, each < the indexed side's rows
  int64_t count = 0;
  int64_t cols = 0;
};
void gather_rows(const RowCopyParams& p, cudaStream_t stream);
void scatter_rows(const RowCopyParams& p, cudaStream_t stream);

}  // namespace nibble::cuda
