// The GPU sampling kernel (sampling.h): one block of kThreads per logits row. Every reduction has a
// fixed order (warp shuffles, then warps in order) and every mass is an integer, so a row's result
// is the same bits on every run.
#include <cfloat>
#include <climits>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/sampling_kernel.h"
#include "sampling/philox.h"

namespace nibble::cuda {

namespace {

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;
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
};

// e_i = exp((l_i - max) / temperature), computed the same way on every pass.
__device__ __forceinline__ float scaled_exp(float l, float max_logit, float temperature) {
  return expf(__fdiv_rn(__fsub_rn(l, max_logit), temperature));
}
__device__ __forceinline__ unsigned long long mass_of(float e) {
  return static_cast<unsigned long long>(static_cast<double>(e) * kMassScale);
}

__device__ float block_sum_f(float v, Shared& sh) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int o = 16; o > 0; o /= 2) v += __shfl_down_sync(0xffffffffu, v, o);
  if (lane == 0) sh.f[warp] = v;
  __syncthreads();
  float total = 0.0f;
  for (int w = 0; w < kWarps; ++w) total += sh.f[w];  // every thread, same order
  __syncthreads();
  return total;
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

// The arg-max: largest value, lowest index among equals.
__device__ void block_argmax(const float* row, int vocab, Shared& sh, float& best, int& best_id) {
  float v = -FLT_MAX;
  int id = INT_MAX;
  for (int i = threadIdx.x; i < vocab; i += kThreads) {
    const float x = row[i];
    if (id == INT_MAX || x > v) {  // i increases: the first maximum of this thread is kept
      v = x;
      id = i;
    }
  }
  for (int o = 16; o > 0; o /= 2) {
    const float ov = __shfl_down_sync(0xffffffffu, v, o);
    const int oi = __shfl_down_sync(0xffffffffu, id, o);
    if (oi != INT_MAX && (id == INT_MAX || ov > v || (ov == v && oi < id))) {
      v = ov;
      id = oi;
    }
  }
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) {
    sh.f[warp] = v;
    sh.i[warp] = id;
  }
  __syncthreads();
  best = sh.f[0];
  best_id = sh.i[0];
  for (int w = 1; w < kWarps; ++w) {
    if (sh.i[w] != INT_MAX && (best_id == INT_MAX || sh.f[w] > best || (sh.f[w] == best && sh.i[w] < best_id))) {
      best = sh.f[w];
      best_id = sh.i[w];
    }
  }
  __syncthreads();
}

// Radix select over key = bits(e_i) (e >= 0, so the bits order like the values), most significant
// byte first: the key tau with (by count) #{key > tau} < target <= #{key >= tau}, or (by mass)
// mass{key > tau} < target <= mass{key >= tau}. Leaves tau, the count and mass above it and the
// count equal to it in sh.
__device__ unsigned int radix_select(const float* row, int vocab, float max_logit, float temperature, bool by_mass,
                                     unsigned long long target, Shared& sh) {
  unsigned int prefix = 0, mask = 0;
  unsigned long long gt_count = 0, gt_mass = 0;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int b = threadIdx.x; b < 256; b += kThreads) {
      sh.hist_count[b] = 0;
      sh.hist_mass[b] = 0;
    }
    __syncthreads();
    for (int i = threadIdx.x; i < vocab; i += kThreads) {
      const float e = scaled_exp(row[i], max_logit, temperature);
      const unsigned int key = __float_as_uint(e);
      if ((key & mask) == prefix) {
        const unsigned int b = (key >> shift) & 255u;
        atomicAdd(&sh.hist_count[b], 1u);
        if (by_mass) atomicAdd(&sh.hist_mass[b], mass_of(e));
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

__global__ void __launch_bounds__(kThreads) sample_kernel(const float* __restrict__ logits, int vocab,
                                                          const DeviceSampleRequest* __restrict__ requests,
                                                          DeviceSampleResult* __restrict__ results) {
  __shared__ Shared sh;
  const int r = blockIdx.x;
  const float* row = logits + static_cast<size_t>(r) * vocab;
  const DeviceSampleRequest req = requests[r];

  float max_logit = 0.0f;
  int best_id = 0;
  block_argmax(row, vocab, sh, max_logit, best_id);
  float z = 0.0f;  // Σ exp(l - max): the temperature-1 normalizer of the logprob
  for (int i = threadIdx.x; i < vocab; i += kThreads) z += expf(row[i] - max_logit);
  z = block_sum_f(z, sh);

  int id = best_id;
  if (req.temperature > 0.0f) {
    const float t = req.temperature;
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
      const unsigned int tau = radix_select(row, vocab, max_logit, t, /*by_mass=*/true, target, sh);
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
    const unsigned int tau = radix_select(row, vocab, max_logit, t, /*by_mass=*/false, keep, sh);
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
  if (threadIdx.x == 0) results[r] = {.id = id, .logprob = (row[id] - max_logit) - logf(z)};
}

}  // namespace

void launch_sample_kernel(const float* logits, int64_t rows, int64_t vocab, const DeviceSampleRequest* requests,
                          DeviceSampleResult* results, cudaStream_t stream) {
  sample_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(logits, static_cast<int>(vocab), requests,
                                                                       results);
  NIBBLE_CUDA_CHECK_LAUNCH();
}

}  // namespace nibble::cuda
