#pragma once
// The per-format launcher (runtime head_dim / group tile -> template), included only by the
// decode_attention_<format>.cu files, each of which instantiates it for one format pair: this keeps
// every kernel in exactly one translation unit and lets the build compile them in parallel.
#include <mutex>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/decode_attention.cuh"
#include "backend/cuda/decode_attention_tc.cuh"
#include "backend/cuda/decode_plan.h"  // kDecodeMemoryBoundBlocksPerSm
#include "backend/cuda/kernel_launch.h"

namespace nibble::cuda::detail {

template <quant::ElemFormat KF, quant::ElemFormat VF, int kHeadDim, int kMaxG>
void launch_decode_shape(const DecodeKernelArgs& args, dim3 grid, cudaStream_t stream) {
  using T = DecodeTraits<KF, VF, kHeadDim, kMaxG>;
  auto* kernel = &decode_attention_kernel<KF, VF, kHeadDim, kMaxG>;
  static std::once_flag smem_raised;  // one per instantiation
  std::call_once(smem_raised, [&] {
    NIBBLE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, T::kSmemBytes));
  });
  kernel<<<grid, kDecodeThreads, T::kSmemBytes, stream>>>(args);
  NIBBLE_CUDA_CHECK_LAUNCH();
}

template <quant::ElemFormat KF, quant::ElemFormat VF, int kHeadDim>
void launch_decode_head_dim(const DecodeKernelArgs& args, int max_group, dim3 grid, cudaStream_t stream) {
  switch (max_group) {
    case 1: launch_decode_shape<KF, VF, kHeadDim, 1>(args, grid, stream); break;
    case 2: launch_decode_shape<KF, VF, kHeadDim, 2>(args, grid, stream); break;
    case 4: launch_decode_shape<KF, VF, kHeadDim, 4>(args, grid, stream); break;
    case 8: launch_decode_shape<KF, VF, kHeadDim, 8>(args, grid, stream); break;
    default: throw_unsupported("decode attention", "the group tile", "1, 2, 4, 8", max_group);
  }
}

template <quant::ElemFormat KF, quant::ElemFormat VF>
void launch_decode_attention(const DecodeKernelArgs& args, int head_dim, int max_group, dim3 grid,
                             cudaStream_t stream) {
  switch (head_dim) {
    case 64: launch_decode_head_dim<KF, VF, 64>(args, max_group, grid, stream); break;
    case 128: launch_decode_head_dim<KF, VF, 128>(args, max_group, grid, stream); break;
    case 256: launch_decode_head_dim<KF, VF, 256>(args, max_group, grid, stream); break;
    default: throw_unsupported("decode attention", "head_dim", "64, 128, 256", head_dim);
  }
}

// Dynamic shared memory of a build's block: the geometry's, and a pair's inbox (decode_pair_merge.cuh).
template <class T, int kHeadDim, TcItems kItems>
inline constexpr int kTcBlockSmem = T::kSmemBytes + (kItems == TcItems::kPair ? kPairInboxBytes<kHeadDim> : 0);

// The build's kernel, its shared-memory limit raised once (room for the spread launch too).
template <quant::ElemFormat KF, quant::ElemFormat VF, int kHeadDim, int kSteps, bool kFewBlocks, bool kOneP, int kWarps,
          TcItems kItems>
auto* decode_tc_kernel() {
  using T = TcTraits<KF, VF, kHeadDim, kWarps, kSteps>;
  auto* kernel = &decode_attention_tc_kernel<KF, VF, kHeadDim, kSteps, kFewBlocks, kOneP, kWarps, kItems>;
  static std::once_flag smem_raised;  // one per instantiation
  std::call_once(smem_raised, [&] {
    NIBBLE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           spread_smem_bytes(kTcBlockSmem<T, kHeadDim, kItems>,
                                                             static_cast<int>(kDecodeMemoryBoundBlocksPerSm))));
  });
  return kernel;
}

template <quant::ElemFormat KF, quant::ElemFormat VF, int kHeadDim, int kSteps, bool kFewBlocks, bool kOneP, int kWarps,
          TcItems kItems>
void launch_decode_tc_build(const DecodeKernelArgs& args, int max_blocks_per_sm, dim3 grid, cudaStream_t stream) {
  using T = TcTraits<KF, VF, kHeadDim, kWarps, kSteps>;
  auto* kernel = decode_tc_kernel<KF, VF, kHeadDim, kSteps, kFewBlocks, kOneP, kWarps, kItems>();
  const int smem = spread_smem_bytes(kTcBlockSmem<T, kHeadDim, kItems>, max_blocks_per_sm);
  // Programmatic dependent launch: the blocks may be scheduled while the previous kernel of the
  // stream drains; they read the plan and page tables, then wait (griddepcontrol.wait) for that
  // kernel's results before reading q or the pages. kPair: clusters of two consecutive blocks.
  launch_kernel(kernel,
                {.grid = grid, .block = dim3(32 * kWarps), .smem_bytes = static_cast<size_t>(smem),
                 .cluster_x = kItems == TcItems::kPair ? 2u : 1u},
                stream, /*programmatic=*/true, args);
}

