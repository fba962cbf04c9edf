#!/usr/bin/env bash
# The KV-format accuracy study of docs/ACCURACY.md in one command on the GPU machine (its files are
# wiped between calls, so the model is trained and studied in the same call):
#   1. nibble: a prebuilt binary (NIBBLE_BIN; docs/ACCURACY.md, "Next run", packs one) if it runs
#      here, else the `nibble` target built in the background (build-gpu, JOBS cores) while the GPU
#      trains. As of 2026-11-29 that build fails to link: .devdeps' cpp-httplib is a header-only
#      stand-in and src/server needs the compiled library, so pass NIBBLE_BIN.
#   2. the eval model: scripts/train_eval_model.py (TRAIN_ARGS)
#   3. nibble calibrate on the training text, without and with the Hadamard rotation
#   4. nibble eval --device cuda --weights f32, several invocations at once on the one GPU (each
#      compares its configurations with its own f32 reference run on the same items), in two rounds
#      bounded by STUDY_SECONDS:
#        round 1, perplexity/KL/top-1:
#          ppl_g1a     bf16, fp8, nvfp4 (g = 1: SGLang's recipe)
#          ppl_g1b     nvfp4+hadamard, k8v4, k8v4+hadamard (g = 1)
#          ppl_cal     fp8, nvfp4, k8v4 with --kv-scales (calibrated, no rotation)
#          ppl_calhad  nvfp4+hadamard, k8v4+hadamard with --kv-scales (calibrated with the rotation)
#          cpu6, cpu4o6  on the CPU backend (4-over-6 is CPU-only), a reduced set: nvfp4,
#                      nvfp4+hadamard, k8v4 under --nvfp4-scale-rule 6 and 4over6
#        round 2, retrieval: pk_g1a, pk_g1b (passkey), mn_g1a, mn_g1b (multineedle)
#   5. $OUT/study.tar.gz: every report directory, the scale files, the model's recipe.json and the logs
#
#   OUT=/tmp/out scripts/accuracy_study.sh            # from the repository root
# Environment (defaults in brackets):
#   NIBBLE_BIN        prebuilt nibble [build it]     NIBBLE_DEPS_PREFIX  CMake prefix for the build [.devdeps]
#   TRAIN_ARGS        extra train_eval_model.py arguments ["--max-seconds 100"]
#   PPL, RETRIEVAL, CHUNK  the perplexity / retrieval options of the GPU evals, the prefill chunk [512]
#   CPU_EVAL_COMMON   options of the CPU evals
#   STUDY_SECONDS     seconds after the start by which the evals must end and the packing starts [420]
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT="${OUT:-/tmp/out}"
WORK="${STUDY_WORK:-/tmp/study}"
MODEL="$WORK/eval-austen"
CORPUS="$ROOT/.corpus/austen.txt"
JOBS="${JOBS:-14}"
mkdir -p "$OUT" "$WORK"
T0=$(date +%s)
log() { echo "[study +$(($(date +%s) - T0))s] $*" | tee -a "$WORK/study.log"; }

# ---- 1. nibble -------------------------------------------------------------------------------
NIBBLE=""
if [[ -n "${NIBBLE_BIN:-}" ]] && "$NIBBLE_BIN" eval --help > /dev/null 2>&1; then
  NIBBLE="$NIBBLE_BIN"
  log "using the prebuilt $NIBBLE"
else
  [[ -n "${NIBBLE_BIN:-}" ]] && log "prebuilt $NIBBLE_BIN does not run here: $("$NIBBLE_BIN" --help 2>&1 | head -2)"
  DEPS="${NIBBLE_DEPS_PREFIX:-$ROOT/.devdeps}"
  (export PKG_CONFIG_PATH="$DEPS/lib/pkgconfig"
   cmake -S "$ROOT" -B "$ROOT/build-gpu" -G Ninja -DCMAKE_BUILD_TYPE=Release -DNIBBLE_CUDA=ON \
     -DCMAKE_PREFIX_PATH="$DEPS" && nice ninja -C "$ROOT/build-gpu" -j "$JOBS" nibble) > "$WORK/build.log" 2>&1 &
  BUILD_PID=$!
  NIBBLE="$ROOT/build-gpu/apps/nibble/nibble"
  log "building nibble in the background (pid $BUILD_PID)"
fi

# ---- 2. the eval model -------------------------------------------------------------------------
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$WORK/gpu.txt" 2>&1
PYTHONUNBUFFERED=1 python3 "$ROOT/scripts/train_eval_model.py" --corpus "$CORPUS" --out "$MODEL" \
  ${TRAIN_ARGS:---max-seconds 100} 2>&1 | tee "$WORK/train.log" | grep -v '^{"step"'
[[ -f "$MODEL/model.safetensors" ]] || { log "training FAILED"; tail -30 "$WORK/train.log"; }
cp "$MODEL/recipe.json" "$WORK/" 2> /dev/null
log "trained"

if [[ -n "${BUILD_PID:-}" ]]; then
  wait "$BUILD_PID" && log "build OK" || { log "build FAILED"; grep -E "error|FAILED" "$WORK/build.log" | head -20; }
