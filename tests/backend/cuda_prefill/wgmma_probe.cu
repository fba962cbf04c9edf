// The probes of wgmma_probe.h: one warpgroup (128 threads) per call.
#include "wgmma_probe.h"

#include "backend/cuda/cuda_check.h"

#if NIBBLE_CUDA_SM90A
#include "backend/cuda/prefill_mma.cuh"  // smem_address
#include "backend/cuda/wgmma.cuh"
#endif

namespace nibble::cuda::test {

#if NIBBLE_CUDA_SM90A
namespace {

using namespace nibble::cuda::detail;

// rows x 128 bf16 row-major (global) -> two 64-column halves [rows][128 B], 128-byte swizzled, the
// halves `half_bytes` apart.
__device__ void stage_rows(uint32_t dst, const uint16_t* src, int rows, uint32_t half_bytes) {
  for (int u = static_cast<int>(threadIdx.x); u < rows * 16; u += 128) {
    const int r = u / 16, c = u % 16;
    const uint4 x = *reinterpret_cast<const uint4*>(src + r * 128 + 8 * c);
    const uint32_t at = dst + (c / 8) * half_bytes + sw128_offset(r, c % 8);
    asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(at), "r"(x.x), "r"(x.y), "r"(x.z), "r"(x.w)
                 : "memory");
  }
}

// The accumulator (64 x 128, wgmma.cuh's layout) -> out [64][128].
__device__ void store_acc(const float (&d)[64], float* out) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  for (int j = 0; j < 16; ++j) {
    for (int e = 0; e < 2; ++e) {
      out[(16 * warp + g) * 128 + 8 * j + 2 * t + e] = d[4 * j + e];
      out[(16 * warp + g + 8) * 128 + 8 * j + 2 * t + e] = d[4 * j + 2 + e];
    }
  }
}

constexpr int kProbeSmem = 48 * 1024 + 1024;

__global__ void __launch_bounds__(128) qk_probe_kernel(const uint16_t* q, const uint16_t* k, float* s_out) {
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
  __trap();
#else
  extern __shared__ __align__(1024) unsigned char probe_smem[];
  const uint32_t qs = (smem_address(probe_smem) + 1023u) & ~1023u, ks = qs + 16384;
  stage_rows(qs, q, 64, 8192);
  stage_rows(ks, k, 128, 16384);
  fence_proxy_async_smem();
  __syncthreads();
  float s[64];
  wgmma_fence();
  for (int kk = 0; kk < 8; ++kk) {
    wgmma_m64n128k16_ss(s, smem_desc(qs + (kk / 4) * 8192 + (kk % 4) * 32, 16, 1024),
                        smem_desc(ks + (kk / 4) * 16384 + (kk % 4) * 32, 16, 1024), kk > 0);
  }
  wgmma_commit();
  wgmma_wait<0>();
  wgmma_fence_operands(s);
  store_acc(s, s_out);
#endif
}

__global__ void __launch_bounds__(128) pv_probe_kernel(const uint16_t* p, const uint16_t* v, float* o_out) {
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
  __trap();
#else
  extern __shared__ __align__(1024) unsigned char probe_smem[];
  const uint32_t vs = (smem_address(probe_smem) + 1023u) & ~1023u;
  stage_rows(vs, v, 128, 16384);
  fence_proxy_async_smem();
  __syncthreads();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const uint32_t* p32 = reinterpret_cast<const uint32_t*>(p);  // [64][64] bf16 pairs
  uint32_t a[8][4];
  for (int kk = 0; kk < 8; ++kk) {
    const int r = 16 * warp + g;
    a[kk][0] = p32[r * 64 + 8 * kk + t];
    a[kk][1] = p32[(r + 8) * 64 + 8 * kk + t];
    a[kk][2] = p32[r * 64 + 8 * kk + 4 + t];
    a[kk][3] = p32[(r + 8) * 64 + 8 * kk + 4 + t];
  }
  float o[64];
  for (int i = 0; i < 64; ++i) o[i] = 0.0f;
  wgmma_fence_operands(o);
  wgmma_fence();
  for (int kk = 0; kk < 8; ++kk) wgmma_m64n128k16_rs_mn(o, a[kk], smem_desc(vs + kk * 2048, 16384, 1024));
  wgmma_commit();
  wgmma_wait<0>();
  wgmma_fence_operands(o);
  store_acc(o, o_out);
#endif
}

template <typename Kernel>
void launch_probe(Kernel kernel, const uint16_t* a, const uint16_t* b, float* out, cudaStream_t stream) {
  NIBBLE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kProbeSmem));
  kernel<<<1, 128, kProbeSmem, stream>>>(a, b, out);
  NIBBLE_CUDA_CHECK_LAUNCH();
}

}  // namespace

bool wgmma_probe_built() { return true; }
void wgmma_probe_qk(const uint16_t* q, const uint16_t* k, float* s, cudaStream_t stream) {
  launch_probe(qk_probe_kernel, q, k, s, stream);
}
void wgmma_probe_pv(const uint16_t* p, const uint16_t* v, float* o, cudaStream_t stream) {
  launch_probe(pv_probe_kernel, p, v, o, stream);
}
#else
bool wgmma_probe_built() { return false; }
void wgmma_probe_qk(const uint16_t*, const uint16_t*, float*, cudaStream_t) {}
void wgmma_probe_pv(const uint16_t*, const uint16_t*, float*, cudaStream_t) {}
#endif

}  // namespace nibble::cuda::test
