#pragma once
// The warpgroup MMA primitives of src/backend/cuda/wgmma.cuh run alone on given operands, so a test
// can hold their descriptors and fragment layouts against a plain matrix product: one warpgroup,
// the shared-memory layouts the wgmma prefill kernel uses (prefill_attention_wgmma.cuh).
#include <cuda_runtime.h>

#include <cstdint>

namespace nibble::cuda::test {

// Built for sm_90a (NIBBLE_CUDA_SM90A): the probes exist and the device may run them.
bool wgmma_probe_built();

// s [64][128] f32 = q [64][128] · k[128][128]^T: q and k bf16 bit patterns, row-major, both read by
// the kernel from shared memory as K-major operands (wgmma_m64n128k16_ss).
void wgmma_probe_qk(const uint16_t* q, const uint16_t* k, float* s, cudaStream_t stream);

// o [64][128] f32 = p [64][128] · v [128][128]: p bf16 from registers (the A fragment layout), v
// bf16 [keys][dims] from shared memory as an MN-major operand (wgmma_m64n128k16_rs_mn).
void wgmma_probe_pv(const uint16_t* p, const uint16_t* v, float* o, cudaStream_t stream);

}  // namespace nibble::cuda::test
