#pragma once
// A test kernel standing in for the step's KV write in front of decode attention: launched plainly,
// it lets the next kernel of the stream start at once (griddepcontrol.launch_dependents), waits
// `delay_ns`, then copies byte ranges of `src` into `dst`. A decode kernel launched programmatically
// behind it (as every decode launch is) that reads those bytes before its griddepcontrol.wait sees
// them unwritten.
#include <cuda_runtime.h>

#include <cstdint>

namespace nibble::cuda::test {

// ranges: device array of [count][2] int64 (byte offset, length), the same offsets in src and dst.
void launch_late_writer(uint8_t* dst, const uint8_t* src, const int64_t* ranges, int count, uint64_t delay_ns,
                        cudaStream_t stream);

}  // namespace nibble::cuda::test
