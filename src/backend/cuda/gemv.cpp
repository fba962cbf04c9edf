// Host entry of gemv.h: checks the shapes and pointers, then launches (gemv_tiles.cu where it applies,
// else gemv.cu).
#include "backend/cuda/gemv.h"

#include "common/error.h"

namespace nibble::cuda {

namespace detail {  // gemv.cu
int gemv_max_smem_bytes();
size_t gemv_smem_bytes(int64_t rows, int64_t k, GemvEpilogue epilogue);
void launch_gemv_bf16(const GemvParams& p, cudaStream_t stream);
bool gemv_tiles_supports(const GemvParams& p);  // gemv_tiles.cu
void launch_gemv_tiles(const GemvParams& p, cudaStream_t stream);
}  // namespace detail

namespace {

bool aligned(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }

}  // namespace

bool gemv_supports(const GemvParams& p) {
  if (p.rows < 1 || p.rows > kGemvMaxRows || p.k <= 0 || p.k % 8 != 0 || p.k >= (int64_t{1} << 31)) return false;
  if (detail::gemv_smem_bytes(p.rows, p.k, p.epilogue) > static_cast<size_t>(detail::gemv_max_smem_bytes()) ||
      !aligned(p.x)) {
    return false;
  }
  if (p.norm_weight != nullptr && !aligned(p.norm_weight)) return false;
  if (p.num_segments < 1 || p.num_segments > kGemvMaxSegments) return false;
  for (int s = 0; s < p.num_segments; ++s) {
    const GemvSegment& seg = p.segments[s];
    if (seg.n <= 0 || seg.n >= (int64_t{1} << 31) || !aligned(seg.w)) return false;
  }
  if (p.epilogue == GemvEpilogue::kSwiGlu) {
    return p.num_segments == 2 && p.segments[0].n == p.segments[1].n && p.segments[0].bias == nullptr &&
           p.segments[1].bias == nullptr && p.residual == nullptr;
  }
  return p.residual == nullptr || p.num_segments == 1;
}

int64_t gemv_split_workspace_bytes(int64_t max_n) {
  const int64_t tiles = max_n / 16;
  return tiles * (kGemvKParts * 128 * int64_t{sizeof(float)} + int64_t{sizeof(uint32_t)});
}

bool gemv_tile_shape(const GemvParams& p) {
  if (gemv_split_k(p.k)) {
    return p.num_segments == 1 && p.epilogue == GemvEpilogue::kStore && p.norm_weight == nullptr &&
           p.segments[0].n % 16 == 0 && p.segments[0].n <= kGemvSplitMaxN;
  }
  if (!gemv_tile_k(p.k)) return false;
  const int segments = p.epilogue == GemvEpilogue::kSwiGlu ? 2 : p.num_segments;
  for (int s = 0; s < segments && s < kGemvMaxSegments; ++s) {
    if (p.segments[s].n % 16 != 0) return false;
  }
  return true;
}

int gemv_faster_rows(const GemvParams& p) {
  int64_t n = 0;
  for (int s = 0; s < p.num_segments && s < kGemvMaxSegments; ++s) n += p.segments[s].n;
  if (p.k > 8192) return gemv_tile_shape(p) ? 8 : 4;  // down
  if (p.norm_weight != nullptr && n > 8 * p.k) return 4;  // the LM head
  return 8;
}

void gemv_bf16(const GemvParams& p, cudaStream_t stream) {
  NIBBLE_CHECK(gemv_supports(p),
               "gemv_bf16: unsupported shape: rows {} (1..{}), k {} (a multiple of 8; bf16(x), padded to whole "
               "batches, <= {} bytes), {} segments (1..{}), 16-byte aligned x, W and norm weight; swiglu needs 2 "
               "equal segments without bias, a residual one segment",
               p.rows, kGemvMaxRows, p.k, detail::gemv_max_smem_bytes(), p.num_segments, kGemvMaxSegments);
  NIBBLE_CHECK(p.x != nullptr, "gemv_bf16: x is null");
  GemvParams q = p;
  for (int s = 0; s < kGemvMaxSegments; ++s) {
    if (s >= p.num_segments) {
      q.segments[s] = GemvSegment{};  // n = 0: no items
      continue;
    }
    NIBBLE_CHECK(p.segments[s].w != nullptr && (p.segments[s].out != nullptr || (s == 1 && p.epilogue ==
                                                                                 GemvEpilogue::kSwiGlu)),
                 "gemv_bf16: segment {} has a null weight or output pointer", s);
  }
  if (detail::gemv_tiles_supports(q)) {
    detail::launch_gemv_tiles(q, stream);
  } else {
    detail::launch_gemv_bf16(q, stream);
  }
}

}  // namespace nibble::cuda
