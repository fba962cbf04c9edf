#pragma once
// The board's energy counter, read through NVML (libnvidia-ml.so.1, the driver's library, loaded at
// run time: the build needs no NVML headers and a machine without the library just has no reading).
// bench_decode_attention --sustain divides the energy of its sustained window by the calls in it:
// joules per decode call and the board's mean power, per format (docs/PERFORMANCE.md, twenty-sixth
// round). The counter is the whole board's (GPU, HBM, the rest), in millijoules since the driver
// loaded.
#include <optional>

namespace nibble::bench {

class BoardEnergy {
 public:
  // The counter of CUDA device `cuda_device` (matched by PCI bus id), or nullopt where NVML, the
  // device or its energy counter is not available.
  static std::optional<BoardEnergy> open(int cuda_device);
  ~BoardEnergy();
  BoardEnergy(BoardEnergy&& other) noexcept;
  BoardEnergy& operator=(BoardEnergy&&) = delete;
  BoardEnergy(const BoardEnergy&) = delete;

  // Joules since the driver loaded, or nullopt if the read failed.
  std::optional<double> joules() const;

 private:
  BoardEnergy() = default;
  void* library_ = nullptr;  // dlopen handle; nvmlShutdown and dlclose at destruction
  void* device_ = nullptr;   // nvmlDevice_t
  void* read_ = nullptr;     // nvmlDeviceGetTotalEnergyConsumption
};

}  // namespace nibble::bench
