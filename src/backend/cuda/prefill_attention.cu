// Launches of the chunk-attention kernel and of the tensor-core prefill kernel (validation:
// prefill_attention.cpp). head_dim (and the prefill tile) is the one runtime -> template dispatch,
// here.
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_caps.h"
#include "backend/cuda/prefill_attention.cuh"
#include "backend/cuda/prefill_attention_tc.cuh"
#if NIBBLE_CUDA_SM90A
#include "backend/cuda/prefill_attention_wgmma.cuh"
#endif

#include <algorithm>
#include <string>
#include <tuple>
#include <type_traits>

namespace nibble::cuda::detail {

namespace {

template <int D>
void launch(const ChunkAttentionParams& p, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(p.num_work), static_cast<unsigned>(p.num_q_heads));
  chunk_attention_kernel<D><<<grid, ChunkTile<D>::kThreads, 0, stream>>>(p);
  NIBBLE_CUDA_CHECK_LAUNCH();
}

#if NIBBLE_CUDA_SM90A
inline constexpr bool kWgmmaBuilt = true;
#else
inline constexpr bool kWgmmaBuilt = false;
struct WgmmaPrefillTile {};  // never in a tile list without sm_90a
#endif

// One prefill kernel of tile configuration T on the (heads, sequences, query tiles) grid.
using PrefillKernel = void (*)(PrefillAttentionParams, const __nv_bfloat16*, const __nv_bfloat16*);
template <typename T>
void launch_prefill_kernel(PrefillKernel kernel, const PrefillAttentionParams& p, const __nv_bfloat16* k_bf16,
                           const __nv_bfloat16* v_bf16, cudaStream_t stream) {
  // Above 48 KB of dynamic shared memory needs the opt-in (once per process and configuration).
  static const cudaError_t attribute_status =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, T::kSmemBytes);
  NIBBLE_CUDA_CHECK(attribute_status);
  const int64_t max_new = p.max_new_tokens > 0 ? p.max_new_tokens : p.total_tokens;
  const dim3 grid(static_cast<unsigned>(p.num_q_heads), static_cast<unsigned>(p.num_seqs),
                  static_cast<unsigned>((max_new + T::kRowsQ - 1) / T::kRowsQ));
  kernel<<<grid, T::kThreads, T::kSmemBytes, stream>>>(p, k_bf16, v_bf16);
  NIBBLE_CUDA_CHECK_LAUNCH();
}

template <int D, typename T>
void launch_prefill(const PrefillAttentionParams& p, const __nv_bfloat16* k_bf16, const __nv_bfloat16* v_bf16,
                    cudaStream_t stream) {
#if NIBBLE_CUDA_SM90A
  if constexpr (std::is_same_v<T, WgmmaPrefillTile>) {
    // The wgmma kernel (head_dim 128), on a 9.0 device only.
    if (!device_is_sm90()) throw_unsupported("prefill attention", "tile (the wgmma kernel)", "a 9.0 device", p.tile);
    return launch_prefill_kernel<T>(prefill_attention_wgmma_kernel, p, k_bf16, v_bf16, stream);
  }
#endif
  if constexpr (!std::is_same_v<T, WgmmaPrefillTile>) {
    launch_prefill_kernel<T>(prefill_attention_kernel<D, T>, p, k_bf16, v_bf16, stream);
  }
}

