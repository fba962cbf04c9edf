#!/usr/bin/env bash
# The KV-format accuracy study of docs/ACCURACY.md in one command on the GPU machine (its files are
# wiped between calls, so the model is trained and studied in the same call):
#   1. nibble: a prebuilt binary (NIBBLE_BIN; docs/ACCURACY.md, "Next run", packs one). The
#      `nibble` target does not link on the GPU machine (.devdeps' cpp-httplib is header-only).
#   2. the eval model: scripts/train_eval_model.py (TRAIN_ARGS), with its own retrieval probe
#   3. nibble calibrate on the training text, without and with the Hadamard rotation
#   4. nibble eval --weights f32, small invocations, at most three on the GPU at once (each compares its
#      configurations with its own f32 reference run on the same items; the reference is
#      deterministic, so invocations pair up by document/item):
#        ppl_probe   2 documents, bf16: times a document so that round 1 fits its budget
#        round 1, perplexity/KL/top-1 (context PPL_CONTEXT, chunk PPL_CHUNK), the groups of PPL_GROUPS:
#          g1a   ppl_g1a     bf16, fp8, nvfp4               (g = 1: SGLang's recipe)
#          g1b   ppl_g1b     nvfp4+hadamard, k8v4, k8v4+hadamard (g = 1)
#          g1c   ppl_g1c     fp8, fp8+hadamard, k8v4+hadamard (g = 1; the recommended default and its two
#                            anchors in one invocation, beside ppl_g1a and ppl_g1b)
#          4o6   ppl_4o6     nvfp4, nvfp4+hadamard, k8v4+hadamard under --nvfp4-scale-rule 4over6 (g = 1)
#          cal   ppl_cal     fp8, nvfp4, k8v4 with --kv-scales (calibrated, no rotation), then
#                ppl_calhad  nvfp4+hadamard, k8v4+hadamard with --kv-scales (calibrated with the rotation)
#          cpu   cpu6, cpu4o6  in the background on the CPU backend: nvfp4, nvfp4+hadamard, k8v4+hadamard
#                              under --nvfp4-scale-rule 6 and 4over6 (a short context: the CPU's check)
#        round 2, retrieval (only if the training probe retrieved anything), seeds 0 and 1 while
#          time is left, passkey (pk_G_S) then multineedle with 4 needles (mn_G_S), the groups G of
#          RET_GROUPS_PK / RET_GROUPS_MN [both "a b c", plus d with RET_4OVER6=1]:
#          a, b  the g = 1 configurations split as in round 1's g1a / g1b
#          c     fp8+hadamard (the default)
#          d     nvfp4, nvfp4+hadamard, k8v4+hadamard under 4-over-6
#          e     fp8, nvfp4, k8v4 calibrated (--kv-scales, no rotation)
#          f     nvfp4+hadamard, k8v4+hadamard calibrated with the rotation
#        round 3, if time is left: ppl_long (all g = 1 configurations and fp8+hadamard, 3 documents of LONG_CONTEXT
#          [16000] tokens); then more retrieval seeds (2..5) while time is left
#   5. $OUT: study.tar.gz (every report but the per-token arrays, the scale files, recipe.json, the
#      logs; re-packed after every round so that a timeout still leaves the finished rounds),
#      tokens.tar.gz (the per-token .npy arrays), study.log, train.log, recipe.json
#
#   OUT=/tmp/out NIBBLE_BIN=/tmp/c/nibble.sh scripts/accuracy_study.sh      # from the repository root
# Environment (defaults in brackets):
#   TRAIN_ARGS     extra train_eval_model.py arguments ["--max-seconds 255"]
#   STUDY_MODEL    skip the training and study this model directory (with heldout.txt, recipe.json)
#   EVAL_DEVICE    [cuda]; cpu checks the flow on a machine without a GPU
#   STUDY_T0       epoch seconds the time budget counts from [now]
#   STUDY_SECONDS  seconds after STUDY_T0 by which every eval has ended and the packing starts [560]
#   PPL_CONTEXT, PPL_CHUNK, PPL_DOCS_MAX, PPL_SECONDS  round 1 [4096, 256, 12, 40 s per invocation]
#   RET_LENGTHS, RET_DEPTHS, RET_CHUNK  round 2 [1024,2048,4096,8192,16000  0,0.25,0.5,0.75,1  1024]
#   PPL_GROUPS     round 1's invocation groups ["g1a g1b g1c cal cpu"]
#   RET_TASKS, RET_SEEDS, RET_MORE_SEEDS  round 2's tasks in order and seeds before / after round 3
#                  ["pk mn", "0 1", "2 3 4 5"; an empty RET_MORE_SEEDS runs none]
#   RET_GROUPS_PK, RET_GROUPS_MN  round 2's invocation groups per task (above)
#   STUDY_ROUNDS   the rounds to run ["1 2 3"]; "2" = retrieval only (no calibration, no round 1 or 3)
#   CAL_CONTEXT    nibble calibrate's context [2048]
#   CPU_EVAL       options of the CPU evals ["--context 512 --docs 3 --chunk 64 --threads 6"]
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT="${OUT:-/tmp/out}"
WORK="${STUDY_WORK:-/tmp/study}"
MODEL="$WORK/eval-austen"
CORPUS="$ROOT/.corpus/austen.txt"
mkdir -p "$OUT" "$WORK"
T0="${STUDY_T0:-$(date +%s)}"
STUDY_SECONDS="${STUDY_SECONDS:-560}"
now() { echo $(($(date +%s) - T0)); }
left() { echo $((STUDY_SECONDS - $(now))); }
log() { echo "[study +$(now)s] $*" | tee -a "$WORK/study.log"; cp "$WORK/study.log" "$OUT/" 2> /dev/null; }
pack() {  # everything but the model; per-token arrays apart (they are the bulk)
  tar -C "$WORK" -czf "$OUT/study.tar.gz.tmp" --exclude=eval-austen --exclude=model --exclude='*.npy' . &&
    mv "$OUT/study.tar.gz.tmp" "$OUT/study.tar.gz"
  (cd "$WORK" && find . -name '*.npy' -print0 | tar --null -czf "$OUT/tokens.tar.gz.tmp" -T - &&
    mv "$OUT/tokens.tar.gz.tmp" "$OUT/tokens.tar.gz")
  log "packed $(du -h "$OUT/study.tar.gz" 2> /dev/null | cut -f1) + $(du -h "$OUT/tokens.tar.gz" 2> /dev/null | cut -f1) ($1)"
}

