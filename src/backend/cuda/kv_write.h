#pragma once
// Write path: quantize the new tokens' K and V and store them into the paged KV pool, fused in one
// kernel, for every format (f32, bf16, fp8, nvfp4, k8v4) with or without the Hadamard rotation.
// Bit-exact with the CPU reference: the kernel replays quant::quantize_head_vector's steps on
// registers (bf16_from_f32; E4M3 by the hardware's RNE satfinite conversion, which equals
// e4m3_from_f32; nvfp4's E2M1 codes of x / (s·g) by quant/e2m1_reciprocal.h's rule: a split
// reciprocal, one multiply and one FMA per element, proven equal to the correctly rounded division
// for every power-of-two g and checked near each decision point otherwise) and
// quant::hadamard_inplace's butterflies in the same order, in a translation unit built without FMA
// contraction (the rule's FMAs are explicit); fp8's x / g is x · (1/g) only when g is a power of
// two. (One documented difference: a NaN input gives a NaN scale/code on both, but its sign bit may
// differ, because x86 keeps a NaN's sign through division and the GPU returns the canonical NaN.)
// Both nvfp4 block-scale rules: amax/6 (quant::nvfp4_quantize_block) and "4 over 6"
// (quant::nvfp4_quantize_block_4over6: a second candidate with amax/4, kept when its float32 block
// error is strictly smaller), the latter in its own kernel instantiation so amax/6 costs nothing more.
//
// Where each token goes is the step plan's own description (backend/step_plan.h): row i belongs to
// sequence row_sequence[i] at position positions[i], which lives in page
// page_tables[seq * max_pages_per_seq + pos / page_size], slot pos % page_size.
#include <cuda_runtime.h>

#include <cstdint>

#include "cache/page_layout.h"
#include "quant/kv_format.h"
#include "quant/nvfp4.h"

namespace nibble::cuda {

enum class ActivationDtype : uint8_t { kF32, kBF16 };

struct KvWriteParams {
  // Device pointers.
  const void* k = nullptr;  // [num_tokens][kv_heads][head_dim], f32 or bf16 (input_dtype)
  const void* v = nullptr;  // [num_tokens][kv_heads][head_dim], same dtype
  ActivationDtype input_dtype = ActivationDtype::kF32;
  const int32_t* positions = nullptr;     // [num_tokens] position of each row in its sequence
  const int32_t* row_sequence = nullptr;  // [num_tokens] sequence of each row; < 0 skips the row
  const int32_t* page_tables = nullptr;   // [num_seqs][max_pages_per_seq] page ids
  uint8_t* pool = nullptr;                // [num_pages][page_bytes]

  int64_t num_tokens = 0;
  int64_t max_pages_per_seq = 0;
  int64_t page_bytes = 0;
  cache::KvPartLayout k_layout{};  // this layer's K part (PageLayout::k(layer))
  cache::KvPartLayout v_layout{};  // this layer's V part
  float k_global_scale = 1.0f;     // g of this layer's K (fp8 / nvfp4; ignored otherwise)
  float v_global_scale = 1.0f;
  quant::Rotation rotation = quant::Rotation::kNone;
  quant::Nvfp4ScaleRule nvfp4_scale_rule = quant::Nvfp4ScaleRule::kAmaxOver6;  // nvfp4 parts only

  // RoPE fused in front of the write (backend.h's rope_kv_write; input_dtype kF32 only), when
  // rope_inv_freq is set: each K vector is rotated (backend.h's rope rule, rotate-half, angle =
  // positions[token] · inv_freq[i], sincosf, every product and sum rounded separately), stored
  // rotated into k_rotated (may alias k), then quantized; the q_heads vectors of q per token are
  // rotated in place. One kernel instead of rope's and the write's.
  const float* rope_inv_freq = nullptr;  // [head_dim / 2] or null: no RoPE
  float* q = nullptr;                    // [num_tokens][q_heads][head_dim] f32, rotated in place
  int64_t q_heads = 0;
  float* k_rotated = nullptr;            // [num_tokens][kv_heads][head_dim] f32: the rotated k

  // Programmatic dependent launch (sm_90): the kernel may start while the previous kernel on the
  // stream (the q/k/v GEMV) finishes; before waiting for that kernel's results it reads only the
  // step's arrays (uploaded by copies, never written by a kernel) and inv_freq (its RoPE angles'
  // sincosf run then), and it lets the next kernel start early.
  bool programmatic_launch = false;
};

// nvfp4 parts need a global scale in [2^-51, 2^51] (so that every block divisor s·g is in the
// division-free rule's range, quant/e2m1_reciprocal.h); f32, bf16 and fp8 take any g > 0.
inline constexpr float kNvfp4MinGlobalScale = 0x1p-51f;
inline constexpr float kNvfp4MaxGlobalScale = 0x1p51f;

// Validates the shapes and layouts (nibble::Error naming expected vs actual) and launches on
// `stream`. No allocation, no host synchronization: safe inside CUDA-graph capture.
// Supported: head_dim 64, 128, 256; with RoPE (rope_inv_freq set) f32 input only.
void kv_write(const KvWriteParams& params, cudaStream_t stream);

}  // namespace nibble::cuda
