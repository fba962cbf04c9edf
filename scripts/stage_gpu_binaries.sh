#!/usr/bin/env bash
# Builds the GPU test suite, the benchmarks and `nibble` HERE (a Debian machine with the CUDA
# toolkit, no GPU needed) and packs them into one tarball that scripts/gpu_check.sh runs on the GPU
# machine without building anything (NIBBLE_PREBUILT=...). A build on the GPU machine costs minutes
# of its time; this packs ~14 MB instead.
#
#   scripts/stage_gpu_binaries.sh [BUILD_DIR] [OUT_DIR]      # defaults: build-gpu-stage, build-gpu-stage/carry
#   JOBS=2 CUDA_ARCH=90a
#
# The tarball holds bin/ (stripped binaries), lib/ (the shared libraries the GPU machine may lack:
# fmt, pcre2, OpenBLAS and its Fortran runtime, cpp-httplib), tests.txt (the gpu-labelled test
# binaries, from ctest) and build.txt (commit, compiler, CUDA version). The test binaries read
# fixtures through the absolute source path compiled into them (NIBBLE_SOURCE_DIR), so gpu_check.sh
# links that path to the repository root on the GPU machine.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BUILD="${1:-$ROOT/build-gpu-stage}"
OUT_DIR="${2:-$BUILD/carry}"
JOBS="${JOBS:-2}"
targets=(test_cuda_kv_write test_cuda_decode_attention test_cuda_decode_plan test_cuda_ops test_cuda_chunk_attention
         test_cuda_model test_cuda_graph test_cuda_sampling test_cuda_engine test_cuda_prefill_attention test_cuda_extend_attention
         bench_decode_attention bench_model_decode bench_prefill_attention nibble)

# Every file compiled alone (no unity build): the staged build rebuilds only what changed, and it
# checks that each file includes what it uses, which CI's unity builds would not notice.
cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DNIBBLE_CUDA=ON -DNIBBLE_UNITY_BUILD=OFF \
  -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCH:-90a}" > /dev/null
ninja -C "$BUILD" -j "$JOBS" "${targets[@]}"

stage="$BUILD/stage"
rm -rf "$stage" && mkdir -p "$stage/bin" "$stage/lib" "$OUT_DIR"
# The gpu-labelled tests' binaries (gtest_discover_tests registers one ctest entry per test case).
(cd "$BUILD" && ctest --show-only=json-v1 -L gpu) | python3 -c '
import json, sys
seen = []
for t in json.load(sys.stdin)["tests"]:
    b = t["command"][0]
    if b not in seen:
        seen.append(b)
print("\n".join(seen))' > "$stage/test_paths.txt"
[[ -s "$stage/test_paths.txt" ]] || { echo "stage_gpu_binaries: ctest lists no gpu-labelled test" >&2; exit 1; }
while read -r path; do
  strip -o "$stage/bin/$(basename "$path")" "$path"
  basename "$path" >> "$stage/tests.txt"
done < "$stage/test_paths.txt"
rm "$stage/test_paths.txt"
for b in bench/decode_attention/bench_decode_attention bench/model_decode/bench_model_decode \
         bench/prefill_attention/bench_prefill_attention apps/nibble/nibble; do
  strip -o "$stage/bin/$(basename "$b")" "$BUILD/$b"
done
# Shared libraries the binaries load, except glibc, libstdc++, CUDA's and the system libraries every
# distribution has under the same soname (OpenSSL 3, zlib, brotli: cpp-httplib's), which would
# otherwise shadow the GPU machine's own for every process of the run.
ldd "$stage"/bin/* | awk '/=>/ {print $3}' | sort -u |
  grep -Ev '/lib(c|m|dl|rt|pthread|stdc\+\+|gcc_s|cuda|cudart|cublas|cublasLt|nccl|ssl|crypto|z|brotli[a-z]*)\.so' |
  grep -v '/usr/local/cuda' | xargs -r -I{} cp -L {} "$stage/lib/"
{
  echo "commit $(git -C "$ROOT" rev-parse HEAD)$(git -C "$ROOT" diff --quiet || echo ' + uncommitted changes')"
  echo "built $(date -u +%FT%TZ) on $(. /etc/os-release && echo "$PRETTY_NAME")"
  echo "$(c++ --version | head -1); $(nvcc --version | tail -2 | head -1); sm_${CUDA_ARCH:-90a}"
} > "$stage/build.txt"
# One xz stream with a dictionary larger than the tar: every binary links the same CUDA backend
# (~12 MB of device code each), which the window then stores once. 2026-12-03, 15 binaries and 7
# libraries (246 MB): 71 MB with xz's default window per thread, 13.4 MB like this (~2 minutes of
# one core; decompressing needs 512 MiB), under the device tool's 64 MiB carry limit.
tar -C "$stage" -cf - . | xz -T1 -6 --lzma2=preset=6,dict=512MiB > "$OUT_DIR/gpu-binaries.tar.xz"
echo "stage_gpu_binaries: $(du -h "$OUT_DIR/gpu-binaries.tar.xz" | cut -f1) $OUT_DIR/gpu-binaries.tar.xz" \
  "($(wc -l < "$stage/tests.txt") test binaries, $(ls "$stage/lib" | wc -l) libraries)"
