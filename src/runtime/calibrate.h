#pragma once
// Calibration of the per-layer KV global scales: run the model over documents and record, per
// full-attention layer, the largest |element| of K and of V exactly as the cache write would
// quantize them — K after RoPE (and q/k norm), both after the Hadamard rotation when the run uses
// one. `nibble calibrate` turns these into cache::KvScalesFile (cache/kv_scales_file.h).
#include <cstdint>
#include <span>
#include <vector>

#include "quant/kv_format.h"
#include "runtime/loaded_model.h"

namespace nibble::runtime {

struct CalibrateOptions {
  quant::Rotation rotation = quant::Rotation::kNone;
  int64_t prefill_chunk = 0;  // tokens per prefill step; 0 = each document in one step
  int64_t page_size = 16;
};

struct KvAmax {
  std::vector<float> k;  // [full-attention layers]
  std::vector<float> v;  // [full-attention layers]
  int64_t tokens = 0;    // tokens observed
};

// Runs each document (token ids, each within the model's context) through a fresh session with an
// f32 cache, so no layer sees quantization error from the ones before it, and observes K/V through
// Transformer::set_kv_observer. Throws nibble::Error for no documents, an empty document, or a
// non-finite K/V element (naming the layer).
KvAmax measure_kv_amax(LoadedModel& model, std::span<const std::vector<int32_t>> documents,
                       const CalibrateOptions& options);

}  // namespace nibble::runtime
