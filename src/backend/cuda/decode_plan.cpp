#include "backend/cuda/decode_plan.h"

#include <algorithm>

#include "common/error.h"

namespace nibble::cuda {

std::vector<int32_t> DecodeSplitPlan::packed() const {
  std::vector<int32_t> out;
  out.reserve(packed_size());
  out.insert(out.end(), work_seq.begin(), work_seq.end());
  out.insert(out.end(), work_begin.begin(), work_begin.end());
  out.insert(out.end(), work_end.begin(), work_end.end());
  out.insert(out.end(), seq_work_offset.begin(), seq_work_offset.end());
  return out;
}

DecodeSplitPlan plan_decode_splits(const DecodePlanInputs& in) {
  const int64_t num_seqs = static_cast<int64_t>(in.seq_lens.size());
  NIBBLE_CHECK(num_seqs > 0, "decode plan: the batch has no sequences");
  NIBBLE_CHECK(in.num_kv_heads > 0 && in.group_chunks > 0 && in.num_sms > 0 && in.blocks_per_sm > 0,
               "decode plan: kv_heads {}, group_chunks {}, num_sms {}, blocks_per_sm {} must all be positive",
               in.num_kv_heads, in.group_chunks, in.num_sms, in.blocks_per_sm);
  int64_t total_granules = 0;
  int64_t max_len = 0;
  for (int64_t s = 0; s < num_seqs; ++s) {
    NIBBLE_CHECK(in.seq_lens[s] >= 1, "decode plan: sequence {} has length {}, expected >= 1", s, in.seq_lens[s]);
    total_granules += (in.seq_lens[s] + kDecodeSplitGranule - 1) / kDecodeSplitGranule;
    max_len = std::max<int64_t>(max_len, in.seq_lens[s]);
  }

  int64_t chunk = 0;
  if (in.force_chunk_tokens > 0) {
    NIBBLE_CHECK(in.force_chunk_tokens % kDecodeSplitGranule == 0,
                 "decode plan: chunk of {} tokens is not a multiple of {}", in.force_chunk_tokens, kDecodeSplitGranule);
    chunk = in.force_chunk_tokens;
  } else {
    // Blocks per work item; aim for enough items to fill blocks_per_sm waves of the SMs. Without a
    // split there are num_seqs items; split only when that leaves SMs idle (flash-decoding).
    const int64_t blocks_per_item = in.num_kv_heads * in.group_chunks;
    const int64_t target_items = (in.num_sms * in.blocks_per_sm + blocks_per_item - 1) / blocks_per_item;
    if (num_seqs >= target_items) {
      chunk = max_len;  // one item per sequence
    } else {
      const int64_t granules_per_item = std::max<int64_t>(1, total_granules / target_items);  // >= target items
      chunk = std::max<int64_t>(granules_per_item * kDecodeSplitGranule, in.min_chunk_tokens);
    }
    chunk = (chunk + kDecodeSplitGranule - 1) / kDecodeSplitGranule * kDecodeSplitGranule;
  }

  DecodeSplitPlan plan;
  plan.num_seqs = static_cast<int32_t>(num_seqs);
  plan.chunk_tokens = static_cast<int32_t>(chunk);
  plan.seq_work_offset.reserve(num_seqs + 1);
  for (int64_t s = 0; s < num_seqs; ++s) {
    plan.seq_work_offset.push_back(static_cast<int32_t>(plan.work_seq.size()));
    const int64_t len = in.seq_lens[s];
    int32_t splits = 0;
    for (int64_t begin = 0; begin < len; begin += chunk, ++splits) {
      plan.work_seq.push_back(static_cast<int32_t>(s));
      plan.work_begin.push_back(static_cast<int32_t>(begin));
      plan.work_end.push_back(static_cast<int32_t>(std::min(len, begin + chunk)));
    }
    plan.max_splits = std::max(plan.max_splits, splits);
  }
  plan.seq_work_offset.push_back(static_cast<int32_t>(plan.work_seq.size()));
  plan.num_work = static_cast<int32_t>(plan.work_seq.size());
  return plan;
}

}  // namespace nibble::cuda