// The build with p as one f16 where V is nvfp4 and the caller allows it, else the exact one.
template <quant::ElemFormat KF, quant::ElemFormat VF, int kHeadDim, int kSteps, bool kFewBlocks = false,
          int kWarps = kTcWarps, TcItems kItems = TcItems::kOne>
void launch_decode_tc_steps(const DecodeKernelArgs& args, bool one_p, int max_blocks_per_sm, dim3 grid,
                            cudaStream_t stream) {
  if constexpr (VF == quant::ElemFormat::kNVFP4) {
    if (one_p) {
      launch_decode_tc_build<KF, VF, kHeadDim, kSteps, kFewBlocks, true, kWarps, kItems>(args, max_blocks_per_sm, grid,
                                                                                         stream);
      return;
    }
  }
  launch_decode_tc_build<KF, VF, kHeadDim, kSteps, kFewBlocks, false, kWarps, kItems>(args, max_blocks_per_sm, grid,
                                                                                      stream);
}

// A long-item build of kWarps, with the units loop where the plan's units span sequences, or in
// cluster pairs (items).
template <quant::ElemFormat KF, quant::ElemFormat VF, int kHeadDim, int kWarps>
void launch_decode_tc_long(const DecodeKernelArgs& args, bool one_p, TcItems items, int max_blocks_per_sm, dim3 grid,
                           cudaStream_t stream) {
  switch (items) {
    case TcItems::kOne:
      launch_decode_tc_steps<KF, VF, kHeadDim, 2, false, kWarps>(args, one_p, max_blocks_per_sm, grid, stream);
      break;
    case TcItems::kUnits:
      launch_decode_tc_steps<KF, VF, kHeadDim, 2, false, kWarps, TcItems::kUnits>(args, one_p, max_blocks_per_sm, grid,
                                                                                 stream);
      break;
    case TcItems::kPair:
      launch_decode_tc_steps<KF, VF, kHeadDim, 2, false, kWarps, TcItems::kPair>(args, one_p, max_blocks_per_sm, grid,
                                                                                stream);
      break;
  }
}

// steps: 1, or 2 where tc_steps(KF, VF, kHeadDim) is 2 (only then is the 32-token-step build made,
// and its few-blocks build: few_blocks, DecodeLaunch::tc_few_blocks, and its long-item builds: warps,
// DecodeLaunch::tc_warps; and, of 16-token steps, the few-blocks build in 4- and 8-warp blocks).
// items: how the blocks take the plan's items (TcItems; kUnits and kPair in the long-item builds only).
template <quant::ElemFormat KF, quant::ElemFormat VF, int kHeadDim>
void launch_decode_tc_shape(const DecodeKernelArgs& args, int steps, bool few_blocks, int warps, bool one_p, TcItems items,
                            int max_blocks_per_sm, dim3 grid, cudaStream_t stream) {
  constexpr int kMaxSteps = tc_steps(KF, VF, kHeadDim);
  if (steps < 1 || steps > kMaxSteps) {
    throw_unsupported("decode attention", "chunks per warp step", kMaxSteps == 2 ? "1, 2" : "1", steps);
  }
  if (items != TcItems::kOne && (steps != 2 || few_blocks || (warps != kTcSmWarps && warps != kTcWideWarps))) {
    throw_unsupported("decode attention", "build for spanning units or cluster pairs (warps)", "8, 16", warps);
  }
  if constexpr (kMaxSteps == 2) {
    if (steps == 2) {
      if (few_blocks) {
        launch_decode_tc_steps<KF, VF, kHeadDim, 2, true>(args, one_p, max_blocks_per_sm, grid, stream);
      } else if (warps == kTcSmWarps) {
        launch_decode_tc_long<KF, VF, kHeadDim, kTcSmWarps>(args, one_p, items, max_blocks_per_sm, grid, stream);
      } else if (warps == kTcWideWarps) {
        launch_decode_tc_long<KF, VF, kHeadDim, kTcWideWarps>(args, one_p, items, max_blocks_per_sm, grid, stream);
      } else {
        launch_decode_tc_steps<KF, VF, kHeadDim, 2>(args, one_p, max_blocks_per_sm, grid, stream);
      }
      return;
    }
  }
  if constexpr (kMaxSteps == 2) {
    if (few_blocks && warps == kTcWideWarps) {
      launch_decode_tc_steps<KF, VF, kHeadDim, 1, true, kTcWideWarps>(args, one_p, max_blocks_per_sm, grid, stream);
      return;
    }
    if (few_blocks) {
      launch_decode_tc_steps<KF, VF, kHeadDim, 1, true>(args, one_p, max_blocks_per_sm, grid, stream);
      return;
    }
  }
  launch_decode_tc_steps<KF, VF, kHeadDim, 1>(args, one_p, max_blocks_per_sm, grid, stream);
}

