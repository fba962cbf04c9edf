// The KV write and the three attention paths on the CPU, float32.
//
// Attention runs one task per (sequence, KV head, block of query tokens). A task keeps, for each of
// its queries (query token × query head of the GQA group), the online-softmax state: running max m,
// running sum l and the unnormalized output acc [head_dim]. It streams the cached prefix page by
// page — one page of K and V dequantized into a [page_size, head_dim] tile, never the whole prefix —
// then, for prefill/extend, the chunk's own full-precision K/V with the causal mask.
// With the Hadamard rotation the whole computation runs in the rotated space (q, own k and own v are
// rotated like the stored ones), and the output is rotated back at the end.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/validate.h"
#include "common/error.h"
#include "quant/hadamard.h"
#include "quant/kv_format.h"

namespace nibble::backend {

namespace {

constexpr int64_t kQueryBlock = 32;  // query tokens per attention task (prefill / extend)

// Online-softmax state of one query: acc [head_dim] unnormalized, m running max, l running sum.
struct QueryState {
  float* q;    // [head_dim] (rotated when the cache rotates)
  float* acc;  // [head_dim]
  float m = -std::numeric_limits<float>::infinity();
  float l = 0.0f;
};

// Folds keys/values [count, head_dim] (rows key_stride apart) into one query's state.
void attend_tile(QueryState& st, const float* keys, const float* values, int64_t count, int64_t head_dim,
                 float scale, float* scores) {
  if (count <= 0) return;
  float tile_max = -std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j < count; ++j) {
    const float* key = keys + j * head_dim;
    float dot = 0.0f;
    for (int64_t i = 0; i < head_dim; ++i) dot += st.q[i] * key[i];
    scores[j] = dot * scale;
    tile_max = std::max(tile_max, scores[j]);
  }
  const float m_new = std::max(st.m, tile_max);
  const float correction = std::exp(st.m - m_new);  // 0 when st.m is -inf
  st.l *= correction;
  for (int64_t i = 0; i < head_dim; ++i) st.acc[i] *= correction;
  for (int64_t j = 0; j < count; ++j) {
    const float p = std::exp(scores[j] - m_new);
    st.l += p;
    const float* value = values + j * head_dim;
    for (int64_t i = 0; i < head_dim; ++i) st.acc[i] += p * value[i];
  }
  st.m = m_new;
}

struct AttentionTask {
  int64_t seq;
  int64_t kv_head;
  int64_t query_begin;  // within the sequence's new tokens
  int64_t query_end;
};

}  // namespace

void cpu_kv_write(ThreadPool& pool, const StepPlan& plan, const KvCacheView& cache, int64_t layer, Tensor k, Tensor v) {
  validate_cache("kv_write", plan, cache, layer);
  const cache::KvGeometry& g = cache.layout->geometry();
  check_kv_shape("kv_write", "k", plan, g, k);
  check_kv_shape("kv_write", "v", plan, g, v);
  const bool rotate = cache.rotation == quant::Rotation::kHadamard;
  const int64_t page_bytes = cache.layout->page_bytes();
  const int64_t d = g.head_dim;
  pool.parallel_for(plan.total_tokens, [&](int64_t row) {
    const int64_t seq = plan.row_sequence[row];
    const int64_t pos = plan.positions[row];
    const int32_t page = plan.page_of(seq, pos);
    NIBBLE_ASSERT(page >= 0);
    const int64_t slot = pos % plan.page_size;
    uint8_t* base = cache.pool + page * page_bytes;
    std::vector<float> vec(d);
    for (int which = 0; which < 2; ++which) {
      const cache::KvPartLayout& part = which == 0 ? cache.layout->k(layer) : cache.layout->v(layer);
      const float global = which == 0 ? cache.scales->k[layer] : cache.scales->v[layer];
      const Tensor src = which == 0 ? k : v;
      for (int64_t h = 0; h < g.kv_heads; ++h) {
        std::copy_n(src.row(row) + h * d, d, vec.data());
        if (rotate) quant::hadamard_inplace(vec.data(), static_cast<int>(d));
        const bool four_over_six = cache.nvfp4_scale_rule == quant::Nvfp4ScaleRule::kFourOverSix;
        if (part.format == quant::ElemFormat::kNVFP4 && four_over_six) {  // quant/nvfp4.h
          uint8_t* codes = base + part.data_at(h, slot);    // [d / 2]
          uint8_t* scales = base + part.scales_at(h, slot);  // [d / 16]
          for (int64_t b = 0; b < d / quant::kNvfp4Block; ++b) {
            scales[b] = quant::nvfp4_quantize_block_4over6(vec.data() + b * quant::kNvfp4Block, global,
                                                           codes + b * quant::kNvfp4BlockBytes);
          }
          continue;
        }
        quant::quantize_head_vector(part.format, vec.data(), static_cast<int>(d), global, base + part.data_at(h, slot),
                                    base + part.scales_at(h, slot));
      }
    }
  });
}

