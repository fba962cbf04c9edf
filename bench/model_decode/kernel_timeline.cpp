#include "kernel_timeline.h"

#include <cupti.h>
#include <cuda_runtime.h>
#include <cxxabi.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>

#include "common/error.h"

namespace nibble::bench {

namespace {

void check_cupti(CUptiResult r, const char* what) {
  if (r != CUPTI_SUCCESS) {
    const char* text = nullptr;
    cuptiGetResultString(r, &text);
    NIBBLE_FAIL("CUPTI {} failed: {}", what, text ? text : "unknown error");
  }
}

// "void nibble::cuda::detail::gemv_kernel<4, true>(nibble::cuda::GemvParams)" -> "gemv_kernel".
std::string short_name(const char* mangled) {
  if (mangled == nullptr) return "?";
  int status = 0;
  char* demangled = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  std::string s = status == 0 && demangled ? demangled : mangled;
  std::free(demangled);
  // Drop "(anonymous namespace)::", cut the parameter list and the template arguments (from the
  // first '<' or '(' on), then the return type and the namespaces.
  for (size_t at; (at = s.find("(anonymous namespace)::")) != std::string::npos;) s.erase(at, 23);
  const size_t cut = s.find_first_of("<(");
  if (cut != std::string::npos) s.resize(cut);
  const size_t space = s.rfind(' ');
  if (space != std::string::npos) s.erase(0, space + 1);
  const size_t colons = s.rfind("::");
  if (colons != std::string::npos) s.erase(0, colons + 2);
  return s;
}

// CUPTI hands its buffers back on its own thread.
std::mutex g_mutex;
std::vector<KernelRecord> g_records;

constexpr size_t kBufferBytes = size_t{8} << 20;

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = *buffer ? kBufferBytes : 0;
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* record = nullptr;
  std::vector<KernelRecord> got;
  while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
    if (record->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) continue;
    const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
    got.push_back({.name = short_name(k->name),
                   .start = k->start,
                   .end = k->end,
                   .correlation = k->correlationId,
                   .graph = k->graphId,
                   .grid = k->gridX * k->gridY * k->gridZ,
                   .block = k->blockX * k->blockY * k->blockZ});
  }
  std::free(buffer);
  std::lock_guard lock(g_mutex);
  g_records.insert(g_records.end(), got.begin(), got.end());
}

}  // namespace

KernelTimeline::KernelTimeline() {
  check_cupti(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed), "activity callbacks");
}

KernelTimeline::~KernelTimeline() {
  cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  cuptiActivityFlushAll(1);
}

void KernelTimeline::start() {
  cudaDeviceSynchronize();
  check_cupti(cuptiActivityFlushAll(1), "flush");
  {
    std::lock_guard lock(g_mutex);
    g_records.clear();
  }
  check_cupti(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "enable kernel activity");
}

std::vector<KernelRecord> KernelTimeline::stop() {
  cudaDeviceSynchronize();
  check_cupti(cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "disable kernel activity");
  check_cupti(cuptiActivityFlushAll(1), "flush");
  std::vector<KernelRecord> out;
  {
    std::lock_guard lock(g_mutex);
    out.swap(g_records);
  }
  std::sort(out.begin(), out.end(), [](const KernelRecord& a, const KernelRecord& b) { return a.start < b.start; });
  return out;
}

}  // namespace nibble::bench
