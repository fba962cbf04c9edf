// The CUDA backend's planned step (cuda_step.h): pack the step plan's arrays, upload them once.
#include "backend/cuda/cuda_step.h"

#include <algorithm>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/decode_attention.h"
#include "backend/cuda/prefill_attention.h"
#include "common/error.h"

namespace nibble::backend {

StreamBuffer::StreamBuffer(int64_t bytes, cudaStream_t stream) : bytes_(bytes), stream_(stream) {
  NIBBLE_CHECK(bytes >= 0, "cannot allocate {} bytes of device memory", bytes);
  if (bytes > 0) NIBBLE_CUDA_CHECK(cudaMallocAsync(&data_, static_cast<size_t>(bytes), stream));
}

StreamBuffer::~StreamBuffer() {
  if (data_ != nullptr) cudaFreeAsync(data_, stream_);  // no throw from a destructor
}

StreamBuffer::StreamBuffer(StreamBuffer&& other) noexcept
    : data_(other.data_), bytes_(other.bytes_), stream_(other.stream_) {
  other.data_ = nullptr;
  other.bytes_ = 0;
}

StreamBuffer& StreamBuffer::operator=(StreamBuffer&& other) noexcept {
  std::swap(data_, other.data_);
  std::swap(bytes_, other.bytes_);
  std::swap(stream_, other.stream_);
  return *this;
}

CudaPlannedStep::CudaPlannedStep(const StepPlan& plan, cudaStream_t stream) : PlannedStep(plan), stream_(stream) {
  const int64_t num_seqs = plan.num_seqs();
  NIBBLE_CHECK(num_seqs > 0 && plan.total_tokens > 0, "plan: a CUDA step needs sequences and tokens, got {} and {}",
               num_seqs, plan.total_tokens);
  NIBBLE_CHECK(plan.total_tokens < (int64_t{1} << 31), "plan: {} tokens exceed the int32 row ids of the CUDA backend",
               plan.total_tokens);
  std::vector<int32_t> seq_info, chunk_work, decode_work, decode_rows, decode_page_tables;
  for (int64_t s = 0; s < num_seqs; ++s) {
    const SequencePlan& seq = plan.seqs[s];
    const AttentionPath path = seq.path();
    const int64_t cached = path == AttentionPath::kDecode ? seq.context_after : seq.first_position;
    seq_info.insert(seq_info.end(), {static_cast<int32_t>(plan.token_begin[s]), static_cast<int32_t>(seq.num_new_tokens),
                                     static_cast<int32_t>(cached), path == AttentionPath::kDecode ? 0 : 1});
    if (path == AttentionPath::kDecode) {
      decode_work.insert(decode_work.end(), {static_cast<int32_t>(s), 0});
      decode_rows.push_back(static_cast<int32_t>(plan.token_begin[s]));
      decode_seq_lens_.push_back(static_cast<int32_t>(seq.context_after));
      const int32_t* table = plan.page_table(s);
      decode_page_tables.insert(decode_page_tables.end(), table, table + plan.max_pages_per_seq);
    } else {
      for (int64_t q = 0; q < seq.num_new_tokens; q += cuda::kChunkQueryTile) {
        chunk_work.insert(chunk_work.end(), {static_cast<int32_t>(s), static_cast<int32_t>(q)});
      }
    }
  }
  num_chunk_work_ = static_cast<int64_t>(chunk_work.size() / 2);

  auto append = [&](int64_t& offset, const std::vector<int32_t>& values) {
    offset = static_cast<int64_t>(packed_.size());
    packed_.insert(packed_.end(), values.begin(), values.end());
    packed_.resize(packed_.size() + (4 - packed_.size() % 4) % 4, 0);  // each array 16-byte aligned
  };
  append(offsets_.page_tables, plan.page_tables);
  append(offsets_.token_ids, plan.token_ids);
  append(offsets_.positions, plan.positions);
  append(offsets_.row_sequence, plan.row_sequence);
  append(offsets_.logit_rows, plan.logit_rows);
  append(offsets_.seq_info, seq_info);
  append(offsets_.chunk_work, chunk_work);
  append(offsets_.decode_work, decode_work);
  append(offsets_.decode_rows, decode_rows);
  append(offsets_.decode_page_tables, decode_page_tables);
  const int64_t bytes = static_cast<int64_t>(packed_.size() * sizeof(int32_t));
  device_ = StreamBuffer(bytes, stream);
  NIBBLE_CUDA_CHECK(cudaMemcpyAsync(device_.data(), packed_.data(), static_cast<size_t>(bytes), cudaMemcpyHostToDevice,
                                    stream));
}

CudaDecodeState& CudaPlannedStep::decode_state(int64_t num_q_heads, int64_t num_kv_heads, int64_t head_dim,
                                               quant::ElemFormat k_format, quant::ElemFormat v_format,
                                               int num_sms) const {
  NIBBLE_ASSERT(num_decode() > 0);
  if (decode_ && decode_->num_q_heads == num_q_heads && decode_->num_kv_heads == num_kv_heads &&
      decode_->head_dim == head_dim && decode_->k_format == k_format && decode_->v_format == v_format) {
    return *decode_;
  }
  auto state = std::make_unique<CudaDecodeState>();
  state->num_q_heads = num_q_heads;
  state->num_kv_heads = num_kv_heads;
  state->head_dim = head_dim;
  state->k_format = k_format;
  state->v_format = v_format;
  state->plan = cuda::plan_decode_splits({.seq_lens = decode_seq_lens_,
                                          .num_kv_heads = num_kv_heads,
                                          .group_chunks = cuda::decode_group_chunks(num_q_heads, num_kv_heads),
                                          .num_sms = num_sms,
                                          .blocks_per_sm = cuda::decode_blocks_per_sm(k_format, v_format, head_dim)});
  state->plan_host = state->plan.packed();
  const int64_t plan_bytes = static_cast<int64_t>(state->plan_host.size() * sizeof(int32_t));
  state->plan_device = StreamBuffer(plan_bytes, stream_);
  NIBBLE_CUDA_CHECK(cudaMemcpyAsync(state->plan_device.data(), state->plan_host.data(), static_cast<size_t>(plan_bytes),
                                    cudaMemcpyHostToDevice, stream_));
  const int64_t f = static_cast<int64_t>(sizeof(float));
  const int64_t partial = cuda::decode_partial_out_floats(state->plan, num_q_heads, head_dim);
  if (partial > 0) {
    state->partial_out = StreamBuffer(partial * f, stream_);
    state->partial_lse = StreamBuffer(static_cast<int64_t>(state->plan.num_work) * num_q_heads * f, stream_);
  }
  if (!all_decode()) {
    state->q_rows = StreamBuffer(num_decode() * num_q_heads * head_dim * f, stream_);
    state->out_rows = StreamBuffer(num_decode() * num_q_heads * head_dim * f, stream_);
  }
  decode_ = std::move(state);
  return *decode_;
}

}  // namespace nibble::backend
