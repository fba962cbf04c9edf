#pragma once
// The extend section of bench_prefill_attention (extend_bench.cpp).
#include <nlohmann/json.hpp>

#include <vector>

#include "decode_bench_args.h"  // ExtendShape
#include "quant/kv_format.h"

namespace nibble::bench {

// Times cuda::extend_attention (tensor cores) on prefix + chunk shapes, head_dim 128 and 64 (and
// 256 unless `quick`), 8 KV heads × each of `groups` query heads per KV head (--extend-gqa; 4 = 32 q
// heads, the default), one sequence, bf16 / fp8 / nvfp4 / k8v4 prefixes, next to
// cuda::chunk_attention (the CUDA-core f32 kernel the extend path used before) where that one runs
// in reasonable time; prints TFLOP/s and the fraction of `gemm_tflops` (cuBLAS, this run); rows
// appended to json["extend"]. `formats`: the prefixes' KV formats, in order (--extend-formats; e.g.
// one, for a profiler).
// `shapes` (--extend-shapes): the prefix + chunk shapes, or empty for the default sweep. Where the
// launcher splits the prefix (extend_split.h: short chunks over long prefixes), the same call is
// also timed unsplit.
void run_extend_bench(double gemm_tflops, bool quick, const std::vector<quant::KvDtype>& formats,
                      const std::vector<int>& groups, const std::vector<ExtendShape>& shapes, nlohmann::json& json);

}  // namespace nibble::bench
