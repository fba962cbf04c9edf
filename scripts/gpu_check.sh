#!/usr/bin/env bash
# One command on the GPU machine: configure + build with the CUDA backend, run the GPU test suite,
# compute-sanitizer memcheck and racecheck on a smaller sweep, the decode/write benchmark and the
# torch SDPA baseline. Logs go to ${OUT:-/tmp/out}. Exits non-zero if the build or a test fails
# (the benchmarks still run after a test failure, so one call gives all the evidence).
#
#   scripts/gpu_check.sh                 # from the repository root
#   NIBBLE_PREBUILT=build-gpu-stage/carry/gpu-binaries.tar.xz scripts/gpu_check.sh
#                                        # no build: the binaries scripts/stage_gpu_binaries.sh packed
#   NIBBLE_DEPS_PREFIX=/path/to/prefix   # extra CMake prefix path (fmt, CLI11, nlohmann_json, GTest)
#   NIBBLE_BUILD_DIR=build-gpu NIBBLE_BENCH_ARGS=--quick JOBS=16 CTEST_JOBS=8
#   NIBBLE_PREFILL_ARGS=--tiles NIBBLE_MODEL_BENCH_ARGS="--steps 16"   # the other two benchmarks' options
#   NIBBLE_EXTEND_ARGS=" "               # the extend section's (default --quick; a space: every shape)
#   NIBBLE_SKIP_SANITIZER=1 NIBBLE_SKIP_TESTS=1   # timing-only runs
#   NIBBLE_SKIP_BENCH=1                  # correctness only (e.g. while something else uses the GPU)
#   TEST_TIMEOUT=300                     # seconds per test binary (prebuilt runs)
#   SANITIZER_TIMEOUT=300 BENCH_TIMEOUT=540   # seconds per sanitizer run / benchmark program: a kernel
#                                        # that hangs ends as a named failure, not the device call's limit
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT="${OUT:-/tmp/out}"
BUILD="${NIBBLE_BUILD_DIR:-$ROOT/build-gpu}"
JOBS="${JOBS:-$(nproc)}"
mkdir -p "$OUT"
status=0
log() { echo "[gpu_check] $*" | tee -a "$OUT/summary.txt"; }

nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1 || log "nvidia-smi failed (no GPU?)"
if [[ -n "${NIBBLE_PREBUILT:-}" ]]; then
  PRE=/tmp/nibble-prebuilt
  rm -rf "$PRE" && mkdir -p "$PRE"
  if ! xz -dc "$NIBBLE_PREBUILT" | tar -C "$PRE" -xf -; then
    log "cannot unpack $NIBBLE_PREBUILT"; exit 1
  fi
  export LD_LIBRARY_PATH="/usr/local/cuda/lib64:$PRE/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  missing=$(ldd "$PRE"/bin/* 2> /dev/null | grep "not found" | sort -u)
  [[ -n "$missing" ]] && { log "prebuilt binaries miss libraries:"; echo "$missing" | tee -a "$OUT/summary.txt"; exit 1; }
  # The test binaries read fixtures through the source path compiled into them (/work/main).
  [[ -e /work/main ]] || { mkdir -p /work && ln -s "$ROOT" /work/main; }
  log "prebuilt: $(head -1 "$PRE/build.txt")"
  cp "$PRE/build.txt" "$OUT/prebuilt_build.txt"
  BIN_DECODE_BENCH="$PRE/bin/bench_decode_attention"
  BIN_MODEL_BENCH="$PRE/bin/bench_model_decode"
  BIN_PREFILL_BENCH="$PRE/bin/bench_prefill_attention"
  BIN_DECODE_TEST="$PRE/bin/test_cuda_decode_attention"
  BIN_WRITE_TEST="$PRE/bin/test_cuda_kv_write"
  BIN_EXTEND_TEST="$PRE/bin/test_cuda_extend_attention"
  BIN_PREFILL_TEST="$PRE/bin/test_cuda_prefill_attention"