// The tile configurations built, per head_dim: <D, warps, 16-row blocks per warp, keys per tile,
// min blocks/SM, Q in smem, K/V stages, schedule (prefill_tile.cuh: kBaseline unless named)>.
// kDefault (0-based) is the one tile 0 runs (and the backend uses), chosen from
// bench_prefill_attention --tiles on the H200 (2026-11-30, kernel TFLOP/s at seq 2K / 8K, causal,
// 32/8 heads); configurations measured and no longer built (dominated) are listed after a '-':
//   d128: 8x32 smem lazy rescale 329.1/389.5 (default); 8x32 smem 294.0/342.7 (the previous default,
//         kept for comparison); 4x32 smem 32 keys 3 stages pipelined, 2 blocks/SM 313.5/361.0;
//         - 4x32 smem 301.6/341.6; 4x16 regs 267.9/310.1; 8x32 smem 32 keys 3 stages pipelined 268.9/310.4;
//           8x16 regs 252.4/294.8; 4x16 regs 3 stages 255.2/288.5; 4x32 smem 3 stages 229.6/267.1
//   d64:  4x32 regs lazy rescale 289.3/332.8 (default); 4x32 regs 267.6/302.5;
//         - 4x32 smem 256.0/291.4; 4x16 regs 233.8/259.3; 4x32 regs 3 stages 246.2/279.2
//   d256: 4x16 regs 32 keys 270.5/304.5 (default); 4x16 smem 32 keys 252.3/279.0;
//         - 4x16 smem 64 keys 209.9/238.4
// Registers / spill bytes (ptxas -v, sm_90) and SASS instructions of the d128 key loop per 64 keys
// (all include 256 HMMA; "common path": no causal mask, no rescale):
//   8x32 baseline   255 regs / 68 B (8 LDL + 4 STL per tile)   ~1290 common path (exp2f 4 instr., rescale always)
//   8x32 lazy       255 regs / 8 B (1 LDL per tile)             ~840
//   4x32 pipelined  251 regs / 0                                 ~960 (2 x 32-key iterations, +16 LDSM of Q)
// To switch the default after a measurement: set kDefault below (0-based index into List = the
// bench's tile number - 1, the "tile N" comments); every tile in List is tested
// (tests/backend/cuda_prefill), so any of them may be the default.
template <int D>
struct PrefillTiles;
// (d64 on the wgmma kernel, templated on head_dim for a trial: correct, but 256.1 / 312.4 at 2K / 8K
// against tile 1's 290.2 / 333.4 — H200, 2026-12-04 — at half d128's products per key the exp2s of
// the softmax bound it; not built.)
template <>
struct PrefillTiles<64> {
  using List = std::tuple<PrefillTile<64, 4, 2, 64, 2, false, 2, PrefillSchedule::kLazyRescale>,  // tile 1
                          PrefillTile<64, 4, 2, 64, 2>>;                                          // tile 2
  static constexpr int kDefault = 0;
};
// d128 on a 9.0 device of an sm_90a build: the wgmma kernel (prefill_attention_wgmma.cuh), tile 4,
// is the default there (default_tile_index): H200, 2026-12-04, causal, 32 / 8 heads, TFLOP/s against
// tile 1: 8K 483 / 387, 16K 499 / 403, 32K 492 / 408, 2K 355 / 310, 32 x 512 191 / 193.
template <>
struct PrefillTiles<128> {
  using List = std::tuple<PrefillTile<128, 8, 2, 64, 1, true, 2, PrefillSchedule::kLazyRescale>,  // tile 1
                          PrefillTile<128, 8, 2, 64, 1, true>,                                     // tile 2
                          PrefillTile<128, 4, 2, 32, 2, true, 3, PrefillSchedule::kPipelined>     // tile 3
#if NIBBLE_CUDA_SM90A
                          ,
                          WgmmaPrefillTile  // tile 4
#endif
                          >;
  static constexpr int kDefault = 0;  // without the wgmma kernel
  static constexpr int kWgmma = 3;
};
template <>
struct PrefillTiles<256> {
  using List = std::tuple<PrefillTile<256, 4, 1, 32, 1>, PrefillTile<256, 4, 1, 32, 2, true>>;
  static constexpr int kDefault = 0;
};

template <int D, size_t I = 0>
void launch_tile(int index, const PrefillAttentionParams& p, const __nv_bfloat16* k, const __nv_bfloat16* v,
                 cudaStream_t stream) {
  using List = typename PrefillTiles<D>::List;
  if constexpr (I < std::tuple_size_v<List>) {
    if (index == static_cast<int>(I)) return launch_prefill<D, std::tuple_element_t<I, List>>(p, k, v, stream);
    return launch_tile<D, I + 1>(index, p, k, v, stream);
  }
}

// The default tile's 0-based index: the wgmma kernel at d128 where it runs, else kDefault.
template <int D>
int default_tile_index() {
  if constexpr (D == 128 && kWgmmaBuilt) {
    if (device_is_sm90()) return PrefillTiles<128>::kWgmma;
  }
  return PrefillTiles<D>::kDefault;
}

// PrefillAttentionParams::tile (0 = default, else 1-based) -> 0-based index into the list.
template <int D>
int tile_index(int tile) {
  return tile == 0 ? default_tile_index<D>() : tile - 1;
}

