#include "quant/kv_format.h"

#include "common/error.h"

namespace nibble::quant {

const char* kv_dtype_name(KvDtype dtype) {
  switch (dtype) {
    case KvDtype::kF32: return "f32";
    case KvDtype::kBF16: return "bf16";
    case KvDtype::kFP8: return "fp8";
    case KvDtype::kNVFP4: return "nvfp4";
    case KvDtype::kK8V4: return "k8v4";
  }
  return "?";
}

const char* elem_format_name(ElemFormat f) {
  switch (f) {
    case ElemFormat::kF32: return "f32";
    case ElemFormat::kBF16: return "bf16";
    case ElemFormat::kFP8: return "fp8";
    case ElemFormat::kNVFP4: return "nvfp4";
  }
  return "?";
}

KvDtype parse_kv_dtype(std::string_view name) {
  for (KvDtype d : {KvDtype::kF32, KvDtype::kBF16, KvDtype::kFP8, KvDtype::kNVFP4, KvDtype::kK8V4}) {
    if (name == kv_dtype_name(d)) return d;
  }
  NIBBLE_FAIL("unknown KV dtype '{}' (expected one of f32, bf16, fp8, nvfp4, k8v4)", name);
}

ElemFormat parse_elem_format(std::string_view name) {
  for (ElemFormat f : {ElemFormat::kF32, ElemFormat::kBF16, ElemFormat::kFP8, ElemFormat::kNVFP4}) {
    if (name == elem_format_name(f)) return f;
  }
  NIBBLE_FAIL("unknown format '{}' (expected one of f32, bf16, fp8, nvfp4)", name);
}

Rotation parse_rotation(std::string_view name) {
  if (name == "none") return Rotation::kNone;
  if (name == "hadamard") return Rotation::kHadamard;
  NIBBLE_FAIL("unknown rotation '{}' (expected none or hadamard)", name);
}

void validate_head_dim(ElemFormat f, Rotation rotation, int64_t head_dim) {
  NIBBLE_CHECK(head_dim > 0, "head_dim must be positive, got {}", head_dim);
  NIBBLE_CHECK(f != ElemFormat::kNVFP4 || head_dim % kNvfp4Block == 0,
               "nvfp4 needs head_dim to be a multiple of {} (one block scale per 16 elements), got {}",
               kNvfp4Block, head_dim);
  NIBBLE_CHECK(rotation != Rotation::kHadamard || is_power_of_two(head_dim),
               "the Hadamard rotation needs a power-of-two head_dim, got {}", head_dim);
}

void validate_head_dim(KvDtype dtype, Rotation rotation, int64_t head_dim) {
  const KvFormat fmt = kv_format(dtype);
  validate_head_dim(fmt.k, rotation, head_dim);
  validate_head_dim(fmt.v, rotation, head_dim);
}

}  // namespace nibble::quant
