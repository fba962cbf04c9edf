// NVML's energy counter behind BoardEnergy (board_energy.h). The four NVML entry points used are
// declared here by their documented C signatures (nvmlReturn_t is an int, NVML_SUCCESS is 0).
#include "board_energy.h"

#include <cuda_runtime.h>
#include <dlfcn.h>

#include <utility>

namespace nibble::bench {

namespace {

using NvmlDevice = void*;
using InitFn = int (*)();
using ShutdownFn = int (*)();
using HandleByPciFn = int (*)(const char*, NvmlDevice*);
using EnergyFn = int (*)(NvmlDevice, unsigned long long*);  // millijoules

template <typename Fn>
Fn symbol(void* library, const char* name) {
  return reinterpret_cast<Fn>(dlsym(library, name));
}

}  // namespace

std::optional<BoardEnergy> BoardEnergy::open(int cuda_device) {
  char bus_id[32] = {};
  if (cudaDeviceGetPCIBusId(bus_id, sizeof bus_id, cuda_device) != cudaSuccess) return std::nullopt;
  void* library = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) return std::nullopt;
  const auto init = symbol<InitFn>(library, "nvmlInit_v2");
  const auto shutdown = symbol<ShutdownFn>(library, "nvmlShutdown");
  const auto by_pci = symbol<HandleByPciFn>(library, "nvmlDeviceGetHandleByPciBusId_v2");
  const auto energy = symbol<EnergyFn>(library, "nvmlDeviceGetTotalEnergyConsumption");
  if (init == nullptr || shutdown == nullptr || by_pci == nullptr || energy == nullptr || init() != 0) {
    dlclose(library);
    return std::nullopt;
  }
  NvmlDevice device = nullptr;
  unsigned long long mj = 0;
  if (by_pci(bus_id, &device) != 0 || energy(device, &mj) != 0) {  // no such device, or no counter
    shutdown();
    dlclose(library);
    return std::nullopt;
  }
  BoardEnergy e;
  e.library_ = library;
  e.device_ = device;
  e.read_ = reinterpret_cast<void*>(energy);
  return e;
}

BoardEnergy::BoardEnergy(BoardEnergy&& other) noexcept
    : library_(std::exchange(other.library_, nullptr)),
      device_(std::exchange(other.device_, nullptr)),
      read_(std::exchange(other.read_, nullptr)) {}

BoardEnergy::~BoardEnergy() {
  if (library_ == nullptr) return;
  if (const auto shutdown = symbol<ShutdownFn>(library_, "nvmlShutdown")) shutdown();
  dlclose(library_);
}

std::optional<double> BoardEnergy::joules() const {
  unsigned long long mj = 0;
  if (reinterpret_cast<EnergyFn>(read_)(device_, &mj) != 0) return std::nullopt;
  return static_cast<double>(mj) * 1e-3;
}

}  // namespace nibble::bench