template <int D>
int tile_count() {
  return static_cast<int>(std::tuple_size_v<typename PrefillTiles<D>::List>);
}

template <int D, size_t I = 0>
std::string tile_name(int index) {
  using List = typename PrefillTiles<D>::List;
  if constexpr (I < std::tuple_size_v<List>) {
    if (index == static_cast<int>(I)) {
      using T = std::tuple_element_t<I, List>;
      if constexpr (std::is_same_v<T, WgmmaPrefillTile>) {
        return "2 warpgroups x 64 rows (128/block), 128 keys/tile, wgmma (sm_90a), K/V rings of 3 stages, "
               "softmax beside P V";
      } else {
        return std::to_string(T::kWarps) + " warps x " + std::to_string(T::kRowsWarp) + " rows (" +
               std::to_string(T::kRowsQ) + "/block), " + std::to_string(T::kKeys) + " keys/tile, >=" +
               std::to_string(T::kMinBlocks) + " blocks/SM" + (T::kQInSmem ? ", Q in smem" : ", Q in registers") +
               ", " + std::to_string(T::kStages) + " stages" +
               (T::kSchedule == PrefillSchedule::kLazyRescale ? ", lazy rescale"
                : T::kPipelined                               ? ", pipelined (lazy rescale)"
                                                              : "");
      }
    }
    return tile_name<D, I + 1>(index);
  }
  return "?";
}

}  // namespace

void launch_chunk_attention(const ChunkAttentionParams& p, cudaStream_t stream) {
  switch (p.head_dim) {
    case 8: launch<8>(p, stream); break;
    case 16: launch<16>(p, stream); break;
    case 32: launch<32>(p, stream); break;
    case 64: launch<64>(p, stream); break;
    case 96: launch<96>(p, stream); break;
    case 128: launch<128>(p, stream); break;
    case 256: launch<256>(p, stream); break;
    default: throw_unsupported("chunk attention", "head_dim", "8, 16, 32, 64, 96, 128, 256", p.head_dim);
  }
}

void convert_kv_to_bf16(const float* k, const float* v, void* out, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  constexpr int kConvertThreads = 256;
  // Grid-stride loop: a couple of thousand blocks cover any step.
  const int64_t blocks = std::min<int64_t>((2 * n / 4 + kConvertThreads - 1) / kConvertThreads, 2048);
  convert_kv_to_bf16_kernel<<<static_cast<unsigned>(blocks), kConvertThreads, 0, stream>>>(
      k, v, static_cast<__nv_bfloat16*>(out), n);
  NIBBLE_CUDA_CHECK_LAUNCH();
}

void launch_prefill_attention(const PrefillAttentionParams& p, cudaStream_t stream) {
  // 1. K and V rounded to bf16 once per call (every query head of a GQA group and every query
  //    tile then reads the 2-byte copy).
  const int64_t n = p.total_tokens * p.num_kv_heads * p.head_dim;
  auto* kv = static_cast<__nv_bfloat16*>(p.kv_workspace);
  if (!p.kv_workspace_filled) convert_kv_to_bf16(p.k, p.v, kv, n, stream);
  // 2. Attention on the chosen tile (0 = the head_dim's default).
  switch (p.head_dim) {
    case 64: launch_tile<64>(tile_index<64>(p.tile), p, kv, kv + n, stream); break;
    case 128: launch_tile<128>(tile_index<128>(p.tile), p, kv, kv + n, stream); break;
    case 256: launch_tile<256>(tile_index<256>(p.tile), p, kv, kv + n, stream); break;
    default: throw_unsupported("prefill attention", "head_dim", "64, 128, 256", p.head_dim);
  }
}

}  // namespace nibble::cuda::detail

namespace nibble::cuda {

int prefill_tile_count(int64_t head_dim) {
  switch (head_dim) {
    case 64: return detail::tile_count<64>();
    case 128: return detail::tile_count<128>();
    case 256: return detail::tile_count<256>();
    default: return 0;
  }
}

std::string prefill_tile_name(int64_t head_dim, int tile) {
  switch (head_dim) {
    case 64: return detail::tile_name<64>(detail::tile_index<64>(tile));
    case 128: return detail::tile_name<128>(detail::tile_index<128>(tile));
    case 256: return detail::tile_name<256>(detail::tile_index<256>(tile));
    default: return "?";
  }
}

}  // namespace nibble::cuda
