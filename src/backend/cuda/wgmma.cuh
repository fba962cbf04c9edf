#pragma once
// Warpgroup-level tensor-core primitives of sm_90a (PTX ISA "Asynchronous Warpgroup Level Matrix
// Multiply-Accumulate"): wgmma.mma_async m64n128k16 bf16 -> f32 with B (and optionally A) read from
// shared memory through matrix descriptors, its fences, and the 128-byte swizzle its operands use.
// Compiled only for sm_90a (the `a` features); the kernels that include it are built for that
// architecture alone (src/backend/cuda/CMakeLists.txt).
//
// A warpgroup is 4 consecutive warps (128 threads, the first warp a multiple of 4). One m64nNk16
// instruction multiplies a 64 x 16 A by a 16 x N B into a 64 x N f32 accumulator spread over the
// warpgroup: warp w of the group holds rows 16w .. 16w + 15 in the mma.sync m16n8 layout, N / 8
// n-tiles of 4 registers each (g = lane / 4, t = lane % 4):
//   d[4j + 0], d[4j + 1] = D[16w + g][8j + 2t .. + 1]      d[4j + 2], d[4j + 3] = D[16w + g + 8][8j + 2t .. + 1]
// A from registers has the mma.sync m16n8k16 A layout per warp (4 x b32, two bf16 each along k):
//   a0 = A[16w + g][2t .. + 1]       a1 = A[16w + g + 8][2t .. + 1]
//   a2 = A[16w + g][2t + 8 .. + 9]   a3 = A[16w + g + 8][2t + 8 .. + 9]
// so the accumulator's n-tiles 2k and 2k + 1 are, rounded to bf16, the A operand of k-step k.
//
// Shared-memory operands, 128-byte swizzle (the only mode used here): an operand is stored in
// "atoms" of 8 rows x 128 bytes (64 bf16), 1024-byte aligned, in which the 16-byte piece c of row r
// sits at piece c ^ r (sw128_offset). The descriptor (smem_desc) gives the start address and two
// strides in bytes:
//   K-major (the 16 k-values of a row contiguous: A = Q [rows][dims], B = K [keys][dims] for Q·K^T):
//     rows are 128 bytes apart inside an atom, SBO between 8-row groups; a k-step inside an atom
//     starts 32 bytes further on (the swizzle is applied to the address, so the start may be any
//     32-byte step of the first row); LBO is unused while a k-step stays inside one atom's row.
//   MN-major (B = V [keys][dims] for P·V, "transposed"): 64 n-values of a row contiguous, 8 k-rows
//     per atom 128 bytes apart; SBO between 8-row groups along k, LBO between 64-column atoms along n.
#include <cstdint>

namespace nibble::cuda::detail {

// Byte offset of 16-byte piece `piece` (0..7) of row `row` inside a 128-byte-swizzled region whose
// rows are 128 bytes apart (the region 1024-byte aligned).
__device__ __forceinline__ uint32_t sw128_offset(int row, int piece) {
  return static_cast<uint32_t>(row * 128 + ((piece ^ (row & 7)) << 4));
}

// Shared-memory matrix descriptor, 128-byte swizzle; addresses and offsets in bytes (multiples of 16).
__device__ __forceinline__ uint64_t smem_desc(uint32_t start, uint32_t lbo, uint32_t sbo) {
  return static_cast<uint64_t>((start & 0x3FFFFu) >> 4) | (static_cast<uint64_t>(lbo >> 4) << 16) |
         (static_cast<uint64_t>(sbo >> 4) << 32) | (1ull << 62);
}

// Orders this thread's earlier register writes (accumulators, A fragments) before the warpgroup's
// next wgmma.mma_async reads them.
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
// Waits until at most kPending committed wgmma groups of this warpgroup are in flight.
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}
// Generic-proxy writes to shared memory (st.shared, cp.async) made visible to the async proxy that
// wgmma reads its descriptors' operands through; each writing thread, before the barrier.
__device__ __forceinline__ void fence_proxy_async_smem() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// ---- mbarriers (shared::cta, 64-bit) ----------------------------------------------------------------
// Phase k of a barrier completes when its count of arrivals for that phase is in; waits name the
// phase by its parity (k & 1).
__device__ __forceinline__ void mbarrier_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
// Release-arrives on the barrier (this thread's earlier writes are visible to whoever acquires the phase).
__device__ __forceinline__ void mbarrier_arrive(uint32_t bar) {
  asm volatile("{\n.reg .b64 state;\nmbarrier.arrive.shared::cta.b64 state, [%0];\n}\n" ::"r"(bar) : "memory");
}
// Waits (acquire) until the barrier's phase of this parity has completed.
__device__ __forceinline__ void mbarrier_wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred done;\n"
      "WAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT_%=;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}

// Keeps the compiler from moving accesses of an accumulator register across a wgmma wait.
template <int N>
__device__ __forceinline__ void wgmma_fence_operands(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

#define NIBBLE_WGMMA_D64                                                                                         \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, " \
  "%23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, "  \
  "%44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"
#define NIBBLE_WGMMA_D64_OPERANDS(d)                                                                             \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),  \
      "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),    \
      "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),   \
      "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]),   \
      "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]),   \
      "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),   \
      "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]),   \
      "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])

// d (64 x 128 f32) = A · B (+ d when accumulate), A and B from shared memory, both K-major.
__device__ __forceinline__ void wgmma_m64n128k16_ss(float (&d)[64], uint64_t a_desc, uint64_t b_desc,
                                                    bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " NIBBLE_WGMMA_D64 ", %64, %65, p, 1, 1, 0, 0;\n}\n"
      : NIBBLE_WGMMA_D64_OPERANDS(d)
      : "l"(a_desc), "l"(b_desc), "r"(static_cast<int>(accumulate)));
}

// d (64 x 128 f32) += A · B, A from registers (a: this thread's fragment, layout above), B from
// shared memory MN-major (the descriptor's transpose bit set).
__device__ __forceinline__ void wgmma_m64n128k16_rs_mn(float (&d)[64], const uint32_t (&a)[4], uint64_t b_desc) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " NIBBLE_WGMMA_D64
      ", {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
      : NIBBLE_WGMMA_D64_OPERANDS(d)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc));
}

#undef NIBBLE_WGMMA_D64
#undef NIBBLE_WGMMA_D64_OPERANDS

}  // namespace nibble::cuda::detail
