#pragma once
// The split-KV (flash-decoding) plan for one decode step: built once on the host from the
// sequences' lengths, uploaded once, reused by every layer (no allocation, no host sync inside the
// per-layer call, so the step can be captured in a CUDA graph).
//
// A work item is one chunk [token_begin, token_end) of one sequence; the decode kernel runs one
// thread block per (work item, KV head, group chunk of <= 8 query heads). A sequence split into
// n > 1 items writes n partial outputs plus their log-sum-exp, merged by the reduce kernel; a
// sequence of one item writes its output directly. Chunk boundaries are multiples of
// kDecodeSplitGranule tokens (a multiple of every kernel tile), so tiles never straddle two items.
#include <cstdint>
#include <span>
#include <vector>

namespace nibble::cuda {

inline constexpr int32_t kDecodeSplitGranule = 64;  // tokens

struct DecodePlanInputs {
  std::span<const int32_t> seq_lens;  // [num_seqs] tokens in the cache per sequence (>= 1), host
  int64_t num_kv_heads = 0;
  int64_t group_chunks = 1;   // ceil(query heads per KV head / 8)
  int64_t num_sms = 132;      // cudaDevAttrMultiProcessorCount of the device
  int64_t blocks_per_sm = 4;  // thread blocks resident per SM (decode_blocks_per_sm for the format)
  int64_t min_chunk_tokens = 256;  // never split finer than this (each item must amortize its merge)
  int64_t force_chunk_tokens = 0;  // > 0: use this chunk size (a multiple of the granule); tests
};

struct DecodeSplitPlan {
  int32_t num_seqs = 0;
  int32_t num_work = 0;
  int32_t max_splits = 1;     // most items of one sequence; 1 = no reduce kernel needed
  int32_t chunk_tokens = 0;   // the chunk length used (multiple of kDecodeSplitGranule)
  // The device copy is one int32 array (packed()), laid out as
  //   [work_seq: num_work][work_begin: num_work][work_end: num_work][seq_work_offset: num_seqs + 1]
  std::vector<int32_t> work_seq;         // [num_work] sequence of each item
  std::vector<int32_t> work_begin;       // [num_work] first token of the item
  std::vector<int32_t> work_end;         // [num_work] one past its last token
  std::vector<int32_t> seq_work_offset;  // [num_seqs + 1] first item of each sequence

  std::vector<int32_t> packed() const;
  int64_t packed_size() const { return 3 * static_cast<int64_t>(num_work) + num_seqs + 1; }
};

// Throws nibble::Error on an empty batch, a length < 1 or a bad chunk size.
DecodeSplitPlan plan_decode_splits(const DecodePlanInputs& in);

}  // namespace nibble::cuda
