// Fuzz target: the Prometheus text reader of `nibble bench` on arbitrary bytes. It must never crash
// or throw; every count it returns is finite, and a KV usage lies in [0, 1].
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string_view>

#include "bench/server_metrics.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using nibble::bench::ServerLoad;
  const ServerLoad load = nibble::bench::parse_server_load(std::string_view(reinterpret_cast<const char*>(data), size));
  for (const std::optional<double>& v : {load.running, load.waiting, load.waiting_for_pages,
                                         load.waiting_for_running_cap, load.kv_usage, load.preemptions}) {
    if (v && !std::isfinite(*v)) std::abort();
  }
  if (load.kv_usage && !(*load.kv_usage >= 0 && *load.kv_usage <= 1)) std::abort();
  return 0;
}
