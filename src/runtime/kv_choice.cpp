#include "runtime/kv_choice.h"

#include "common/error.h"

namespace nibble::runtime {
namespace {

bool quantizes(quant::KvDtype d) {
  return d == quant::KvDtype::kFP8 || d == quant::KvDtype::kNVFP4 || d == quant::KvDtype::kK8V4;
}

}  // namespace

KvChoice resolve_kv_choice(std::string_view dtype_flag, std::string_view rotate_flag, int64_t head_dim) {
  NIBBLE_CHECK(head_dim > 0, "head_dim must be positive, got {}", head_dim);
  KvChoice c{};
  if (dtype_flag == "auto") {
    c.dtype = quant::is_power_of_two(head_dim) ? kRecommendedDtype : kUnrotatedDtype;
  } else {
    c.dtype = quant::parse_kv_dtype(dtype_flag);
  }
  if (rotate_flag == "auto") {
    c.rotation = quantizes(c.dtype) && quant::is_power_of_two(head_dim) ? quant::Rotation::kHadamard
                                                                       : quant::Rotation::kNone;
  } else {
    c.rotation = quant::parse_rotation(rotate_flag);
  }
  quant::validate_head_dim(c.dtype, c.rotation, head_dim);
  return c;
}

}  // namespace nibble::runtime
