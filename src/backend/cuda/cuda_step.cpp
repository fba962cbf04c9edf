// The CUDA backend's planned step (cuda_step.h): pack the step plan's arrays and make the decode
// split plan on the host, then upload both once.
#include "backend/cuda/cuda_step.h"

#include <algorithm>
#include <span>

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

void StreamBuffer::reserve(int64_t bytes, cudaStream_t stream) {
  if (bytes <= bytes_) return;
  *this = StreamBuffer(bytes, stream);
}

bool decode_kernel_supports(int64_t head_dim, int64_t page_size) {
  return (head_dim == 64 || head_dim == 128 || head_dim == 256) && page_size % 16 == 0;
}

namespace {

// The split plan's inputs for these decode lengths and this geometry (decode_plan_format_inputs).
cuda::DecodePlanInputs decode_plan_inputs(std::span<const int32_t> seq_lens, const AttentionGeometry& geometry,
                                          int num_sms) {
  const AttentionShape& a = geometry.shape;
  cuda::DecodePlanInputs in = cuda::decode_plan_format_inputs(geometry.k_format, geometry.v_format, a.head_dim);
  in.seq_lens = seq_lens;
  in.num_kv_heads = a.num_kv_heads;
  in.group_chunks = cuda::decode_group_chunks(a.num_heads, a.num_kv_heads);
  in.num_sms = num_sms;
  return in;
}

}  // namespace

bool same_geometry(const AttentionGeometry& a, const AttentionGeometry& b) {
  return a.shape.num_heads == b.shape.num_heads && a.shape.num_kv_heads == b.shape.num_kv_heads &&
         a.shape.head_dim == b.shape.head_dim && a.k_format == b.k_format && a.v_format == b.v_format;
}

CudaPlannedStep::CudaPlannedStep(const StepPlan& plan, const AttentionGeometry* geometry, int num_sms)
    : PlannedStep(plan) {
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
      if (path == AttentionPath::kPrefill) {
        ++num_prefill_;
        max_prefill_tokens_ = std::max(max_prefill_tokens_, seq.num_new_tokens);
      } else {
        ++num_extend_;
      }
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
  append(offsets_.fed_rows, plan.has_fed_tokens() ? plan.fed_rows : std::vector<int32_t>{});
  append(offsets_.positions, plan.positions);
  append(offsets_.row_sequence, plan.row_sequence);
  append(offsets_.logit_rows, plan.logit_rows);
  append(offsets_.seq_info, seq_info);
  append(offsets_.chunk_work, chunk_work);
  append(offsets_.decode_work, decode_work);
  append(offsets_.decode_rows, decode_rows);
  append(offsets_.decode_page_tables, decode_page_tables);

  // The split plan: once per step, here, for every layer (plan once, run many).
  if (geometry != nullptr) {
    geometry_ = *geometry;
    if (!decode_seq_lens_.empty() && decode_kernel_supports(geometry->shape.head_dim, plan.page_size)) {
      planned_ = cuda::plan_decode_splits(decode_plan_inputs(decode_seq_lens_, *geometry, num_sms));
    }
  }
}

void CudaPlannedStep::fill_decode_state(CudaDecodeState& state, const AttentionGeometry& geometry,
                                        const cuda::DecodeSplitPlan& plan, cudaStream_t stream) const {
  const AttentionShape& a = geometry.shape;
  state.geometry = geometry;
  state.plan = plan;
  state.plan_host = plan.packed();
  const int64_t plan_bytes = static_cast<int64_t>(state.plan_host.size() * sizeof(int32_t));
  state.plan_device.reserve(plan_bytes, stream);
  NIBBLE_CUDA_CHECK(cudaMemcpyAsync(state.plan_device.data(), state.plan_host.data(), static_cast<size_t>(plan_bytes),
                                    cudaMemcpyHostToDevice, stream));
  const int64_t f = static_cast<int64_t>(sizeof(float));
  const int64_t partial = cuda::decode_partial_out_floats(plan, a.num_heads, a.head_dim);
  if (partial > 0) {
    state.partial_out.reserve(partial * f, stream);
    state.partial_lse.reserve(static_cast<int64_t>(plan.num_work) * a.num_heads * f, stream);
  }
  if (!all_decode()) {
    state.q_rows.reserve(num_decode() * a.num_heads * a.head_dim * f, stream);
    state.out_rows.reserve(num_decode() * a.num_heads * a.head_dim * f, stream);
  }
}

void CudaPlannedStep::bind(StepMemory& memory, cudaStream_t stream) {
  stream_ = stream;
  memory_ = &memory;
  memory.arrays.reserve(array_bytes(), stream);
  NIBBLE_CUDA_CHECK(cudaMemcpyAsync(memory.arrays.data(), packed_.data(), static_cast<size_t>(array_bytes()),
                                    cudaMemcpyHostToDevice, stream));
  decode_ready_ = false;
  if (planned_) {
    fill_decode_state(memory.decode, *geometry_, *planned_, stream);
    decode_ready_ = true;
  }
}

void CudaPlannedStep::bind_owned(cudaStream_t stream) {
  owned_ = std::make_unique<StepMemory>();
  bind(*owned_, stream);
}

CudaDecodeState& CudaPlannedStep::decode_state(const AttentionGeometry& geometry, int num_sms, bool allow_late) const {
  NIBBLE_ASSERT(num_decode() > 0 && memory_ != nullptr);
  if (decode_ready_ && same_geometry(memory_->decode.geometry, geometry)) return memory_->decode;
  NIBBLE_CHECK(allow_late,
               "attention: the decode split plan for this geometry was not made in plan() (declare it with "
               "prepare_attention before plan()); it cannot be made inside a CUDA-graph capture");
  const cuda::DecodeSplitPlan plan = cuda::plan_decode_splits(decode_plan_inputs(decode_seq_lens_, geometry, num_sms));
  fill_decode_state(memory_->decode, geometry, plan, stream_);
  decode_ready_ = true;
  return memory_->decode;
}

}  // namespace nibble::backend
