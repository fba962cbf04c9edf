#pragma once
// A step as the CUDA backend holds it after plan(): the host StepPlan plus its arrays in device
// memory, uploaded once (one allocation, one copy) and read by every layer's ops, and the decode
// split plan with its workspace, made by the step's first attention() call (the attention shape is
// not known to plan()) and reused by every later layer.
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/decode_plan.h"
#include "quant/kv_format.h"

namespace nibble::backend {

// Device memory allocated and freed in stream order (cudaMallocAsync / cudaFreeAsync): freeing it
// never waits for the device, and the memory is reused once the queued work that reads it is done.
class StreamBuffer {
 public:
  StreamBuffer() = default;
  StreamBuffer(int64_t bytes, cudaStream_t stream);
  ~StreamBuffer();
  StreamBuffer(StreamBuffer&& other) noexcept;
  StreamBuffer& operator=(StreamBuffer&& other) noexcept;
  StreamBuffer(const StreamBuffer&) = delete;
  StreamBuffer& operator=(const StreamBuffer&) = delete;

  void* data() const { return data_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  int64_t bytes() const { return bytes_; }

 private:
  void* data_ = nullptr;
  int64_t bytes_ = 0;
  cudaStream_t stream_ = nullptr;
};

// The decode sequences' split plan and workspace for one attention shape.
struct CudaDecodeState {
  int64_t num_q_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  quant::ElemFormat k_format = quant::ElemFormat::kF32;
  quant::ElemFormat v_format = quant::ElemFormat::kF32;
  cuda::DecodeSplitPlan plan;
  std::vector<int32_t> plan_host;  // plan.packed(), kept alive while its upload is queued
  StreamBuffer plan_device;        // int32 plan.packed()
  StreamBuffer partial_out;        // f32 [plan.num_work][num_q_heads][head_dim] (when split)
  StreamBuffer partial_lse;        // f32 [plan.num_work][num_q_heads]
  StreamBuffer q_rows;             // f32 [num_decode][num_q_heads * head_dim] (mixed steps only)
  StreamBuffer out_rows;           // f32 [num_decode][num_q_heads * head_dim] (mixed steps only)
};

class CudaPlannedStep final : public PlannedStep {
 public:
  CudaPlannedStep(const StepPlan& plan, cudaStream_t stream);

  // Device arrays, int32 (layouts as in backend/step_plan.h and prefill_attention.h).
  const int32_t* page_tables() const { return at(offsets_.page_tables); }      // [S][max_pages]
  const int32_t* token_ids() const { return at(offsets_.token_ids); }          // [T]
  const int32_t* positions() const { return at(offsets_.positions); }          // [T]
  const int32_t* row_sequence() const { return at(offsets_.row_sequence); }    // [T]
  const int32_t* logit_rows() const { return at(offsets_.logit_rows); }        // [L]
  const int32_t* seq_info() const { return at(offsets_.seq_info); }            // [S][kSeqInfoFields]
  const int32_t* chunk_work() const { return at(offsets_.chunk_work); }        // [num_chunk_work][2]
  const int32_t* decode_work() const { return at(offsets_.decode_work); }      // [num_decode][2]
  const int32_t* decode_rows() const { return at(offsets_.decode_rows); }      // [num_decode]
  // [num_decode][max_pages]: the decode sequences' page tables, in decode order.
  const int32_t* decode_page_tables() const { return at(offsets_.decode_page_tables); }

  int64_t num_chunk_work() const { return num_chunk_work_; }  // prefill / extend work items
  int64_t num_decode() const { return static_cast<int64_t>(decode_seq_lens_.size()); }
  // Every sequence decodes: the activation rows are the decode rows, in order.
  bool all_decode() const { return num_decode() == host().num_seqs(); }

  // The decode split plan for this shape: made (and its workspace allocated) on the first call of
  // the step, returned as is by later calls with the same shape; a different shape replaces it.
  CudaDecodeState& decode_state(int64_t num_q_heads, int64_t num_kv_heads, int64_t head_dim,
                                quant::ElemFormat k_format, quant::ElemFormat v_format, int num_sms) const;

 private:
  struct Offsets {
    int64_t page_tables = 0, token_ids = 0, positions = 0, row_sequence = 0, logit_rows = 0, seq_info = 0,
            chunk_work = 0, decode_work = 0, decode_rows = 0, decode_page_tables = 0;
  };
  const int32_t* at(int64_t offset) const { return device_.as<int32_t>() + offset; }

  cudaStream_t stream_;
  Offsets offsets_;
  int64_t num_chunk_work_ = 0;
  std::vector<int32_t> decode_seq_lens_;  // [num_decode] context_after of each decode sequence
  std::vector<int32_t> packed_;           // every array above, host copy kept while its upload is queued
  StreamBuffer device_;
  mutable std::unique_ptr<CudaDecodeState> decode_;
};

}  // namespace nibble::backend
