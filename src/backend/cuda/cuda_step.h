#pragma once
// A step as the CUDA backend holds it after plan(): the host StepPlan, its arrays packed for the
// device, and the decode split plan with its workspace. Both are made once per step in plan(), on
// the host, and read by every layer's ops: no op of the step allocates, plans or synchronizes, so a
// decode step's launches can be captured in a CUDA graph (cuda_graph.h).
//
// The device memory of a step (StepMemory) is either its own (eager steps: stream-ordered
// allocations freed with the step) or a graph entry's fixed buffers (graph steps: the same
// addresses every replay, rewritten before each replay).
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <optional>
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
  // Grows to at least `bytes` (contents not kept); a no-op when already large enough.
  void reserve(int64_t bytes, cudaStream_t stream);

 private:
  void* data_ = nullptr;
  int64_t bytes_ = 0;
  cudaStream_t stream_ = nullptr;
};

// The decode sequences' split plan (host) and its device copy and workspace, for one attention
// geometry.
struct CudaDecodeState {
  AttentionGeometry geometry;
  cuda::DecodeSplitPlan plan;
  std::vector<int32_t> plan_host;  // plan.packed(), kept alive while its upload is queued
  StreamBuffer plan_device;        // int32 plan.packed()
  StreamBuffer partial_out;        // f32 [plan.num_work][num_q_heads][head_dim] (when split)
  StreamBuffer partial_lse;        // f32 [plan.num_work][num_q_heads]
  StreamBuffer q_rows;             // f32 [num_decode][num_q_heads * head_dim] (mixed steps only)
  StreamBuffer out_rows;           // f32 [num_decode][num_q_heads * head_dim] (mixed steps only)
};

// Device memory of one step: the packed arrays and the decode state.
struct StepMemory {
  StreamBuffer arrays;  // int32, CudaPlannedStep's packed arrays
  CudaDecodeState decode;
};

// Whether the tensor-core / split-KV decode kernel takes this geometry (else the chunk kernel runs
// decode sequences too).
bool decode_kernel_supports(int64_t head_dim, int64_t page_size);

class CudaPlannedStep final : public PlannedStep {
 public:
  // Packs the plan's arrays and, when `geometry` is given and the decode kernel takes it, makes the
  // decode split plan: host work only. bind() then places both in device memory.
  CudaPlannedStep(const StepPlan& plan, const AttentionGeometry* geometry, int num_sms);

  // Uploads the packed arrays and the split plan into `memory` (grown as needed), stream-ordered,
  // and sizes the decode workspace. `memory` must outlive the step.
  void bind(StepMemory& memory, cudaStream_t stream);
  // The same with memory the step owns (eager steps).
  void bind_owned(cudaStream_t stream);

  // Device arrays, int32 (layouts as in backend/step_plan.h and prefill_attention.h).
  const int32_t* page_tables() const { return at(offsets_.page_tables); }      // [S][max_pages]
  const int32_t* token_ids() const { return at(offsets_.token_ids); }          // [T]
  // [T] StepPlan::fed_rows when the plan feeds tokens (has_fed_tokens), else empty.
  const int32_t* fed_rows() const { return at(offsets_.fed_rows); }
  // token_ids(), writable: the backend resolves the fed tokens in it once the arrays are bound.
  int32_t* mutable_token_ids() const { return memory_->arrays.as<int32_t>() + offsets_.token_ids; }
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
  int64_t num_prefill() const { return num_prefill_; }        // sequences on the prefill path
  int64_t num_extend() const { return num_extend_; }          // sequences on the extend path
  int64_t max_prefill_tokens() const { return max_prefill_tokens_; }  // longest prefill's new tokens
  int64_t num_decode() const { return static_cast<int64_t>(decode_seq_lens_.size()); }
  // Every sequence decodes: the activation rows are the decode rows, in order.
  bool all_decode() const { return num_decode() == host().num_seqs(); }
  int64_t array_bytes() const { return static_cast<int64_t>(packed_.size() * sizeof(int32_t)); }
  // The split plan made in the constructor (nullopt: no geometry, no decode, or the chunk kernel).
  const std::optional<cuda::DecodeSplitPlan>& planned_decode() const { return planned_; }

  // The decode state for `geometry`: the one planned and bound in plan() when the geometry matches;
  // otherwise (a caller that declared no geometry, e.g. an op test) planned and allocated now, which
  // `allow_late` = false (inside a CUDA-graph capture) forbids.
  CudaDecodeState& decode_state(const AttentionGeometry& geometry, int num_sms, bool allow_late) const;

 private:
  struct Offsets {
    int64_t page_tables = 0, token_ids = 0, fed_rows = 0, positions = 0, row_sequence = 0, logit_rows = 0,
            seq_info = 0, chunk_work = 0, decode_work = 0, decode_rows = 0, decode_page_tables = 0;
  };
  const int32_t* at(int64_t offset) const { return memory_->arrays.as<int32_t>() + offset; }
  // Plans `state` for `geometry` and sizes/uploads its device parts.
  void fill_decode_state(CudaDecodeState& state, const AttentionGeometry& geometry, const cuda::DecodeSplitPlan& plan,
                         cudaStream_t stream) const;

  Offsets offsets_;
  int64_t num_chunk_work_ = 0;
  int64_t num_prefill_ = 0, num_extend_ = 0, max_prefill_tokens_ = 0;
  std::vector<int32_t> decode_seq_lens_;  // [num_decode] context_after of each decode sequence
  std::vector<int32_t> packed_;           // every array above, host copy kept while its upload is queued
  std::optional<AttentionGeometry> geometry_;
  std::optional<cuda::DecodeSplitPlan> planned_;
  cudaStream_t stream_ = nullptr;
  StepMemory* memory_ = nullptr;
  std::unique_ptr<StepMemory> owned_;
  mutable bool decode_ready_ = false;  // memory_->decode holds this step's plan for memory_->decode.geometry
};

bool same_geometry(const AttentionGeometry& a, const AttentionGeometry& b);

}  // namespace nibble::backend
