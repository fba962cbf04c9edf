// Decode-step CUDA graphs (cuda_graph.h): the entry cache and the record/replay state.
#include "backend/cuda/cuda_graph.h"

#include <cstdlib>
#include <cstring>
#include <string_view>

#include "backend/cuda/cuda_check.h"
#include "common/error.h"

namespace nibble::backend {

namespace {

uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
  h *= 0xBF58476D1CE4E5B9ull;
  return h ^ (h >> 31);
}

void destroy(GraphEntry& e) {
  if (e.exec != nullptr) cudaGraphExecDestroy(e.exec);
  e.exec = nullptr;
}

}  // namespace

uint64_t sig(float x) {
  uint32_t bits = 0;
  std::memcpy(&bits, &x, sizeof(bits));
  return bits;
}

int64_t graph_batch_bucket(int64_t n) {
  if (n <= 0 || n > kMaxGraphBatch) return 0;
  for (int64_t b : {1, 2, 4, 8, 16, 24, 32, 48, 64}) {
    if (n <= b) return b;
  }
  return (n + 31) / 32 * 32;
}

bool graphs_disabled_by_env() {
  const char* v = std::getenv("NIBBLE_CUDA_GRAPHS");
  if (v == nullptr) return false;
  const std::string_view s(v);
  return s == "0" || s == "off" || s == "false";
}

GraphCache::~GraphCache() { clear(); }

void GraphCache::clear() {
  for (GraphEntry& e : entries_) destroy(e);
  entries_.clear();
}

GraphEntry& GraphCache::find_or_add(const GraphKey& key, cudaStream_t stream) {
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if (it->key == key) {
      entries_.splice(entries_.end(), entries_, it);  // most recently used last
      return entries_.back();
    }
  }
  if (entries_.size() >= kMaxGraphs) {
    NIBBLE_CUDA_CHECK(cudaStreamSynchronize(stream));
    destroy(entries_.front());
    entries_.pop_front();
  }
  entries_.emplace_back();
  entries_.back().key = key;
  return entries_.back();
}

void GraphRecorder::begin(GraphEntry& entry, GraphMode mode, cudaStream_t stream) {
  NIBBLE_ASSERT(mode_ == GraphMode::kEager);
  entry_ = &entry;
  mode_ = mode;
  fingerprint_ = 0x6E6962626C65ull;
  num_ops_ = 0;
  deferred_.clear();
  if (mode == GraphMode::kCapture) {
    // Thread-local: a call on this thread that cannot be captured fails loudly instead of racing.
    NIBBLE_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  }
}

void GraphRecorder::op(std::initializer_list<uint64_t> signature, std::function<void()> launch) {
  if (mode_ == GraphMode::kEager) {
    launch();
    return;
  }
  for (uint64_t v : signature) fingerprint_ = mix(fingerprint_, v);
  fingerprint_ = mix(fingerprint_, 0xFFFF0000ull + signature.size());
  ++num_ops_;
  if (mode_ == GraphMode::kReplay) {
    deferred_.push_back(std::move(launch));
  } else {
    launch();
  }
}

void GraphRecorder::finish(cudaStream_t stream, GraphStats& stats) {
  if (mode_ == GraphMode::kEager) return;
  GraphEntry& e = *entry_;
  const GraphMode mode = mode_;
  mode_ = GraphMode::kEager;
  entry_ = nullptr;
  if (mode == GraphMode::kCapture) {
    cudaGraph_t graph = nullptr;
    NIBBLE_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
    destroy(e);
    const cudaError_t status = cudaGraphInstantiate(&e.exec, graph, 0);
    cudaGraphDestroy(graph);
    NIBBLE_CHECK(status == cudaSuccess, "CUDA graph: instantiating a captured decode step failed: {}",
                 cudaGetErrorString(status));
    e.fingerprint = fingerprint_;
    e.num_ops = num_ops_;
    NIBBLE_CUDA_CHECK(cudaGraphLaunch(e.exec, stream));
    ++stats.captures;
    return;
  }
  std::vector<std::function<void()>> deferred = std::move(deferred_);
  deferred_.clear();
  if (fingerprint_ == e.fingerprint && num_ops_ == e.num_ops && e.exec != nullptr) {
    NIBBLE_CUDA_CHECK(cudaGraphLaunch(e.exec, stream));
    ++stats.replays;
    return;
  }
  // Something the graph baked in changed: run the ops as called, recapture this key next time.
  for (auto& launch : deferred) launch();
  destroy(e);
  e.seen = 1;
  ++stats.mismatches;
}

void GraphRecorder::abort(cudaStream_t stream) {
  if (mode_ == GraphMode::kCapture) {
    cudaGraph_t graph = nullptr;
    cudaStreamEndCapture(stream, &graph);  // ends the (possibly invalidated) capture
    if (graph != nullptr) cudaGraphDestroy(graph);
    cudaGetLastError();
    if (entry_ != nullptr) entry_->seen = 0;
  }
  mode_ = GraphMode::kEager;
  entry_ = nullptr;
  deferred_.clear();
}

}  // namespace nibble::backend
