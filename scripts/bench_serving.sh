#!/usr/bin/env bash
# The serving benchmark: `nibble serve` with each KV format over the same KV byte budget, and
# `nibble bench` against it on 127.0.0.1 — what the 4-bit cache buys a server end to end (decode
# speed at equal concurrency, requests resident at equal memory, prefix-cache hits of agent
# sessions). One command, on the GPU machine or (small shapes, DEVICE=cpu) anywhere:
#
#   NIBBLE=path/to/nibble OUT=dir scripts/bench_serving.sh
#
# Environment (defaults in brackets):
#   NIBBLE        the nibble binary [build/apps/nibble/nibble]
#   MODEL_DIR     a Hugging Face checkpoint; made by scripts/make_random_checkpoint.py when it holds
#                 no config.json [$OUT/model]
#   SHAPE         make_random_checkpoint.py --shape when the model is made [llama3-8b]
#   DEVICE        cuda | cpu [cuda]
#   FORMATS       KV formats, one server each, in this order [fp8 nvfp4]
#   KV_BUDGET_GIB the KV pool's GiB, equal for every format: the server gets --device-memory of the
#                 checkpoint's bytes plus this and --mem-fraction 1; empty: size it in SERVE_ARGS [16]
#   RUNS          the nibble bench runs, ';'-separated, each "NAME: FLAGS" [see below]
#   SERVE_ARGS    more `nibble serve` flags, e.g. --max-batch-tokens 8192 [none]
#   PORT          the servers' port [0: any free one]
#   OUT           results: serve_<fmt>.log, <fmt>_<run>.json / .txt, summary.txt [bench-serving]
#
# Every server and every client talks to 127.0.0.1 only; every run has a request count, so the
# script ends by itself. The server is stopped with SIGTERM (its drain) after each format.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT="${OUT:-bench-serving}"
NIBBLE="${NIBBLE:-$ROOT/build/apps/nibble/nibble}"
MODEL_DIR="${MODEL_DIR:-$OUT/model}"
SHAPE="${SHAPE:-llama3-8b}"
DEVICE="${DEVICE:-cuda}"
FORMATS="${FORMATS:-fp8 nvfp4}"
KV_BUDGET_GIB="${KV_BUDGET_GIB-16}"
SERVE_ARGS="${SERVE_ARGS:-}"
PORT="${PORT:-0}"  # 0: any free port, read back from the start line
# Each run draws its own prompts (--seed), so no run finds another's in the prefix cache.
# iso-concurrency: 6 requests of 32K + 1K fit every format's pool: the same batch, fewer bytes per step
#   (ITL p50 is the decode step: most tokens come after the last prefill).
# capacity: 24 offered at once; the pool, not the client, decides how many run.
# agent: 12 sessions of 6 turns (4000 new tokens and a 256-token reply each, up to ~25K of history):
#   their histories outgrow a 16 GiB fp8 pool, not an nvfp4 one, so fp8 evicts and prefills again.
RUNS="${RUNS:-iso-concurrency: --input-len 32000 --output-len 1024 --max-concurrency 6 --num-requests 6 --seed 1;
capacity: --input-len 32000 --output-len 1024 --max-concurrency 24 --num-requests 24 --seed 2;
agent: --workload agent --turns 6 --input-len 4000 --output-len 256 --max-concurrency 12 --num-requests 72 --seed 3}"

[[ -x "$NIBBLE" ]] || { echo "bench_serving: no nibble binary at $NIBBLE (set NIBBLE)" >&2; exit 1; }
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
if [[ ! -f "$MODEL_DIR/config.json" ]]; then
  python3 "$ROOT/scripts/make_random_checkpoint.py" "$MODEL_DIR" --shape "$SHAPE"
fi
weights_bytes=$(stat -c %s "$MODEL_DIR/model.safetensors")
pool_flags=()
if [[ -n "$KV_BUDGET_GIB" ]]; then
  pool_flags=(--device-memory "$(python3 -c "print($weights_bytes + round($KV_BUDGET_GIB * 2**30))")" --mem-fraction 1)
fi
summary="$OUT/summary.txt"
{
  echo "bench_serving: $(date -u +%FT%TZ); $("$NIBBLE" --version 2>&1 | head -1)"
  echo "model $MODEL_DIR ($weights_bytes B of weights); device $DEVICE; KV budget ${KV_BUDGET_GIB:-(SERVE_ARGS)} GiB per format"
  [[ "$DEVICE" != cuda ]] || nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader || true
} | tee "$summary"

server_pid=""
stop_server() {
  if [[ -n "$server_pid" ]] && kill -0 "$server_pid" 2>/dev/null; then
    kill -TERM "$server_pid"
    wait "$server_pid" || echo "bench_serving: the server exited with status $?" | tee -a "$summary"
  fi
  server_pid=""
}
trap stop_server EXIT

for fmt in $FORMATS; do
  log="$OUT/serve_$fmt.log"
  # shellcheck disable=SC2086  # SERVE_ARGS is a list of flags
  "$NIBBLE" serve --model "$MODEL_DIR" --device "$DEVICE" --kv-dtype "$fmt" --host 127.0.0.1 --port "$PORT" \
    "${pool_flags[@]}" $SERVE_ARGS > "$log" 2>&1 &
  server_pid=$!
  started=$(date +%s)
  until grep -q "listening on" "$log"; do
    if ! kill -0 "$server_pid" 2>/dev/null; then
      echo "bench_serving: nibble serve ($fmt) exited before listening:" >&2
      cat "$log" >&2
      exit 1
    fi
    (( $(date +%s) - started < 600 )) || { echo "bench_serving: the $fmt server did not start in 600 s" >&2; exit 1; }
    sleep 0.5
  done
  grep "nibble serve:" "$log" | head -1 | tee -a "$summary"
  port="$(grep -o 'listening on http://127.0.0.1:[0-9]*' "$log" | head -1 | grep -o '[0-9]*$')"
  IFS=';' read -ra runs <<< "${RUNS//$'\n'/ }"  # read takes one line
  for run in "${runs[@]}"; do
    run="$(echo "$run" | tr '\n' ' ' | sed 's/^ *//')"
    name="${run%%:*}"
    flags="${run#*:}"
    echo "== $fmt $name:$flags" | tee -a "$summary"
    # shellcheck disable=SC2086  # flags is a list of flags
    "$NIBBLE" bench --base-url "http://127.0.0.1:$port" --no-progress --label "$fmt $name" \
      --json "$OUT/${fmt}_$name.json" $flags 2>&1 | tee "$OUT/${fmt}_$name.txt" | tee -a "$summary"
  done
  stop_server
done
echo "bench_serving: done; $summary" >&2