fi
"$NIBBLE" --help > /dev/null 2>&1 || { log "no working nibble"; tar -C "$WORK" -czf "$OUT/study.tar.gz" --exclude=eval-austen .; exit 1; }

# ---- 3. calibration ----------------------------------------------------------------------------
for rot in none hadamard; do
  "$NIBBLE" calibrate --model "$MODEL" --corpus "$CORPUS" --context 2048 --docs 8 --chunk 256 --rotate "$rot" \
    --device cuda --weights f32 --out "$WORK/kv_scales_$rot.json" > "$WORK/calibrate_$rot.log" 2>&1 &
done
wait
log "calibrated: $(cd "$WORK" && echo kv_scales_*.json)"

# ---- 4. the evals ------------------------------------------------------------------------------
# Two rounds, each a set of invocations run at once: perplexity/KL/top-1 first (the most resolving
# measure, and cheap), then retrieval, each bounded by what is left of STUDY_SECONDS so that the
# packing always runs. An invocation writes its report only when it completes: keep each small.
# Measured on an H200 (2026-11-29): with 4 invocations at once, one 16K-token retrieval item costs
# ~5 s per configuration at --chunk 256, so 12 such items x 4 configurations overrun 140 s.
RETRIEVAL="${RETRIEVAL:---passkey-lengths 1024,4096,16000 --passkey-depths 0,0.5,1 --samples 1 --needles 4 --max-new-tokens 7}"
PPL="${PPL:---context 4096 --docs 8}"
GPU_COMMON="--weights f32 --chunk ${CHUNK:-512}"
CPU_EVAL_COMMON="${CPU_EVAL_COMMON:---tasks perplexity --context 512 --docs 2 --chunk 128 --threads 4}"
STUDY_SECONDS="${STUDY_SECONDS:-420}"
left() { echo $((STUDY_SECONDS - ($(date +%s) - T0))); }
run_eval() {  # name seconds device extra-args...
  local name=$1 seconds=$2 device=$3; shift 3
  local cmd=("$NIBBLE" eval --model "$MODEL" --corpus "$MODEL/heldout.txt" --reference f32 --device "$device" --out "$WORK/$name" "$@")
  echo "${cmd[*]}" | sed "s#$WORK#\$WORK#g; s#$ROOT/##g" > "$WORK/$name.command"
  local t
  t=$(date +%s)
  timeout "$seconds" "${cmd[@]}" > "$WORK/$name.log" 2>&1
  local rc=$?
  log "eval $name: rc $rc in $(($(date +%s) - t)) s (limit $seconds s)"
}
# shellcheck disable=SC2086
{
  limit=$(( $(left) / 3 ))
  log "round 1 (perplexity), limit $limit s"
  run_eval ppl_g1a "$limit" cuda --configs bf16,fp8,nvfp4 --tasks perplexity $PPL $GPU_COMMON &
  run_eval ppl_g1b "$limit" cuda --configs nvfp4+hadamard,k8v4,k8v4+hadamard --tasks perplexity $PPL $GPU_COMMON &
  [[ -f "$WORK/kv_scales_none.json" ]] &&
    run_eval ppl_cal "$limit" cuda --configs fp8,nvfp4,k8v4 --kv-scales "$WORK/kv_scales_none.json" --tasks perplexity $PPL $GPU_COMMON &
  [[ -f "$WORK/kv_scales_hadamard.json" ]] &&
    run_eval ppl_calhad "$limit" cuda --configs nvfp4+hadamard,k8v4+hadamard --kv-scales "$WORK/kv_scales_hadamard.json" \
      --tasks perplexity $PPL $GPU_COMMON &
  run_eval cpu6 "$limit" cpu --configs nvfp4,nvfp4+hadamard,k8v4 --nvfp4-scale-rule 6 $CPU_EVAL_COMMON &
  run_eval cpu4o6 "$limit" cpu --configs nvfp4,nvfp4+hadamard,k8v4 --nvfp4-scale-rule 4over6 $CPU_EVAL_COMMON &
  wait
  limit=$(( $(left) - 15 ))
  log "round 2 (retrieval), limit $limit s"
  run_eval pk_g1a "$limit" cuda --configs bf16,fp8,nvfp4 --tasks passkey $RETRIEVAL $GPU_COMMON &
  run_eval pk_g1b "$limit" cuda --configs nvfp4+hadamard,k8v4,k8v4+hadamard --tasks passkey $RETRIEVAL $GPU_COMMON &
  run_eval mn_g1a "$limit" cuda --configs fp8,nvfp4 --tasks multineedle $RETRIEVAL $GPU_COMMON &
  run_eval mn_g1b "$limit" cuda --configs nvfp4+hadamard,k8v4 --tasks multineedle $RETRIEVAL $GPU_COMMON &
  wait
}
log "evals done"

# ---- 5. pack -----------------------------------------------------------------------------------
tar -C "$WORK" -czf "$OUT/study.tar.gz" --exclude=eval-austen .
cp "$WORK/study.log" "$OUT/" 2> /dev/null
log "packed $(du -h "$OUT/study.tar.gz" | cut -f1) into study.tar.gz"