# ---- 1. nibble -------------------------------------------------------------------------------
NIBBLE="${NIBBLE_BIN:-}"
if [[ -z "$NIBBLE" ]] || ! "$NIBBLE" --version > "$WORK/nibble_version.txt" 2>&1; then
  log "no working nibble (NIBBLE_BIN='$NIBBLE'): $(head -3 "$WORK/nibble_version.txt" 2> /dev/null)"
  NIBBLE=""
else
  log "using $NIBBLE: $(head -1 "$WORK/nibble_version.txt")"
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$WORK/gpu.txt" 2>&1
nproc >> "$WORK/gpu.txt"

# ---- 2. the eval model -------------------------------------------------------------------------
if [[ -n "${STUDY_MODEL:-}" ]]; then  # a local check of the flow: an existing model dir with heldout.txt, recipe.json
  MODEL="$STUDY_MODEL"; echo "using the model $MODEL" > "$WORK/train.log"
else
  # shellcheck disable=SC2086
  PYTHONUNBUFFERED=1 python3 "$ROOT/scripts/train_eval_model.py" --corpus "$CORPUS" --out "$MODEL" \
    ${TRAIN_ARGS:---max-seconds 255} 2>&1 | tee "$WORK/train.log" | grep -v '^{"step"'
fi
cp "$WORK/train.log" "$OUT/" 2> /dev/null
if [[ -f "$MODEL/recipe.json" ]]; then
  cp "$MODEL/recipe.json" "$WORK/" && cp "$MODEL/recipe.json" "$OUT/"
  log "trained"
else
  log "training FAILED"; tail -30 "$WORK/train.log"; pack "no model"; exit 1
