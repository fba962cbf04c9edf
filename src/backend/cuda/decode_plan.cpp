#include "backend/cuda/decode_plan.h"

#include <algorithm>
#include <cmath>

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
  int64_t max_len = 0;
  for (int64_t s = 0; s < num_seqs; ++s) {
    NIBBLE_CHECK(in.seq_lens[s] >= 1, "decode plan: sequence {} has length {}, expected >= 1", s, in.seq_lens[s]);
    max_len = std::max<int64_t>(max_len, in.seq_lens[s]);
  }

  int64_t chunk = 0;
  if (in.force_chunk_tokens > 0) {
    NIBBLE_CHECK(in.force_chunk_tokens % kDecodeSplitGranule == 0,
                 "decode plan: chunk of {} tokens is not a multiple of {}", in.force_chunk_tokens, kDecodeSplitGranule);
    chunk = in.force_chunk_tokens;
  } else {
    // Flash-decoding split, sized by wave efficiency: with S = num_sms · blocks_per_sm resident blocks,
    // a grid of B blocks runs in ceil(B / S) waves and keeps (B / S) / ceil(B / S) of the slots busy.
    // Try splitting the longest sequence into 1, 2, ... items (chunks never below min_chunk_tokens)
    // and take the fewest splits whose efficiency is within 10% of the best (fewer splits = less
    // merge work); a big batch therefore stays unsplit and a single sequence fills every SM.
    const int64_t blocks_per_item = in.num_kv_heads * in.group_chunks;
    const int64_t slots = in.num_sms * in.blocks_per_sm;
    const int64_t max_granules = (max_len + kDecodeSplitGranule - 1) / kDecodeSplitGranule;
    const int64_t min_granules = std::max<int64_t>(1, in.min_chunk_tokens / kDecodeSplitGranule);
    const int64_t max_split = std::max<int64_t>(1, std::min<int64_t>(256, max_granules / min_granules));
    std::vector<double> efficiency;
    std::vector<int64_t> chunk_granules;
    double best = 0;
    for (int64_t split = 1; split <= max_split; ++split) {
      const int64_t cg = (max_granules + split - 1) / split;
      if (!chunk_granules.empty() && cg == chunk_granules.back()) continue;
      int64_t items = 0;
      for (int64_t s = 0; s < num_seqs; ++s) {
        const int64_t granules = (in.seq_lens[s] + kDecodeSplitGranule - 1) / kDecodeSplitGranule;
        items += (granules + cg - 1) / cg;
      }
      const double waves = static_cast<double>(items * blocks_per_item) / static_cast<double>(slots);
      const double eff = waves / std::ceil(waves);
      efficiency.push_back(eff);
      chunk_granules.push_back(cg);
      best = std::max(best, eff);
    }
    size_t pick = 0;
    while (efficiency[pick] < 0.9 * best) ++pick;
    chunk = chunk_granules[pick] * kDecodeSplitGranule;
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
