#!/usr/bin/env bash
# scripts/bench_serving.sh as a user runs it, on the CPU: a tiny random checkpoint from
# scripts/make_random_checkpoint.py, one `nibble serve` per KV format over the same byte budget on
# 127.0.0.1, `nibble bench` runs against each. Checks what the script promises: equal KV bytes per
# format (nvfp4 then holds 16/9 of fp8's tokens), every request completed, and what the formats'
# capacities must show at a budget fp8 runs out of: more requests running, more prefix-cache hits.
#   bench_serving_script_test.sh NIBBLE_BINARY SOURCE_DIR
set -euo pipefail
nibble="$1"
src="$2"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# 2 layers, 2 KV heads of 32: 256 B per token in fp8, 144 in nvfp4; a 0.0002 GiB pool holds ~838
# tokens in fp8 (3 requests of 216) and ~1491 in nvfp4 (6).
NIBBLE="$nibble" OUT="$work/out" MODEL_DIR="$work/model" SHAPE=tiny DEVICE=cpu FORMATS="fp8 nvfp4" \
  KV_BUDGET_GIB=0.0002 SERVE_ARGS="--max-batch-tokens 256" PORT=0 \
  RUNS="capacity: --input-len 200 --output-len 16 --max-concurrency 12 --num-requests 12 --metrics-interval 0.005 --seed 2;
agent: --workload agent --turns 4 --input-len 100 --output-len 8 --max-concurrency 6 --num-requests 24 --seed 3" \
  "$src/scripts/bench_serving.sh" > "$work/log" 2>&1 || { cat "$work/log"; exit 1; }

python3 - "$work/out" <<'PY' || { cat "$work/log"; exit 1; }
import json, re, sys
out = sys.argv[1]
tokens, page_bytes, pool = {}, {}, {}
for fmt in ("fp8", "nvfp4"):
    line = open(f"{out}/serve_{fmt}.log").read()
    m = re.search(r"KV (\w+)[^:]*: (\d+) pages x (\d+) tokens = (\d+) tokens \((\d+) B/token", line)
    assert m and m.group(1) == fmt, f"{fmt}: no pool line in {line!r}"
    pages, size, tokens[fmt], per_token = (int(m.group(i)) for i in range(2, 6))
    page_bytes[fmt] = size * per_token
    pool[fmt] = pages * page_bytes[fmt]
# One budget (the memory the server is given less its weights' estimate), whole pages of it each.
assert abs(pool["fp8"] - pool["nvfp4"]) < max(page_bytes.values()), f"pools of {pool} B"
ratio = tokens["nvfp4"] / tokens["fp8"]
assert abs(ratio - 16 / 9) < 0.05, f"nvfp4 / fp8 tokens {ratio}, not 16/9"
runs = {}
for fmt in ("fp8", "nvfp4"):
    for name, n in (("capacity", 12), ("agent", 24)):
        r = json.load(open(f"{out}/{fmt}_{name}.json"))
        assert r["completed"] == n and r["failed"] == 0, f"{fmt} {name}: {r['completed']} completed, {r['failed']} failed"
        runs[fmt, name] = r
fp8_run, nv_run = runs["fp8", "capacity"]["server"]["running_max"], runs["nvfp4", "capacity"]["server"]["running_max"]
assert nv_run > fp8_run, f"capacity: nvfp4 ran at most {nv_run} requests at once, fp8 {fp8_run}"
fp8_hit, nv_hit = runs["fp8", "agent"]["prefix_cache_hit_rate"], runs["nvfp4", "agent"]["prefix_cache_hit_rate"]
assert nv_hit > fp8_hit, f"agent: nvfp4 hit rate {nv_hit}, fp8 {fp8_hit}"
ceiling = runs["nvfp4", "agent"]["prefix_cache_ceiling"]
assert nv_hit <= ceiling + 1e-12, f"agent: nvfp4 hit rate {nv_hit} above the workload's ceiling {ceiling}"
print(f"bench_serving_script_test: pools {tokens} tokens (x{ratio:.3f}); running max fp8 {fp8_run:g} nvfp4 {nv_run:g}; "
      f"agent hit rate fp8 {fp8_hit:.3f} nvfp4 {nv_hit:.3f}")
PY
