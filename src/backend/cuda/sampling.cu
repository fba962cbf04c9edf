// The GPU sampling kernels (sampling.h): row_stats_kernel, many blocks per row, each taking a slice
// of kSliceLogits logits to its maximum (the lowest id among equal ones) and Σ exp(l - slice max);
// then sample_kernel, one block of kThreads per row, which combines the slices into the row's
// maximum, arg-max and normalizer and does the rest (top logprobs, the filtered draw). Greedy rows
// need nothing more, so their cost is one read of the row spread over the GPU rather than two by
// one block (20.5 us per step at batch 1, vocab 128256, before). Every reduction has a fixed order
// (warp shuffles, then warps or slices in order) and every mass is an integer, so a row's result is
// the same bits on every run.
#include <cfloat>
#include <climits>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/sampling_kernel.h"
#include "sampling/philox.h"

namespace nibble::cuda {

namespace {

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;
constexpr int kStatsThreads = 256;
constexpr int kSlice = static_cast<int>(kSliceLogits);
constexpr double kMassScale = 1099511627776.0;  // 2^40: q_i = floor(e_i · 2^40), e_i <= 1

struct Shared {
  float f[kWarps];
  int i[kWarps];
  unsigned long long u[kWarps];
  unsigned int hist_count[256];
  unsigned long long hist_mass[256];
  // select() results
  unsigned int chosen;
  unsigned long long gt_count, gt_mass, eq_count;
  int result_id;
  // block_top_logprobs() candidates: [top_count] (id, logit), unordered until thread 0 sorts them
  unsigned int top_count;
  int top_id[kDeviceMaxTopLogprobs];
  float top_logit[kDeviceMaxTopLogprobs];
};

// e_i = exp((l_i - max) / temperature), computed the same way on every pass.
__device__ __forceinline__ float scaled_exp(float l, float max_logit, float temperature) {
  return expf(__fdiv_rn(__fsub_rn(l, max_logit), temperature));
}
__device__ __forceinline__ unsigned long long mass_of(float e) {
  return static_cast<unsigned long long>(static_cast<double>(e) * kMassScale);
}

__device__ unsigned long long block_sum_u(unsigned long long v, Shared& sh) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int o = 16; o > 0; o /= 2) v += __shfl_down_sync(0xffffffffu, v, o);
  if (lane == 0) sh.u[warp] = v;
  __syncthreads();
  unsigned long long total = 0;
  for (int w = 0; w < kWarps; ++w) total += sh.u[w];
  __syncthreads();
  return total;
}

// Exclusive prefix of v over threads in index order.
__device__ unsigned long long block_exclusive_scan(unsigned long long v, Shared& sh) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  unsigned long long inclusive = v;
  for (int o = 1; o < 32; o *= 2) {
    const unsigned long long other = __shfl_up_sync(0xffffffffu, inclusive, o);
    if (lane >= o) inclusive += other;
  }
  if (lane == 31) sh.u[warp] = inclusive;
  __syncthreads();
  unsigned long long warp_prefix = 0;
  for (int w = 0; w < warp; ++w) warp_prefix += sh.u[w];
  __syncthreads();
  return warp_prefix + inclusive - v;
}

// (v, id) beats (best, best_id): a larger value, or an equal one at a lower index; id INT_MAX = none.
__device__ __forceinline__ bool beats(float v, int id, float best, int best_id) {
  return id != INT_MAX && (best_id == INT_MAX || v > best || (v == best && id < best_id));
}

