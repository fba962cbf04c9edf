#pragma once
// The SM clock the GPU is running at right now, measured on the device: a benchmark row reports it
// beside its times, so a number taken while the board held its power cap (and lowered its clocks)
// says so. nvfp4 decode attention is the case that made this necessary: run alone for a second or
// more at 32 x 32K it draws an H200 to its 700 W cap and its SM clock falls from 1980 MHz to
// 1785-1965 (nvidia-smi, 2026-12-02), while fp8 stays at 1980 (docs/PERFORMANCE.md, twenty-sixth round).
#include <cuda_runtime.h>

namespace nibble::bench {

// Median over `sms` blocks (one per SM, thread 0 each) of clock64 cycles per %globaltimer
// nanosecond over a spin of `spin_ns` (>= 100 µs, so the timer's granularity of up to 1 µs costs
// <= 1%), in MHz. Runs on the legacy default stream after a device-wide synchronize: it reads the
// clock the previous work left, not a clock under load.
double sm_clock_mhz(int sms, long long spin_ns = 500000);

}  // namespace nibble::bench