void cpu_attention(ThreadPool& pool, const StepPlan& plan, const KvCacheView& cache, int64_t layer,
                   const AttentionShape& shape, Tensor q, Tensor k, Tensor v, Tensor out) {
  validate_attention(plan, cache, layer, shape, q, k, v, out);
  const cache::KvGeometry& g = cache.layout->geometry();
  const int64_t d = g.head_dim;
  const int64_t group = shape.num_heads / shape.num_kv_heads;
  const bool rotate = cache.rotation == quant::Rotation::kHadamard;
  const cache::KvPartLayout& k_part = cache.layout->k(layer);
  const cache::KvPartLayout& v_part = cache.layout->v(layer);
  const float k_global = cache.scales->k[layer];
  const float v_global = cache.scales->v[layer];
  const int64_t page_size = plan.page_size;
  const int64_t page_bytes = cache.layout->page_bytes();

  std::vector<AttentionTask> tasks;
  for (int64_t s = 0; s < plan.num_seqs(); ++s) {
    const int64_t n = plan.seqs[s].num_new_tokens;
    for (int64_t h = 0; h < g.kv_heads; ++h) {
      for (int64_t b = 0; b < n; b += kQueryBlock) tasks.push_back({s, h, b, std::min(n, b + kQueryBlock)});
    }
  }

  pool.parallel_for(static_cast<int64_t>(tasks.size()), [&](int64_t task_index) {
    const AttentionTask& task = tasks[task_index];
    const SequencePlan& seq = plan.seqs[task.seq];
    const int64_t row0 = plan.token_begin[task.seq];
    const AttentionPath path = seq.path();
    // Tokens read from the pages: the prefix, or for decode the whole context (its new token too).
    const int64_t cached_len = path == AttentionPath::kDecode ? seq.context_after : seq.first_position;
    const int64_t num_queries = (task.query_end - task.query_begin) * group;

    std::vector<float> q_buf(num_queries * d);    // [query token][group head][head_dim]
    std::vector<float> acc_buf(num_queries * d);  // same layout, zero
    std::vector<QueryState> states(num_queries);
    for (int64_t t = task.query_begin; t < task.query_end; ++t) {
      for (int64_t gh = 0; gh < group; ++gh) {
        const int64_t qi = (t - task.query_begin) * group + gh;
        float* qv = q_buf.data() + qi * d;
        std::copy_n(q.row(row0 + t) + (task.kv_head * group + gh) * d, d, qv);
        if (rotate) quant::hadamard_inplace(qv, static_cast<int>(d));
        states[qi].q = qv;
        states[qi].acc = acc_buf.data() + qi * d;
      }
    }

    // 1. The cached prefix, page by page, dequantized into one tile.
    const int64_t tile_rows = std::max(page_size, task.query_end);
    std::vector<float> k_tile(tile_rows * d), v_tile(tile_rows * d), scores(tile_rows);
    for (int64_t start = 0; start < cached_len; start += page_size) {
      const int64_t count = std::min(page_size, cached_len - start);
      const int32_t page = plan.page_of(task.seq, start);
      NIBBLE_ASSERT(page >= 0);
      const uint8_t* base = cache.pool + page * page_bytes;
      for (int64_t j = 0; j < count; ++j) {
        quant::dequantize_head_vector(k_part.format, base + k_part.data_at(task.kv_head, j),
                                      base + k_part.scales_at(task.kv_head, j), static_cast<int>(d), k_global,
                                      k_tile.data() + j * d);
        quant::dequantize_head_vector(v_part.format, base + v_part.data_at(task.kv_head, j),
                                      base + v_part.scales_at(task.kv_head, j), static_cast<int>(d), v_global,
                                      v_tile.data() + j * d);
      }
      for (QueryState& st : states) attend_tile(st, k_tile.data(), v_tile.data(), count, d, shape.scale, scores.data());
    }

    // 2. Prefill / extend: the chunk's own K/V at full precision, causal (query t sees own keys 0..t).
    if (path != AttentionPath::kDecode) {
      const int64_t own = task.query_end;
      for (int64_t j = 0; j < own; ++j) {
        float* kr = k_tile.data() + j * d;
        float* vr = v_tile.data() + j * d;
        std::copy_n(k.row(row0 + j) + task.kv_head * d, d, kr);
        std::copy_n(v.row(row0 + j) + task.kv_head * d, d, vr);
        if (rotate) {
          quant::hadamard_inplace(kr, static_cast<int>(d));
          quant::hadamard_inplace(vr, static_cast<int>(d));
        }
      }
      for (int64_t t = task.query_begin; t < task.query_end; ++t) {
        for (int64_t gh = 0; gh < group; ++gh) {
          attend_tile(states[(t - task.query_begin) * group + gh], k_tile.data(), v_tile.data(), t + 1, d, shape.scale,
                      scores.data());
        }
      }
    }

    // 3. Normalize, rotate back, store.
    for (int64_t t = task.query_begin; t < task.query_end; ++t) {
      for (int64_t gh = 0; gh < group; ++gh) {
        QueryState& st = states[(t - task.query_begin) * group + gh];
        NIBBLE_ASSERT(st.l > 0.0f);
        float* o = out.row(row0 + t) + (task.kv_head * group + gh) * d;
        const float inv_l = 1.0f / st.l;
        for (int64_t i = 0; i < d; ++i) o[i] = st.acc[i] * inv_l;
        if (rotate) quant::hadamard_inplace(o, static_cast<int>(d));
      }
    }
  });
}

}  // namespace nibble::backend
