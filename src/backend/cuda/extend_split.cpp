// The extend prefix split's rule (extend_split.h).
#include "backend/cuda/extend_split.h"

#include <algorithm>

namespace nibble::cuda {

int extend_prefix_splits(const ExtendSplitInputs& in) {
  if (in.work_blocks <= 0 || in.slots <= 0) return 1;
  int64_t s = in.slots / in.work_blocks;                        // one wave
  s = std::min(s, in.max_prefix_tiles / kExtendMinSplitTiles);  // parts worth their fixed cost
  s = std::min(s, in.records / in.work_blocks);                 // the workspace
  s = std::min<int64_t>(s, kExtendMaxSplits);
  return static_cast<int>(std::max<int64_t>(s, 1));
}

}  // namespace nibble::cuda