// Slice s of row r (logits [s·kSlice, (s+1)·kSlice) ∩ [0, vocab)): its maximum, the
// lowest id holding it, and Σ exp(l - max) over the slice (0 when every logit is -inf).
// Grid (slices, rows), kStatsThreads threads; each thread keeps its logits in registers.
__global__ void __launch_bounds__(kStatsThreads) row_stats_kernel(const float* __restrict__ logits, int vocab,
                                                                  int slices, RowSliceStats* __restrict__ stats) {
  constexpr int kPerThread = kSlice / kStatsThreads;
  __shared__ float warp_max[kStatsThreads / 32], warp_sum[kStatsThreads / 32];
  __shared__ int warp_id[kStatsThreads / 32];
  const int r = blockIdx.y, s = blockIdx.x;
  const float* row = logits + static_cast<size_t>(r) * vocab;
  const int begin = s * kSlice, end = min(vocab, begin + kSlice);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  float x[kPerThread];
  float v = -FLT_MAX;
  int id = INT_MAX;
#pragma unroll
  for (int j = 0; j < kPerThread; ++j) {
    const int i = begin + threadIdx.x + j * kStatsThreads;  // increasing: the first maximum is kept
    x[j] = i < end ? row[i] : -INFINITY;
    if (i < end && (id == INT_MAX || x[j] > v)) {
      v = x[j];
      id = i;
    }
  }
  for (int o = 16; o > 0; o /= 2) {
    const float ov = __shfl_xor_sync(0xffffffffu, v, o);
    const int oi = __shfl_xor_sync(0xffffffffu, id, o);
    if (beats(ov, oi, v, id)) v = ov, id = oi;
  }
  if (lane == 0) warp_max[warp] = v, warp_id[warp] = id;
  __syncthreads();
  v = warp_max[0], id = warp_id[0];
  for (int w = 1; w < kStatsThreads / 32; ++w) {
    if (beats(warp_max[w], warp_id[w], v, id)) v = warp_max[w], id = warp_id[w];
  }
  float sum = 0.0f;
  if (v != -INFINITY) {
#pragma unroll
    for (int j = 0; j < kPerThread; ++j) sum += expf(x[j] - v);  // -inf (and past the end) -> 0
  }
  for (int o = 16; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  if (lane == 0) warp_sum[warp] = sum;
  __syncthreads();
  if (threadIdx.x == 0) {
    float total = 0.0f;
    for (int w = 0; w < kStatsThreads / 32; ++w) total += warp_sum[w];
    stats[static_cast<size_t>(r) * slices + s] = {.max = v, .id = id, .sum = total};
  }
}

// The row's maximum (lowest id among equal logits) and Σ exp(l - max) from its slices: warp 0
// combines them (lane i takes slices i, i + 32, ...), every thread gets the result.
__device__ void combine_row_stats(const RowSliceStats* row_stats, int slices, Shared& sh, float& best, int& best_id,
                                  float& z) {
  if (threadIdx.x < 32) {
    const int lane = threadIdx.x;
    float v = -FLT_MAX;
    int id = INT_MAX;
    for (int s = lane; s < slices; s += 32) {
      if (beats(row_stats[s].max, row_stats[s].id, v, id)) v = row_stats[s].max, id = row_stats[s].id;
    }
    for (int o = 16; o > 0; o /= 2) {
      const float ov = __shfl_xor_sync(0xffffffffu, v, o);
      const int oi = __shfl_xor_sync(0xffffffffu, id, o);
      if (beats(ov, oi, v, id)) v = ov, id = oi;
    }
    float sum = 0.0f;
    for (int s = lane; s < slices; s += 32) {
      const RowSliceStats st = row_stats[s];
      if (st.sum > 0.0f) sum += st.sum * expf(st.max - v);
    }
    for (int o = 16; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    if (lane == 0) sh.f[0] = v, sh.i[0] = id, sh.f[1] = sum;
  }
  __syncthreads();
  best = sh.f[0];
  best_id = sh.i[0];
  z = sh.f[1];
  __syncthreads();
}

// Radix select over key = key_of(i), most significant byte first: the key tau with (by count)
// #{key > tau} < target <= #{key >= tau}, or (by mass, for key = bits(e_i), e >= 0, which order like
// the values) mass{key > tau} < target <= mass{key >= tau}. Leaves tau, the count and mass above it
// and the count equal to it in sh.
template <typename KeyOf>
__device__ unsigned int radix_select(int vocab, KeyOf key_of, bool by_mass, unsigned long long target, Shared& sh) {
  unsigned int prefix = 0, mask = 0;
  unsigned long long gt_count = 0, gt_mass = 0;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int b = threadIdx.x; b < 256; b += kThreads) {
      sh.hist_count[b] = 0;
      sh.hist_mass[b] = 0;
    }
    __syncthreads();
    for (int i = threadIdx.x; i < vocab; i += kThreads) {
      const unsigned int key = key_of(i);
      if ((key & mask) == prefix) {
        const unsigned int b = (key >> shift) & 255u;
        atomicAdd(&sh.hist_count[b], 1u);
        if (by_mass) atomicAdd(&sh.hist_mass[b], mass_of(__uint_as_float(key)));
      }
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      unsigned int chosen = 0;
      unsigned long long c_acc = gt_count, m_acc = gt_mass;
      bool found = false;
      for (int b = 255; b >= 0; --b) {
        const unsigned long long c = sh.hist_count[b], m = sh.hist_mass[b];
        if (c == 0) continue;
        chosen = static_cast<unsigned int>(b);
        if ((by_mass ? m_acc + m : c_acc + c) >= target) {
          found = true;
          break;
        }
        c_acc += c;
        m_acc += m;
      }
      if (!found) {  // target beyond the total (rounding): the lowest non-empty bin, nothing above it
        c_acc -= sh.hist_count[chosen];
        m_acc -= sh.hist_mass[chosen];
      }
      sh.chosen = chosen;
      sh.gt_count = c_acc;
      sh.gt_mass = m_acc;
      sh.eq_count = sh.hist_count[chosen];
    }
    __syncthreads();
    prefix |= sh.chosen << shift;
    mask |= 255u << shift;
    gt_count = sh.gt_count;
    gt_mass = sh.gt_mass;
    __syncthreads();
  }
  return prefix;
}