else
  cmake_args=(-S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DNIBBLE_CUDA=ON)
  [[ -n "${NIBBLE_DEPS_PREFIX:-}" ]] && cmake_args+=("-DCMAKE_PREFIX_PATH=${NIBBLE_DEPS_PREFIX}")
  command -v ninja > /dev/null || cmake_args[5]="Unix Makefiles"
  # The GPU machine has no cpp-httplib package; the targets built here (kernels, their tests and
  # benchmark) do not use it, so the server/bench CMake lists get a stand-in .pc (header path only)
  # when pkg-config cannot find the real one.
  if ! pkg-config --exists cpp-httplib 2> /dev/null; then
    mkdir -p "$OUT/pkgconfig"
    printf 'Name: cpp-httplib\nDescription: stand-in for configure only\nVersion: 0.11.4\nCflags: -I%s/include\nLibs:\n' \
      "${NIBBLE_DEPS_PREFIX:-/usr}" > "$OUT/pkgconfig/cpp-httplib.pc"
    export PKG_CONFIG_PATH="$OUT/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
  fi
  if ! cmake "${cmake_args[@]}" > "$OUT/configure.log" 2>&1; then
    log "configure FAILED (see configure.log)"; tail -30 "$OUT/configure.log"; exit 1
  fi
  targets=(test_cuda_kv_write test_cuda_decode_attention test_cuda_decode_plan test_cuda_ops test_cuda_chunk_attention test_cuda_model bench_decode_attention
           test_cuda_graph test_cuda_sampling test_cuda_engine bench_model_decode test_cuda_extend_attention)
  # Benchmarks other engineers add: built and run when their folder exists.
  [[ -f "$ROOT/bench/prefill_attention/CMakeLists.txt" ]] && targets+=(bench_prefill_attention)
  if ! cmake --build "$BUILD" --target "${targets[@]}" -j "$JOBS" > "$OUT/build.log" 2>&1; then
    log "build FAILED (see build.log)"; grep -E "error" "$OUT/build.log" | head -30; exit 1
  fi
  log "build OK"
  # Registers / shared memory / stack of every decode kernel (ptxas's numbers, read back from the objects).
  if command -v cuobjdump > /dev/null; then
    for o in "$BUILD"/src/backend/cuda/CMakeFiles/nibble_backend_cuda.dir/decode_attention_*.cu.o; do
      cuobjdump --dump-resource-usage "$o" 2> /dev/null | grep -E "Function|REG" | paste - - | sed -E 's/Resource usage://'
    done > "$OUT/resource_usage.txt"
    log "resource usage: $(grep -c REG "$OUT/resource_usage.txt") kernels in resource_usage.txt"
  fi
  BIN_DECODE_BENCH="$BUILD/bench/decode_attention/bench_decode_attention"
  BIN_MODEL_BENCH="$BUILD/bench/model_decode/bench_model_decode"
  BIN_PREFILL_BENCH="$BUILD/bench/prefill_attention/bench_prefill_attention"
  BIN_DECODE_TEST="$BUILD/tests/backend/cuda_attention/test_cuda_decode_attention"
  BIN_WRITE_TEST="$BUILD/tests/backend/cuda_kv_write/test_cuda_kv_write"
  BIN_EXTEND_TEST="$BUILD/tests/backend/cuda_prefill/test_cuda_extend_attention"
  BIN_PREFILL_TEST="$BUILD/tests/backend/cuda_prefill/test_cuda_prefill_attention"
fi

if [[ -n "${NIBBLE_SKIP_TESTS:-}" ]]; then
  log "GPU tests skipped (NIBBLE_SKIP_TESTS)"
