#pragma once
// Checks every backend runs at the front of its KV ops, in one place so the CPU oracle and the CUDA
// backend reject exactly the same inputs with the same messages.
#include <cstdint>

#include "backend/backend.h"

namespace nibble::backend {

// The cache view is complete, `layer` is one of its full-attention layers, there is one global
// scale per layer, the step plans the pool's page size, the head_dim suits the dtype and rotation,
// and every page id of the step lies inside the pool. `op` names the caller in messages.
void validate_cache(const char* op, const StepPlan& plan, const KvCacheView& cache, int64_t layer);

// t is [total_tokens, kv_heads * head_dim]; `what` names the tensor ("k", "v") in messages.
void check_kv_shape(const char* op, const char* what, const StepPlan& plan, const cache::KvGeometry& g, Tensor t);

// Everything attention checks before it runs: validate_cache, the layer's shape against the cache,
// k/v [total_tokens, kv_heads * head_dim], q/out [total_tokens, num_heads * head_dim].
void validate_attention(const StepPlan& plan, const KvCacheView& cache, int64_t layer, const AttentionShape& shape,
                        Tensor q, Tensor k, Tensor v, Tensor out);

// out [rows, out_features] = x [rows, in_features] @ W^T (+ bias [out_features]): the shapes agree.
void validate_matmul(Tensor x, const Matrix& w, const Vector& bias, Tensor out);

}  // namespace nibble::backend
