#pragma once
// CUDA graphs for decode steps. The forward pass (model/transformer.cpp) calls the seam's ops one by
// one and knows nothing of graphs, so the backend records and replays below the seam:
//
//   plan()        an all-decode step gets a graph entry keyed by its launch shape (GraphKey: batch
//                 bucket, page-table width, split-plan shape); the step's arrays and split plan are
//                 written into the entry's fixed device buffers (StepMemory), outside any graph.
//                 1st time a key is seen: eager (warms every launcher); 2nd: the ops are captured;
//                 later: replay.
//   each op       capture: launches (recorded) and mixes its arguments (pointers, shapes, scalars)
//                 into a fingerprint. replay: mixes the same fingerprint and defers its launch as a
//                 closure instead of launching.
//   copy_to_host  (or any call that cannot be captured: allocate, copy_from_host) ends the section:
//                 capture -> instantiate, launch; replay -> when the fingerprint and the op count
//                 equal the captured ones, launch the graph and drop the closures, else run the
//                 closures (eager, correct) and recapture the key next time.
//
// So a replay runs exactly the kernels, with exactly the arguments, that the eager path would:
// anything that changed (activations regrown, other weights, other scales) changes the fingerprint.
// Per-step inputs (token ids, positions, page tables, lengths, the split plan) live in the entry's
// buffers and are rewritten before each replay. Graphs are off with BackendOptions::cuda_graphs =
// false or NIBBLE_CUDA_GRAPHS=0.
#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <list>
#include <vector>

#include "backend/cuda/cuda_step.h"

namespace nibble::backend {

struct GraphKey {
  int64_t num_seqs = 0;
  int64_t max_pages_per_seq = 0;
  int64_t page_size = 0;
  bool split_planned = false;  // the decode kernel with a split plan (else the chunk kernel)
  int32_t num_work = 0;
  int32_t num_units = 0;  // the decode grid's (DecodeSplitPlan::num_units)
  int32_t max_splits = 0;
  bool operator==(const GraphKey&) const = default;
};

struct GraphEntry {
  GraphKey key;
  StepMemory memory;             // the step's device inputs, fixed addresses
  cudaGraphExec_t exec = nullptr;
  uint64_t fingerprint = 0;      // of the captured ops
  int64_t num_ops = 0;
  int seen = 0;                  // steps planned with this key since its last (re)capture
};

struct GraphStats {
  int64_t captures = 0;
  int64_t replays = 0;
  int64_t mismatches = 0;  // replays refused (fingerprint differed): ran eagerly instead
  int64_t eager_steps = 0; // planned steps that ran without a graph
};

// The graph entries of one backend, least recently used first; at most kMaxGraphs.
class GraphCache {
 public:
  static constexpr size_t kMaxGraphs = 64;
  ~GraphCache();
  // The entry for `key`, created when new (evicting the least recently used; `stream` is
  // synchronized first so no evicted buffer is in use).
  GraphEntry& find_or_add(const GraphKey& key, cudaStream_t stream);
  void clear();

 private:
  std::list<GraphEntry> entries_;
};

// The state of the step being recorded or replayed.
enum class GraphMode { kEager, kCapture, kReplay };

class GraphRecorder {
 public:
  GraphMode mode() const { return mode_; }
  GraphEntry* entry() const { return entry_; }
  // Starts a section for `entry` in `mode` (kCapture begins the stream capture).
  void begin(GraphEntry& entry, GraphMode mode, cudaStream_t stream);
  // Mixes one op's arguments; in kReplay keeps `launch` for later, else runs it now.
  void op(std::initializer_list<uint64_t> signature, std::function<void()> launch);
  // Ends the section (see the file comment). No-op in kEager.
  void finish(cudaStream_t stream, GraphStats& stats);
  // Drops a section left open by an exception (capture ended and discarded, closures dropped).
  void abort(cudaStream_t stream);

 private:
  GraphMode mode_ = GraphMode::kEager;
  GraphEntry* entry_ = nullptr;
  uint64_t fingerprint_ = 0;
  int64_t num_ops_ = 0;
  std::vector<std::function<void()>> deferred_;
};

// Bits of a float / pointer for a signature.
inline uint64_t sig(const void* p) { return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(p)); }
uint64_t sig(float x);

// Batch buckets of captured decode steps: 1, 2, 4, 8, 16, 24, 32, 48, 64, then multiples of 32 up
// to kMaxGraphBatch; 0 above it (no graph).
inline constexpr int64_t kMaxGraphBatch = 256;
int64_t graph_batch_bucket(int64_t num_seqs);

// NIBBLE_CUDA_GRAPHS=0 (or "off") in the environment turns graphs off.
bool graphs_disabled_by_env();

}  // namespace nibble::backend
