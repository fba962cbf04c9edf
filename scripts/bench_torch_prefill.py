#!/usr/bin/env python3
"""Baseline for bench_prefill_attention: torch scaled_dot_product_attention, causal, bf16, on the
same shapes (32 query heads / 8 KV heads, head_dim 128 and 64, seq 1K..16K, batch = 16384 / seq).
Prints median time and TFLOP/s per backend (flash; cuDNN where torch offers it), FLOPs counted
causally as 4 * seq^2 * head_dim * q_heads / 2 per sequence, as the nibble benchmark counts them.

    python3 scripts/bench_torch_prefill.py [--quick] [--json FILE]

Runs on the GPU machine (torch with CUDA). GQA: K/V are expanded to the query heads before
timing when the backend does not take grouped heads itself (the expansion is not timed).
"""
import argparse
import json
import statistics

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

Q_HEADS, KV_HEADS, STEP_TOKENS = 32, 8, 16384


def bench(fn):
    for _ in range(2):
        fn()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record(); fn(); stop.record(); torch.cuda.synchronize()
    reps = max(1, min(100, int(20.0 / max(start.elapsed_time(stop), 1e-3))))
    samples = []
    for _ in range(11):
        start.record()
        for _ in range(reps):
            fn()
        stop.record(); torch.cuda.synchronize()
        samples.append(start.elapsed_time(stop) * 1e-3 / reps)
    return statistics.median(samples)


def run(backend, head_dim, seq):
    batch = max(1, STEP_TOKENS // seq)
    q = torch.randn(batch, Q_HEADS, seq, head_dim, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(batch, KV_HEADS, seq, head_dim, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(batch, KV_HEADS, seq, head_dim, device="cuda", dtype=torch.bfloat16)
    flops = batch * 4.0 * seq * seq * head_dim * Q_HEADS / 2
    with sdpa_kernel([backend]):
        try:
            fn = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
            fn()
            how = "gqa"
        except RuntimeError:
            ke = k.repeat_interleave(Q_HEADS // KV_HEADS, dim=1)
            ve = v.repeat_interleave(Q_HEADS // KV_HEADS, dim=1)
            fn = lambda: F.scaled_dot_product_attention(q, ke, ve, is_causal=True)
            fn()
            how = "expanded kv"
        seconds = bench(fn)
    return batch, seconds, flops / seconds * 1e-12, how


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json")
    args = ap.parse_args()
    seqs = [1024, 8192] if args.quick else [1024, 2048, 4096, 8192, 16384]
    print(f"device: {torch.cuda.get_device_name()}  torch {torch.__version__}")
    print("causal FLOPs counted as 4 * seq^2 * head_dim * q_heads / 2 per sequence; "
          f"{Q_HEADS} q heads / {KV_HEADS} kv heads; batch = {STEP_TOKENS} / seq; bf16 in, bf16 out")
    rows = []
    for name, backend in [("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)]:
        for head_dim in (128, 64):
            for seq in seqs:
                try:
                    batch, seconds, tflops, how = run(backend, head_dim, seq)
                except RuntimeError as e:
                    print(f"  {name:5} head_dim {head_dim:3} seq {seq:5}: unavailable ({str(e).splitlines()[0][:80]})")
                    continue
                print(f"  {name:5} head_dim {head_dim:3} seq {seq:5} batch {batch:2}: {seconds * 1e3:8.3f} ms "
                      f"{tflops:7.1f} TFLOP/s ({how})")
                rows.append(dict(backend=name, head_dim=head_dim, seq=seq, batch=batch, ms=seconds * 1e3,
                                 tflops=tflops, gqa=how))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)


if __name__ == "__main__":
    main()