fi
[[ -n "$NIBBLE" ]] || { pack "no nibble"; exit 1; }
# did the probe retrieve anything? (round 2 is pointless at chance)
RETRIEVES=$(python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(sum(p["exact"] for p in r.get("retrieval_probe", [])))' "$MODEL/recipe.json" 2> /dev/null || echo 0)
log "training probe: $RETRIEVES exact retrieval answers"

ROUNDS=" ${STUDY_ROUNDS:-1 2 3} "
round() { [[ "$ROUNDS" == *" $1 "* ]]; }

# ---- 3. calibration ----------------------------------------------------------------------------
# round 1's calibrated group and round 2's groups e / f need the scale files
PPL_GROUPS=" ${PPL_GROUPS:-g1a g1b g1c cal cpu} "
RET_GROUPS_PK=" ${RET_GROUPS_PK:-a b c ${RET_4OVER6:+d}} "
RET_GROUPS_MN=" ${RET_GROUPS_MN:-a b c ${RET_4OVER6:+d}} "
ppl_group() { round 1 && [[ "$PPL_GROUPS" == *" $1 "* ]]; }
needs_scales() { ppl_group cal || { round 2 && [[ "$RET_GROUPS_PK$RET_GROUPS_MN" == *[ef]* ]]; }; }
needs_scales && for rot in none hadamard; do
  timeout 40 "$NIBBLE" calibrate --model "$MODEL" --corpus "$CORPUS" --context "${CAL_CONTEXT:-2048}" --docs 8 --chunk 256 --rotate "$rot" \
    --device "${EVAL_DEVICE:-cuda}" --weights f32 --out "$WORK/kv_scales_$rot.json" > "$WORK/calibrate_$rot.log" 2>&1 &
done
wait
needs_scales && log "calibrated: $(cd "$WORK" && echo kv_scales_*.json)"

# ---- 4. the evals ------------------------------------------------------------------------------
# An invocation writes its report only when it completes: each is small and bounded by a timeout.
run_eval() {  # name seconds device extra-args...; logs its rc and wall seconds
  local name=$1 seconds=$2 device=$3; shift 3
  local cmd=("$NIBBLE" eval --model "$MODEL" --corpus "$MODEL/heldout.txt" --reference f32 --device "$device"
             --out "$WORK/$name" "$@")
  echo "${cmd[*]}" | sed "s#$WORK#\$WORK#g; s#$ROOT/##g" > "$WORK/$name.command"
  local t rc
  t=$(date +%s)
  timeout "$seconds" "${cmd[@]}" > "$WORK/$name.log" 2>&1
  rc=$?
  echo "$(($(date +%s) - t))" > "$WORK/$name.seconds"
  log "eval $name: rc $rc in $(($(date +%s) - t)) s (limit $seconds s)"
}
secs() { cat "$WORK/$1.seconds" 2> /dev/null || echo 999; }
G1A="bf16,fp8,nvfp4"
G1B="nvfp4+hadamard,k8v4,k8v4+hadamard"
G1C="fp8,fp8+hadamard,k8v4+hadamard"
G4O6="nvfp4,nvfp4+hadamard,k8v4+hadamard"  # under --nvfp4-scale-rule 4over6
GCAL="fp8,nvfp4,k8v4"                      # with kv_scales_none.json
GCALHAD="nvfp4+hadamard,k8v4+hadamard"     # with kv_scales_hadamard.json
GPU="--weights f32"
DEV="${EVAL_DEVICE:-cuda}"  # cpu: a local check of the flow on a machine without a GPU
PPL_CONTEXT="${PPL_CONTEXT:-4096}"
PPL_CHUNK="${PPL_CHUNK:-256}"
PPL_SECONDS="${PPL_SECONDS:-40}"
PPL_DOCS_MAX="${PPL_DOCS_MAX:-12}"
CPU_EVAL="${CPU_EVAL:---context 512 --docs 3 --chunk 64 --threads 6}"
RET="--passkey-lengths ${RET_LENGTHS:-1024,2048,4096,8192,16000} --passkey-depths ${RET_DEPTHS:-0,0.25,0.5,0.75,1} --samples 1 --needles 4 --max-new-tokens 7 --chunk ${RET_CHUNK:-1024}"

# shellcheck disable=SC2086
{
  per_doc_session=1
  CPU6="" CPU4O6=""
  if round 1; then
    # round 0: time two 4K documents x 2 sessions to size round 1
    run_eval ppl_probe 40 "$DEV" --configs bf16 --tasks perplexity --context "$PPL_CONTEXT" --docs 2 --chunk "$PPL_CHUNK" $GPU
    per_doc_session=$(python3 -c "print(max(0.05, $(secs ppl_probe) / 4))")
    DOCS=$(python3 -c "print(max(2, min($PPL_DOCS_MAX, int($PPL_SECONDS / (4 * $per_doc_session)))))")
    limit=$(python3 -c "print(int(min(120, max(45, 3 * $DOCS * 4 * $per_doc_session))))")
    PPL="--tasks perplexity --context $PPL_CONTEXT --docs $DOCS --chunk $PPL_CHUNK $GPU"
    log "round 1 (perplexity): $DOCS documents of $PPL_CONTEXT tokens (probe: $(secs ppl_probe) s for 2 x 2 sessions), limit $limit s per invocation"
    cpu_limit=$(( $(left) - 10 )); (( cpu_limit > 170 )) && cpu_limit=170
    if ppl_group cpu; then
      run_eval cpu6 "$cpu_limit" cpu --configs nvfp4,nvfp4+hadamard,k8v4+hadamard --nvfp4-scale-rule 6 --tasks perplexity $CPU_EVAL &
      CPU6=$!
      run_eval cpu4o6 "$cpu_limit" cpu --configs nvfp4,nvfp4+hadamard,k8v4+hadamard --nvfp4-scale-rule 4over6 --tasks perplexity $CPU_EVAL &
      CPU4O6=$!
    fi
    pids=()
    ppl_group g1a && { run_eval ppl_g1a "$limit" "$DEV" --configs "$G1A" $PPL & pids+=($!); }
    ppl_group g1b && { run_eval ppl_g1b "$limit" "$DEV" --configs "$G1B" $PPL & pids+=($!); }
    ppl_group g1c && { run_eval ppl_g1c "$limit" "$DEV" --configs "$G1C" $PPL & pids+=($!); }
    ppl_group 4o6 && { run_eval ppl_4o6 "$limit" "$DEV" --configs "$G4O6" --nvfp4-scale-rule 4over6 $PPL & pids+=($!); }
    wait "${pids[@]}"
    pack "round 1a"
    pair=$(( $(secs ppl_g1a) > $(secs ppl_g1b) ? $(secs ppl_g1a) : $(secs ppl_g1b) ))
    if ! ppl_group cal; then
      :
    elif (( $(left) > pair * 3 / 2 + 10 )); then
      (( limit > $(left) - 10 )) && limit=$(( $(left) - 10 ))
      pids=()
      [[ -f "$WORK/kv_scales_none.json" ]] &&
        { run_eval ppl_cal "$limit" "$DEV" --configs "$GCAL" --kv-scales "$WORK/kv_scales_none.json" $PPL & pids+=($!); }
      [[ -f "$WORK/kv_scales_hadamard.json" ]] &&
        { run_eval ppl_calhad "$limit" "$DEV" --configs "$GCALHAD" --kv-scales "$WORK/kv_scales_hadamard.json" $PPL & pids+=($!); }
      wait "${pids[@]}"
    else
      log "no time left for the calibrated runs"
    fi
    pack "round 1"
  fi

  # round 2: retrieval, one seed (25 items per task and configuration) per pass, while time is left;
  # seeds 0-1, then round 3, then more seeds
  est=45
  retrieval() {  # seeds...
    (( RETRIEVES > 0 )) || { log "round 2 skipped: the model retrieves nothing (training probe)"; return; }
    local seed task name lim t
    for seed in "$@"; do
      for task in ${RET_TASKS:-pk mn}; do
        (( $(left) > est + 15 )) || { log "round 2 ends: $(left) s left, a pass takes ~$est s"; return; }
        lim=$(( $(left) - 10 )); (( lim > 3 * est )) && lim=$((3 * est))
        name=passkey; [[ $task == mn ]] && name=multineedle
        log "round 2: $name seed $seed (limit $lim s, estimate $est s)"
        t=$(date +%s)
        groups="$RET_GROUPS_PK"; [[ $task == mn ]] && groups="$RET_GROUPS_MN"
        local pids=() g args
        for g in $groups; do
          case $g in
            a) args=(--configs "$G1A") ;;
            b) args=(--configs "$G1B") ;;
            c) args=(--configs fp8+hadamard) ;;
            d) args=(--configs "$G4O6" --nvfp4-scale-rule 4over6) ;;
            e) args=(--configs "$GCAL" --kv-scales "$WORK/kv_scales_none.json") ;;
            f) args=(--configs "$GCALHAD" --kv-scales "$WORK/kv_scales_hadamard.json") ;;
            *) log "round 2: unknown group '$g'"; continue ;;
          esac
          [[ "${args[*]}" != *kv_scales_* || -f "${args[-1]}" ]] || { log "round 2: no ${args[-1]##*/}, group $g skipped"; continue; }
          run_eval ${task}_${g}_$seed "$lim" "$DEV" "${args[@]}" --tasks $name --seed $seed $RET $GPU & pids+=($!)
        done
        wait "${pids[@]}"
        est=$(( $(date +%s) - t ))
        pack "round 2 $task seed $seed"
      done
    done
  }
  round 2 && retrieval ${RET_SEEDS-0 1}

  # round 3: perplexity at a long context, every g = 1 configuration, if time is left
  long_ctx="${LONG_CONTEXT:-16000}"
  long_est=$(python3 -c "print(int(8 * 3 * $per_doc_session * ($long_ctx / $PPL_CONTEXT) ** 1.5 + 10))")
  if ! round 3; then
    :
  elif (( $(left) > long_est + 10 )); then
    log "round 3: perplexity at $long_ctx tokens (estimate $long_est s)"
    run_eval ppl_long $(( $(left) - 5 )) "$DEV" --configs "$G1A,$G1B,fp8+hadamard" --tasks perplexity --context "$long_ctx" --docs 3 \
      --chunk 1024 $GPU
    pack "round 3"
  else
    log "round 3 skipped: $(left) s left, estimate $long_est s"
  fi
  round 2 && retrieval ${RET_MORE_SEEDS-2 3 4 5}
  wait $CPU6 $CPU4O6
}
log "evals done"

# ---- 5. pack -----------------------------------------------------------------------------------
pack "final"