elif [[ -n "${NIBBLE_PREBUILT:-}" ]]; then
  # One process per test binary (ctest's per-case processes need the build tree), CTEST_JOBS at a
  # time on the one GPU (correctness tests only; the benchmarks below run alone).
  mapfile -t tests < "$PRE/tests.txt"
  for ((i = 0; i < ${#tests[@]}; i += ${CTEST_JOBS:-1})); do
    for t in "${tests[@]:i:${CTEST_JOBS:-1}}"; do
      (timeout "${TEST_TIMEOUT:-300}" "$PRE/bin/$t" --gtest_brief=1 > "$OUT/$t.log" 2>&1; echo "rc $?" >> "$OUT/$t.log") &
    done
    wait
  done
  for t in "${tests[@]}"; do
    if [[ "$(tail -1 "$OUT/$t.log")" == "rc 0" ]]; then
      log "$t: PASSED ($(grep -Eo '[0-9]+ tests? from [0-9]+ test suites? ran.*' "$OUT/$t.log" | head -1))"
    else
      status=1; log "$t: FAILED ($(tail -1 "$OUT/$t.log"), see $t.log)"
      grep -E "^\[  FAILED" "$OUT/$t.log" | head -10 | tee -a "$OUT/summary.txt"
    fi
  done
  for t in "${tests[@]}"; do cat "$OUT/$t.log"; done > "$OUT/ctest_gpu.log"
elif (cd "$BUILD" && ctest -L gpu --output-on-failure -j "${CTEST_JOBS:-1}" --timeout 1800) > "$OUT/ctest_gpu.log" 2>&1; then
  log "ctest -L gpu: PASSED ($(grep -Eo '[0-9]+% tests passed.*' "$OUT/ctest_gpu.log"))"
else
  status=1; log "ctest -L gpu: FAILED ($(grep -Eo '[0-9]+% tests passed.*' "$OUT/ctest_gpu.log"))"
fi
grep -c "Skipped" "$OUT/ctest_gpu.log" | xargs -I{} echo "[gpu_check] skipped tests: {}" | tee -a "$OUT/summary.txt"

if [[ -n "${NIBBLE_SKIP_BENCH:-}" ]]; then
  log "benchmarks skipped (NIBBLE_SKIP_BENCH)"
else
  timeout "${BENCH_TIMEOUT:-540}" "$BIN_DECODE_BENCH" ${NIBBLE_BENCH_ARGS:-} --json "$OUT/bench_decode_attention.json" \
    > "$OUT/bench_decode_attention.txt" 2>&1 || { status=1; log "bench_decode_attention FAILED"; }
  log "bench: $OUT/bench_decode_attention.txt"
  if python3 -c "import torch; assert torch.cuda.is_available()" 2> /dev/null; then
    python3 "$ROOT/scripts/bench_torch_sdpa.py" ${NIBBLE_BENCH_ARGS:-} --json "$OUT/bench_torch_sdpa.json" \
      > "$OUT/bench_torch_sdpa.txt" 2>&1 || log "torch SDPA baseline FAILED (see bench_torch_sdpa.txt)"
  else
    log "torch with CUDA not available: SDPA baseline skipped"
  fi
fi
SAN=/usr/local/cuda/bin/compute-sanitizer
command -v compute-sanitizer > /dev/null && SAN=compute-sanitizer
small_decode='Formats/CudaDecodeSweep.*/nvfp4_d128_gqa4:Formats/CudaDecodeSweep.*/nvfp4_d64_gqa4:Formats/CudaDecodeSweep.*/f32_d128_gqa4:Formats/CudaDecodeSweep.*/bf16_d128_gqa8:Formats/CudaDecodeSweep.*/k8v4_d64_gqa8:Formats/CudaDecodeFormat.RotatedCacheRotatesQAndOutputInside/bf16:Formats/CudaDecodeFormat.PrefixReadyLastTokenCopiedAfterTheWait/nvfp4:Formats/CudaDecodeFormat.PrefixReadyLastTokenCopiedAfterTheWait/bf16:CudaDecodeNvfp4Steps.LongItemBuildsMatchTheOracle:CudaDecodeNvfp4Steps.SpanningUnitsMatchTheOracle:CudaDecodeNvfp4Steps.MixedContextsMatchTheOracle:CudaDecodeNvfp4Steps.ShortItemBuildMatchesTheOracle'
small_write='Sweep/CudaKvWrite.*/nvfp4_d128_rot_p16_inf32:Sweep/CudaKvWrite.*/k8v4_d256_norot_p64_inbf16:FourOverSix/CudaKvWrite.*/nvfp4_d128_rot_p16_inf32_4over6'
small_extend='CudaExtendAttention.SmallStepsForSanitizers:CudaExtendTileConversion.*'
small_prefill='CudaPrefillAttention.ClimbingScoresRescaleMidSequence'  # every tile, the wgmma one included
for tool in memcheck racecheck; do
  [[ -n "${NIBBLE_SKIP_SANITIZER:-}" ]] && break
  ok=1
  timeout "${SANITIZER_TIMEOUT:-300}" "$SAN" --tool "$tool" --error-exitcode 99 "$BIN_DECODE_TEST" \
    --gtest_filter="$small_decode" > "$OUT/sanitizer_${tool}_decode.log" 2>&1 || ok=0
  timeout "${SANITIZER_TIMEOUT:-300}" "$SAN" --tool "$tool" --error-exitcode 99 "$BIN_WRITE_TEST" \
    --gtest_filter="$small_write" > "$OUT/sanitizer_${tool}_write.log" 2>&1 || ok=0
  if [[ -x "$BIN_EXTEND_TEST" ]]; then
    timeout "${SANITIZER_TIMEOUT:-300}" "$SAN" --tool "$tool" --error-exitcode 99 "$BIN_EXTEND_TEST" \
      --gtest_filter="$small_extend" > "$OUT/sanitizer_${tool}_extend.log" 2>&1 || ok=0
  fi
  if [[ -x "$BIN_PREFILL_TEST" ]]; then
    timeout "${SANITIZER_TIMEOUT:-300}" "$SAN" --tool "$tool" --error-exitcode 99 "$BIN_PREFILL_TEST" \
      --gtest_filter="$small_prefill" > "$OUT/sanitizer_${tool}_prefill.log" 2>&1 || ok=0
  fi
  if [[ $ok == 1 ]]; then log "compute-sanitizer $tool: clean"; else status=1; log "compute-sanitizer $tool: ERRORS (see sanitizer_${tool}_*.log)"; fi
done

if [[ -z "${NIBBLE_SKIP_BENCH:-}" && -x "$BIN_PREFILL_BENCH" ]]; then
  timeout "${BENCH_TIMEOUT:-540}" "$BIN_PREFILL_BENCH" ${NIBBLE_PREFILL_ARGS:-} > "$OUT/bench_prefill_attention.txt" 2>&1 \
    || { status=1; log "bench_prefill_attention FAILED"; }
  log "bench: $OUT/bench_prefill_attention.txt"
  # Extend attention (a chunk over a cached prefix, every prefix format), the same program.
  timeout "${BENCH_TIMEOUT:-540}" "$BIN_PREFILL_BENCH" --extend ${NIBBLE_EXTEND_ARGS:---quick} > "$OUT/bench_extend_attention.txt" 2>&1 \
    || { status=1; log "bench_prefill_attention --extend FAILED"; }
  log "bench: $OUT/bench_extend_attention.txt"
fi
# Batch-1 decode of a Llama-3-8B-shaped model (random bf16 weights, ~16 GB on the GPU), graphs on/off.
if [[ -z "${NIBBLE_SKIP_BENCH:-}" ]]; then
  timeout "${BENCH_TIMEOUT:-540}" "$BIN_MODEL_BENCH" ${NIBBLE_MODEL_BENCH_ARGS:-} > "$OUT/bench_model_decode.txt" 2>&1 \
    || { status=1; log "bench_model_decode FAILED"; }
  log "bench: $OUT/bench_model_decode.txt"
fi

log "done, status $status; logs in $OUT"
exit $status
