#pragma once
// Warp-level tensor-core primitives for the prefill flash kernel (sm_80+ PTX, run on sm_90):
// cp.async 16-byte copies with zero fill, ldmatrix (plain and transposed) and
// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32, and a one-instruction exp2.
//
// Fragment layouts of m16n8k16 (PTX ISA, "Matrix Fragments for mma.m16n8k16"), with
// g = lane / 4 (group) and t = lane % 4 (thread in group):
//   A 16x16 (row-major), 4 x b32, each two bf16 along k:
//     a0 = A[g][2t..2t+1]   a1 = A[g+8][2t..2t+1]   a2 = A[g][2t+8..2t+9]   a3 = A[g+8][2t+8..2t+9]
//   B 16x8 (k x n, "col"), 2 x b32, each two bf16 along k:
//     b0 = B[2t..2t+1][g]   b1 = B[2t+8..2t+9][g]
//   C/D 16x8 f32, 4 regs:
//     c0,c1 = C[g][2t..2t+1]   c2,c3 = C[g+8][2t..2t+1]
// ldmatrix .x4: lanes 8m..8m+7 give the 16-byte row addresses of 8x8 matrix m (m = 0..3); lane l
// then holds, of each matrix, row l/4, elements 2(l%4)..+1 (= a B fragment when the rows are the
// n index and the 8 elements run along k); with .trans it holds column l/4, rows 2(l%4)..+1.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace nibble::cuda::detail {

__device__ __forceinline__ uint32_t smem_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Shared-memory operands are 32-bit shared-window addresses (smem_address): address arithmetic
// stays in 32-bit registers.

// 16 bytes global -> shared, bypassing L1; src_bytes 0 writes 16 zero bytes (no global read).
__device__ __forceinline__ void cp_async_16(uint32_t smem_dst, const void* gmem_src, bool valid) {
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_dst), "l"(gmem_src),
               "r"(src_bytes)
               : "memory");
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

// Waits until at most `kPending` committed groups of this thread are still in flight.
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t smem_row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_row));
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t smem_row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_row));
}

// d = a * b + d (16x8x16, bf16 inputs, f32 accumulate).
__device__ __forceinline__ void mma_bf16_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// 2^x in one MUFU.EX2 (rel. error ~2^-22, far below the bf16 rounding of P that follows); results
// below 2^-126 flush to 0 (a probability that small is already lost against the row's largest, >= 1),
// -inf gives 0. exp2f() without fast-math adds three instructions per call for subnormal results.
__device__ __forceinline__ float exp2_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// Two floats -> bf16x2 (round to nearest even), lo in the low half (the lower k / column index).
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

}  // namespace nibble::cuda::detail