template <quant::ElemFormat KF, quant::ElemFormat VF>
void launch_decode_attention_tc(const DecodeKernelArgs& args, int head_dim, int steps, bool few_blocks, int warps,
                                bool one_p, TcItems items, int max_blocks_per_sm, dim3 grid, cudaStream_t stream) {
  switch (head_dim) {
    case 64:
      launch_decode_tc_shape<KF, VF, 64>(args, steps, few_blocks, warps, one_p, items, max_blocks_per_sm, grid, stream);
      break;
    case 128:
      launch_decode_tc_shape<KF, VF, 128>(args, steps, few_blocks, warps, one_p, items, max_blocks_per_sm, grid,
                                          stream);
      break;
    case 256:
      launch_decode_tc_shape<KF, VF, 256>(args, steps, few_blocks, warps, one_p, items, max_blocks_per_sm, grid,
                                          stream);
      break;
    default: throw_unsupported("decode attention", "head_dim", "64, 128, 256", head_dim);
  }
}

// Clusters of two blocks of the kPair build that fit the device at once (decode_tc_pair_clusters),
// for the device current at the first query (a process runs one device).
// Queried with the kernel's own shared memory (its limit raised as decode_tc_kernel raises it): the
// spread launch's larger share (at most kDecodeMemoryBoundBlocksPerSm per SM) holds the same blocks
// per SM as the long-item builds' registers allow.
template <quant::ElemFormat KF, quant::ElemFormat VF, int kHeadDim, int kWarps, bool kOneP>
int decode_tc_pair_clusters_of() {
  static int clusters = -1;
  static std::once_flag queried;
  std::call_once(queried, [] {
    using T = TcTraits<KF, VF, kHeadDim, kWarps, 2>;  // the pair builds' 32-token steps
    auto* kernel = &decode_attention_tc_kernel<KF, VF, kHeadDim, 2, false, kOneP, kWarps, TcItems::kPair>;
    cudaLaunchAttribute attribute[2];
    const cudaLaunchConfig_t config =
        launch_config({.grid = dim3(2), .block = dim3(32 * kWarps),
                       .smem_bytes = static_cast<size_t>(kTcBlockSmem<T, kHeadDim, TcItems::kPair>),
                       .cluster_x = 2},
                      nullptr, /*programmatic=*/false, attribute);
    // A device that cannot run clusters (or no device: a host-only caller) holds none: the launch
    // then takes the merge kernel.
    const int smem_limit =
        spread_smem_bytes(kTcBlockSmem<T, kHeadDim, TcItems::kPair>, static_cast<int>(kDecodeMemoryBoundBlocksPerSm));
    if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_limit) != cudaSuccess ||
        cudaOccupancyMaxActiveClusters(&clusters, kernel, &config) != cudaSuccess) {
      (void)cudaGetLastError();  // not sticky: clear it for the next check
      clusters = 0;
    }
  });
  return clusters;
}

template <quant::ElemFormat KF, quant::ElemFormat VF>
int decode_tc_pair_clusters(int head_dim, int warps, bool one_p) {
  if constexpr (tc_steps(KF, VF, 128) == 2) {
    if (warps != kTcSmWarps && warps != kTcWideWarps) return 0;
    auto of_head_dim = [&]<int kHeadDim>() {
      if (warps == kTcSmWarps) {
        return one_p ? decode_tc_pair_clusters_of<KF, VF, kHeadDim, kTcSmWarps, true>()
                     : decode_tc_pair_clusters_of<KF, VF, kHeadDim, kTcSmWarps, false>();
      }
      return one_p ? decode_tc_pair_clusters_of<KF, VF, kHeadDim, kTcWideWarps, true>()
                   : decode_tc_pair_clusters_of<KF, VF, kHeadDim, kTcWideWarps, false>();
    };
    if (head_dim == 64) return of_head_dim.template operator()<64>();
    if (head_dim == 128) return of_head_dim.template operator()<128>();
  }
  return 0;
}

}  // namespace nibble::cuda::detail
