#include "runtime/calibrate.h"

#include <algorithm>
#include <cmath>

#include "common/error.h"
#include "quant/hadamard.h"
#include "runtime/session.h"

namespace nibble::runtime {
namespace {

// Clears the transformer's observer however measure_kv_amax leaves (the model outlives the call).
class ObserverGuard {
 public:
  ObserverGuard(model::Transformer& t, model::Transformer::KvObserver observer) : t_(t) {
    t_.set_kv_observer(std::move(observer));
  }
  ~ObserverGuard() { t_.set_kv_observer({}); }
  ObserverGuard(const ObserverGuard&) = delete;
  ObserverGuard& operator=(const ObserverGuard&) = delete;

 private:
  model::Transformer& t_;
};

}  // namespace

KvAmax measure_kv_amax(LoadedModel& model, std::span<const std::vector<int32_t>> documents,
                       const CalibrateOptions& options) {
  NIBBLE_CHECK(!documents.empty(), "calibration needs at least one document");
  const config::ModelConfig& config = model.config();
  const int64_t layers = model.transformer().kv_geometry().num_layers;
  const int64_t kv_heads = config.num_kv_heads, d = config.head_dim;
  quant::validate_head_dim(quant::KvDtype::kF32, options.rotation, d);
  const bool rotate = options.rotation == quant::Rotation::kHadamard;

  KvAmax amax{.k = std::vector<float>(layers, 0.0f), .v = std::vector<float>(layers, 0.0f), .tokens = 0};
  std::vector<float> host;  // [tokens, kv_heads * head_dim], one of k or v at a time
  auto observe = [&](int64_t layer, backend::Tensor k, backend::Tensor v) {
    NIBBLE_ASSERT(layer >= 0 && layer < layers);
    for (int which = 0; which < 2; ++which) {
      const backend::Tensor t = which == 0 ? k : v;
      NIBBLE_ASSERT(t.cols == kv_heads * d);
      host.resize(static_cast<size_t>(t.numel()));
      model.backend().copy_to_host(host.data(), t.data, t.numel() * static_cast<int64_t>(sizeof(float)));
      float m = 0.0f;
      for (int64_t row = 0; row < t.rows; ++row) {
        for (int64_t h = 0; h < kv_heads; ++h) {
          float* vec = host.data() + row * t.cols + h * d;  // [head_dim]
          if (rotate) quant::hadamard_inplace(vec, static_cast<int>(d));
          for (int64_t i = 0; i < d; ++i) {
            NIBBLE_CHECK(std::isfinite(vec[i]), "calibration: layer {} {} has a non-finite element", layer,
                         which == 0 ? "K" : "V");
            m = std::max(m, std::fabs(vec[i]));
          }
        }
      }
      float& slot = which == 0 ? amax.k[layer] : amax.v[layer];
      slot = std::max(slot, m);
    }
  };
  ObserverGuard guard(model.transformer(), observe);
  for (const std::vector<int32_t>& doc : documents) {
    NIBBLE_CHECK(!doc.empty(), "calibration: a document has no tokens");
    Session session(model, {.kv_dtype = quant::KvDtype::kF32,
                            .rotation = options.rotation,
                            .page_size = options.page_size,
                            .prefill_chunk = options.prefill_chunk,
                            .max_context = static_cast<int64_t>(doc.size())});
    session.prefill(doc);
    amax.tokens += static_cast<int64_t>(doc.size());
  }
  return amax;
}

}  // namespace nibble::runtime