// Order-preserving key of a logit: a larger logit has a larger key, equal logits equal keys (-0 and
// +0 too: l + 0 turns -0 into +0, as the host's comparisons treat them as equal).
__device__ __forceinline__ unsigned int logit_key(float l) {
  const unsigned int u = __float_as_uint(__fadd_rn(l, 0.0f));
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// The n (1..kDeviceMaxTopLogprobs, <= vocab) largest logits of the row, in the host's order (larger
// logit first, lower id first among equal logits: engine/logprobs.cpp's partial_sort), with
// logprob (l - max_logit) - log_z; written by thread 0 into `out`. A count radix select finds the
// n-th largest key tau; every key above it is taken, and of the keys equal to tau the lowest ids
// (contiguous id ranges per thread, ranked by a block scan).
__device__ void block_top_logprobs(const float* row, int vocab, int n, float max_logit, float log_z, Shared& sh,
                                   DeviceSampleResult& out) {
  const auto key_of = [row](int i) { return logit_key(row[i]); };
  const unsigned int tau = radix_select(vocab, key_of, /*by_mass=*/false, static_cast<unsigned long long>(n), sh);
  const unsigned long long ties_kept = static_cast<unsigned long long>(n) - sh.gt_count;
  if (threadIdx.x == 0) sh.top_count = 0;
  __syncthreads();
  const int chunk = (vocab + kThreads - 1) / kThreads;
  const int begin = min(vocab, static_cast<int>(threadIdx.x) * chunk), end = min(vocab, begin + chunk);
  unsigned long long my_ties = 0;
  for (int i = begin; i < end; ++i) my_ties += key_of(i) == tau ? 1 : 0;
  unsigned long long rank = block_exclusive_scan(my_ties, sh);
  for (int i = begin; i < end; ++i) {
    const unsigned int key = key_of(i);
    if (key > tau || (key == tau && rank++ < ties_kept)) {
      const unsigned int slot = atomicAdd(&sh.top_count, 1u);
      if (slot < kDeviceMaxTopLogprobs) {
        sh.top_id[slot] = i;
        sh.top_logit[slot] = row[i];
      }
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    const int m = min(static_cast<int>(sh.top_count), n);  // == n by the select's definition
    for (int a = 1; a < m; ++a) {  // insertion sort of <= 20 candidates: (logit desc, id asc)
      const int id = sh.top_id[a];
      const float l = sh.top_logit[a];
      int b = a - 1;
      while (b >= 0 && (sh.top_logit[b] < l || (sh.top_logit[b] == l && sh.top_id[b] > id))) {
        sh.top_id[b + 1] = sh.top_id[b];
        sh.top_logit[b + 1] = sh.top_logit[b];
        --b;
      }
      sh.top_id[b + 1] = id;
      sh.top_logit[b + 1] = l;
    }
    out.num_top = m;
    for (int j = 0; j < m; ++j) {
      out.top_id[j] = sh.top_id[j];
      out.top_logprob[j] = (sh.top_logit[j] - max_logit) - log_z;
    }
  }
  __syncthreads();
}

__global__ void __launch_bounds__(kThreads) sample_kernel(const float* __restrict__ logits, int vocab,
                                                          const RowSliceStats* __restrict__ stats, int slices,
                                                          const DeviceSampleRequest* __restrict__ requests,
                                                          DeviceSampleResult* __restrict__ results) {
  __shared__ Shared sh;
  const int r = blockIdx.x;
  const float* row = logits + static_cast<size_t>(r) * vocab;
  const DeviceSampleRequest req = requests[r];

  float max_logit = 0.0f, z = 0.0f;  // z = Σ exp(l - max): the temperature-1 normalizer of the logprob
  int best_id = 0;
  combine_row_stats(stats + static_cast<size_t>(r) * slices, slices, sh, max_logit, best_id, z);
  const float log_z = logf(z);
  DeviceSampleResult& result = results[r];
  if (req.top_n > 0) block_top_logprobs(row, vocab, req.top_n, max_logit, log_z, sh, result);

  int id = best_id;
  if (req.temperature > 0.0f) {
    const float t = req.temperature;
    const auto exp_key = [row, max_logit, t](int i) { return __float_as_uint(scaled_exp(row[i], max_logit, t)); };
    unsigned long long total = 0, count_min_p = 0;
    for (int i = threadIdx.x; i < vocab; i += kThreads) {
      const float e = scaled_exp(row[i], max_logit, t);
      total += mass_of(e);
      count_min_p += e >= req.min_p ? 1 : 0;
    }
    total = block_sum_u(total, sh);
    count_min_p = block_sum_u(count_min_p, sh);
    unsigned long long keep = static_cast<unsigned long long>(req.top_k);
    if (req.min_p > 0.0f && count_min_p < keep) keep = count_min_p < 1 ? 1 : count_min_p;
    if (req.top_p < 1.0f) {
      unsigned long long target = static_cast<unsigned long long>(ceil(static_cast<double>(req.top_p) * total));
      if (target < 1) target = 1;
      if (target > total) target = total;
      const unsigned int tau = radix_select(vocab, exp_key, /*by_mass=*/true, target, sh);
      const unsigned long long q_tau = mass_of(__uint_as_float(tau));
      unsigned long long ties = sh.eq_count;
      if (q_tau > 0) {
        const unsigned long long need = (target - sh.gt_mass + q_tau - 1) / q_tau;
        if (need < ties) ties = need;
      }
      const unsigned long long p_count = sh.gt_count + (ties < 1 ? 1 : ties);
      if (p_count < keep) keep = p_count;
      __syncthreads();
    }
    // The keep-th most probable token's key, and how many of its ties (lowest ids first) are kept.
    const unsigned int tau = radix_select(vocab, exp_key, /*by_mass=*/false, keep, sh);
    const unsigned long long ties_kept = keep - sh.gt_count;
    __syncthreads();
    // Id order needs each thread on a contiguous range: thread t takes [t·chunk, (t+1)·chunk).
    const int chunk = (vocab + kThreads - 1) / kThreads;
    const int begin = min(vocab, static_cast<int>(threadIdx.x) * chunk), end = min(vocab, begin + chunk);
    unsigned long long my_ties = 0;
    for (int i = begin; i < end; ++i) my_ties += __float_as_uint(scaled_exp(row[i], max_logit, t)) == tau ? 1 : 0;
    const unsigned long long ties_before = block_exclusive_scan(my_ties, sh);
    auto kept_mass = [&](int i, unsigned long long& rank) -> unsigned long long {
      const float e = scaled_exp(row[i], max_logit, t);
      const unsigned int key = __float_as_uint(e);
      if (key > tau) return mass_of(e);
      if (key == tau && rank++ < ties_kept) return mass_of(e);
      return 0;
    };
    unsigned long long my_mass = 0, rank = ties_before;
    for (int i = begin; i < end; ++i) my_mass += kept_mass(i, rank);
    const unsigned long long mass_before = block_exclusive_scan(my_mass, sh);
    const unsigned long long kept_total = block_sum_u(my_mass, sh);
    const double u = sampling::philox_uniform(req.seed, req.draw);
    unsigned long long target = static_cast<unsigned long long>(u * static_cast<double>(kept_total));
    if (target >= kept_total) target = kept_total - 1;
    if (threadIdx.x == 0) sh.result_id = best_id;  // kept_total is never 0: the arg-max is always kept
    __syncthreads();
    if (my_mass > 0 && mass_before <= target && target < mass_before + my_mass) {
      unsigned long long cumulative = mass_before;
      rank = ties_before;
      for (int i = begin; i < end; ++i) {
        cumulative += kept_mass(i, rank);
        if (target < cumulative) {
          sh.result_id = i;
          break;
        }
      }
    }
    __syncthreads();
    id = sh.result_id;
  }
  if (threadIdx.x == 0) {
    result.id = id;
    result.logprob = (row[id] - max_logit) - log_z;
    if (req.top_n == 0) result.num_top = 0;
  }
}

}  // namespace

void launch_sample_kernel(const float* logits, int64_t rows, int64_t vocab, RowSliceStats* stats,
                          const DeviceSampleRequest* requests, DeviceSampleResult* results, cudaStream_t stream) {
  const int slices = static_cast<int>(sample_row_slices(vocab));
  row_stats_kernel<<<dim3(static_cast<unsigned>(slices), static_cast<unsigned>(rows)), kStatsThreads, 0, stream>>>(
      logits, static_cast<int>(vocab), slices, stats);
  NIBBLE_CUDA_CHECK_LAUNCH();
  sample_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(logits, static_cast<int>(vocab), stats, slices,
                                                                       requests, results);
  NIBBLE_CUDA_CHECK_LAUNCH();
}

}  // namespace nibble::cuda
