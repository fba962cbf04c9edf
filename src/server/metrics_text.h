#pragma once
// /metrics: the engine's metrics in the Prometheus text exposition format (version 0.0.4):
// "# HELP", "# TYPE", then samples; histograms as cumulative _bucket{le="..."} series ending in
// le="+Inf", then _sum and _count.
#include <string>

#include "engine/metrics.h"

namespace nibble::server {

std::string metrics_text(const engine::EngineMetrics& metrics, const std::string& model_name);

}  // namespace nibble::server
