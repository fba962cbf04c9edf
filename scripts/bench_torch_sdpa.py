#!/usr/bin/env python3
"""Baseline for bench_decode_attention: torch scaled_dot_product_attention, bf16, contiguous KV,
decode (one query token per sequence) on the same shapes (head_dim 128, 8 KV heads, GQA 4 and 8,
contexts 1K..128K, batches 1..256). Prints median time and GB/s (KV bytes + q + output).

    python3 scripts/bench_torch_sdpa.py [--quick | --shapes G:CTX:B,...] [--json FILE]

(--shapes takes bench_decode_attention's list: GQA group, context, batch per shape.)

Runs on the GPU machine (torch with CUDA). KV copies rotate so the working set exceeds L2.
"""
import argparse
import json
import statistics

import torch
import torch.nn.functional as F

HEAD_DIM, KV_HEADS = 128, 8


def bench(fn, copies):
    for i in range(3):
        fn(i % copies)
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record(); fn(0); stop.record(); torch.cuda.synchronize()
    reps = max(1, min(200, int(0.3 / max(start.elapsed_time(stop), 1e-4))))
    samples, call = [], 1
    for _ in range(11):
        start.record()
        for _ in range(reps):
            fn(call % copies); call += 1
        stop.record(); torch.cuda.synchronize()
        samples.append(start.elapsed_time(stop) * 1e-3 / reps)
    return statistics.median(samples)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--shapes", help="G:CTX:B,... (GQA group, context, batch), as bench_decode_attention")
    ap.add_argument("--json")
    args = ap.parse_args()
    props = torch.cuda.get_device_properties(0)
    l2 = getattr(props, "L2_cache_size", 50 << 20)
    free, _ = torch.cuda.mem_get_info()
    contexts = [4096, 32768] if args.quick else [1024, 4096, 16384, 32768, 131072]
    batches = [1, 32] if args.quick else [1, 8, 32, 128, 256]
    shapes = [(g, c, b) for g in (4, 8) for c in contexts for b in batches]
    if args.shapes:
        try:
            shapes = [tuple(int(x) for x in item.split(":")) for item in args.shapes.split(",")]
        except ValueError:
            ap.error(f"--shapes {args.shapes!r}: expected G:CTX:B,...")
        if any(len(s) != 3 or min(s) < 1 for s in shapes):
            ap.error(f"--shapes {args.shapes!r}: expected positive G:CTX:B triples")
    results = []
    print(f"device: {props.name}; torch {torch.__version__}; SDPA bf16, contiguous KV, decode (q_len 1)")
    print(f"{'gqa':>4} {'ctx':>7} {'batch':>6} | {'us':>9} {'GB/s':>7}")
    for group, ctx, batch in shapes:
        hq = KV_HEADS * group
        kv_bytes = 2 * batch * KV_HEADS * ctx * HEAD_DIM * 2
        if kv_bytes > 0.6 * free:
            print(f"{group:>4} {ctx:>7} {batch:>6} | (does not fit)")
            continue
        copies = max(1, min(64, int(0.6 * free // kv_bytes), -(-4 * l2 // kv_bytes)))
        ks = [torch.randn(batch, KV_HEADS, ctx, HEAD_DIM, device="cuda", dtype=torch.bfloat16) for _ in range(copies)]
        vs = [torch.randn_like(k) for k in ks]
        q = torch.randn(batch, hq, 1, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
        t = bench(lambda c: F.scaled_dot_product_attention(q, ks[c], vs[c], enable_gqa=True), copies)
        gbps = (kv_bytes + 2 * q.numel() * 2) / t * 1e-9
        print(f"{group:>4} {ctx:>7} {batch:>6} | {t * 1e6:>9.1f} {gbps:>7.0f}", flush=True)
        results.append({"group": group, "ctx": ctx, "batch": batch, "seconds": t, "gbps": gbps})
        del ks, vs, q
        torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": props.name, "torch": torch.__version__, "sdpa_bf16": results}, f, indent=2)


if __name__ == "__main__":
    main()
