#!/usr/bin/env python3
"""Merges the report.json / *_items.jsonl files of one scripts/accuracy_study.sh run (the unpacked
study.tar.gz) into the Markdown tables of docs/ACCURACY.md and SVG plots; no third-party packages.

    python3 docs/accuracy/study_tables.py STUDY_DIR [--svg-dir docs/accuracy] > tables.md

Paired comparisons between configurations of different invocations are valid because every
invocation scores the same documents / items with the same deterministic f32 reference: the
per-document means (perplexity) and the per-item outcomes (retrieval, same seed) pair up.
"""
import argparse
import glob
import json
import math
import os
import random

BYTES_VS_FP8 = {"f32": 4, "bf16": 2, "fp8": 1, "k8v4": 0.78, "nvfp4": 0.5625}  # K+V bytes per element vs fp8


def load(root, name):
    p = os.path.join(root, name, "report.json")
    if not os.path.exists(p):
        return None
    with open(p) as f:
        return json.load(f)


def bytes_of(name):
    return BYTES_VS_FP8[name.split("+")[0]]


def fmt_e(x):
    return f"{x:.2e}".replace("e-0", "e-").replace("e+0", "e")


def bootstrap_mean(diffs, resamples=2000, seed=0):
    rng = random.Random(seed)
    n = len(diffs)
    means = sorted(sum(diffs[rng.randrange(n)] for _ in range(n)) / n for _ in range(resamples))
    est = sum(diffs) / n
    sd = math.sqrt(sum((d - est) ** 2 for d in diffs) / max(1, n - 1))
    sigma = sd / math.sqrt(n)
    return {"estimate": est, "lower": means[int(0.025 * resamples)], "upper": means[int(0.975 * resamples) - 1],
            "sigma": sigma, "z": est / sigma if sigma > 0 else float("inf") if est else 0.0, "mdd": 1.96 * sigma, "n": n}


def wilson(k, n, z=1.96):
    if n == 0:
        return (0.0, 1.0)
    p = k / n
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return (max(0.0, c - h), min(1.0, c + h))


def mcnemar(b, c):
    """Exact two-sided binomial p and mid-p on the discordant pairs b (only ref) and c (only config)."""
    n = b + c
    if n == 0:
        return 1.0, 1.0
    k = min(b, c)
    cdf = sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n
    p = min(1.0, 2 * cdf)
    mid = min(1.0, 2 * (cdf - math.comb(n, k) / 2 ** n / 2))
    return p, mid


# ------------------------------------------------------------------------------------- perplexity
PPL_RUNS = [("ppl_g1a", "1"), ("ppl_g1b", "1"), ("ppl_g1c", "1"), ("ppl_4o6", "1"), ("ppl_cal", "calibrated"),
            ("ppl_calhad", "calibrated"),
            ("cpu6", "1"), ("cpu4o6", "1"), ("ppl_long", "1")]


def ppl_configs(root, names):
    """[(run, label, config dict, report)] for the perplexity runs that exist."""
    out = []
    for run, label in PPL_RUNS:
        if run not in names:
            continue
        r = load(root, run)
        if not r or not r.get("perplexity"):
            continue
        for c in r["perplexity"]["configs"]:
            out.append((run, label, c, r))
    return out


def ppl_table(root, runs, title):
    rows = ppl_configs(root, runs)
    if not rows:
        return f"\n({title}: no report)\n"
    r0 = rows[0][3]
    p = r0["perplexity"]
    s = r0["settings"]
    lines = [f"\n{title}: {p['documents']} documents x {p['positions']} scored positions, context {s['context']}, "
             f"chunk {s['chunk']}, device {s['device']}, weights {s['weights']}; reference f32 mean NLL "
             f"{p['reference']['mean_nll']:.5f} (perplexity {p['reference']['perplexity']:.3f}).\n",
             "| KV config | g | nvfp4 rule | bytes vs fp8 | mean KL [95% CI] | top-1 agreement [95% CI] | Δ NLL [95% CI] | resolvable? |",
             "|---|---|---|---|---|---|---|---|"]
    refs = {round(r[3]["perplexity"]["reference"]["mean_nll"], 9) for r in rows}
    for run, label, c, r in rows:
        d, k, t, res = c["delta_nll"], c["kl"], c["top1_agreement_ci"], c["delta_nll_resolution"]
        rv = "n/a" if not res else (f"yes ({res['z_score']:.1f}σ)" if res["resolvable"]
                                    else f"no (MDD {res['minimum_detectable']:.2g})")
        rule = "4-over-6" if r["settings"]["nvfp4_scale_rule"] == "4over6" else "amax/6"
        if "nvfp4" not in c["name"] and "k8v4" not in c["name"]:
            rule = "–"
        g = label if any(x in c["name"] for x in ("fp8", "nvfp4", "k8v4")) else "–"
        lines.append(f"| {c['name']} | {g} | {rule} | {bytes_of(c['name'])} | {fmt_e(c['mean_kl'])} [{fmt_e(k['lower'])}, "
                     f"{fmt_e(k['upper'])}] | {c['top1_agreement']:.4f} [{t['lower']:.4f}, {t['upper']:.4f}] | "
                     f"{d['estimate']:+.4f} [{d['lower']:+.4f}, {d['upper']:+.4f}] | {rv} |")
    if len(refs) > 1:
        lines.append(f"\nNote: the reference NLL differs between invocations: {sorted(refs)}")
    return "\n".join(lines) + "\n"


def doc_series(root, run, config):
    r = load(root, run)
    if not r or not r.get("perplexity"):
        return None
    for c in r["perplexity"]["configs"]:
        if c["name"] == config:
            return c
    return None


def paired_table(root, pairs, title):
    lines = [f"\n{title}\n", "| comparison (B − A) | Δ mean KL [95% CI] | resolvable? | Δ top-1 agreement [95% CI] | resolvable? |",
             "|---|---|---|---|---|"]
    for label, (ra, ca), (rb, cb) in pairs:
        a, b = doc_series(root, ra, ca), doc_series(root, rb, cb)
        if not a or not b or len(a["doc_mean_kl"]) != len(b["doc_mean_kl"]):
            lines.append(f"| {label} | (missing) | | | |")
            continue
        kl = bootstrap_mean([y - x for x, y in zip(a["doc_mean_kl"], b["doc_mean_kl"])])
        t1 = bootstrap_mean([y - x for x, y in zip(a["doc_top1_agreement"], b["doc_top1_agreement"])])

        def res(s):
            return f"yes ({abs(s['z']):.1f}σ)" if abs(s["estimate"]) > s["mdd"] else f"no (MDD {s['mdd']:.2g})"
        lines.append(f"| {label} | {fmt_e(kl['estimate'])} [{fmt_e(kl['lower'])}, {fmt_e(kl['upper'])}] | {res(kl)} | "
                     f"{t1['estimate']:+.4f} [{t1['lower']:+.4f}, {t1['upper']:+.4f}] | {res(t1)} |")
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------- retrieval
def retrieval_items(root, task):
    """{config: {item key: pass}} pooled over every seed's a-f invocations of `task` (pk or mn).
    Groups d (4-over-6 nvfp4 rule) and e / f (calibrated scales) name their quantized configurations
    "<config> 4-over-6" / "<config> calibrated" (their f32 reference is the same deterministic run
    as everyone's)."""
    fname = "passkey_items.jsonl" if task == "pk" else "multineedle_items.jsonl"
    suffix = {"d": " 4-over-6", "e": " calibrated", "f": " calibrated"}
    out, runs = {}, []
    for d in sorted(glob.glob(os.path.join(root, f"{task}_[abcdef]_*"))):
        f = os.path.join(d, fname)
        if not os.path.exists(f):
            continue
        seed = d.rsplit("_", 1)[1]
        runs.append(os.path.basename(d))
        with open(f) as fh:
            for line in fh:
                x = json.loads(line)
                key = (seed, x["length"], x["depth"], x["sample"])
                group = os.path.basename(d).split("_")[1]
                if group in suffix and x["config"] != "f32":
                    x["config"] += suffix[group]
                prev = out.setdefault(x["config"], {}).get(key)
                if prev is not None and prev != x["pass"]:
                    raise SystemExit(f"{x['config']} {key}: different outcomes in two invocations")
                out[x["config"]][key] = x["pass"]
    return out, runs


def retrieval_table(root, task, title):
    items, runs = retrieval_items(root, task)
    if "f32" not in items:
        return f"\n({title}: no completed invocation)\n", None
    ref = items["f32"]
    lengths = sorted({k[1] for k in ref})
    order = ["f32", "bf16", "fp8", "fp8+hadamard", "nvfp4", "nvfp4+hadamard", "k8v4", "k8v4+hadamard",
             "nvfp4 4-over-6", "nvfp4+hadamard 4-over-6", "k8v4+hadamard 4-over-6", "fp8 calibrated",
             "nvfp4 calibrated", "nvfp4+hadamard calibrated", "k8v4 calibrated", "k8v4+hadamard calibrated"]
    lines = [f"\n{title}: invocations {', '.join(runs)}; items per configuration: see each row. Accuracy with a "
             f"95% Wilson interval; McNemar's exact test on the items the configuration shares with f32; MDD = "
             f"1.96·sqrt(b+c)/n.\n",
             "| config | passed | accuracy [95% CI] | " + " | ".join(f"{n}" for n in lengths) +
             " | only f32 / only config | McNemar p (mid-p) | resolvable? |",
             "|---|---|---|" + "---|" * len(lengths) + "---|---|---|"]
    by_len = {}
    for cfg in order:
        if cfg not in items:
            continue
        res = items[cfg]
        shared = [k for k in res if k in ref]
        n, k = len(res), sum(res.values())
        lo, hi = wilson(k, n)
        per = []
        for L in lengths:
            ks = [key for key in res if key[1] == L]
            per.append(f"{sum(res[x] for x in ks)}/{len(ks)}")
            by_len.setdefault(cfg, []).append(sum(res[x] for x in ks) / max(1, len(ks)))
        if cfg == "f32":
            extra = "– | – | –"
        else:
            b = sum(1 for x in shared if ref[x] and not res[x])
            c = sum(1 for x in shared if res[x] and not ref[x])
            p, mid = mcnemar(b, c)
            m = len(shared)
            mdd = 1.96 * math.sqrt(b + c) / m if m else float("nan")
            diff = (c - b) / m if m else 0.0
            rv = "yes" if (b + c) and abs(diff) > mdd else f"no (MDD {mdd:.3f})" if b + c else "no (no discordant item)"
            extra = f"{b} / {c} | {p:.3g} ({mid:.3g}) | {rv}"
        lines.append(f"| {cfg} | {k}/{n} | {k / max(1, n):.3f} [{lo:.3f}, {hi:.3f}] | " + " | ".join(per) + f" | {extra} |")
    return "\n".join(lines) + "\n", (lengths, by_len)


# ------------------------------------------------------------------------------------- SVG
COLORS = ["#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e", "#e6ab02", "#a6761d", "#666666", "#1f78b4"]


def svg_lines(title, xlabel, ylabel, xs, series, log_y=False, xticks=None, ymin=None, ymax=None):
    """xs: list of x values; series: [(name, [y])]; returns an SVG string (no third-party packages)."""
    W, H, L, R, T, B = 760, 420, 80, 190, 40, 50
    pts = [y for _, ys in series for y in ys if y is not None and (not log_y or y > 0)]
    if not pts:
        return None
    lo = ymin if ymin is not None else min(pts)
    hi = ymax if ymax is not None else max(pts)
    if log_y:
        lo, hi = math.log10(lo), math.log10(hi)
        lo, hi = math.floor(lo), math.ceil(hi)
    if hi == lo:
        hi = lo + 1
    x0, x1 = min(xs), max(xs)

    def X(x):
        return L + (x - x0) / ((x1 - x0) or 1) * (W - L - R)

    def Y(y):
        v = math.log10(y) if log_y else y
        return T + (1 - (v - lo) / (hi - lo)) * (H - T - B)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
           f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<text x="{W / 2}" y="20" text-anchor="middle" font-size="14">{title}</text>',
           f'<text x="{(L + W - R) / 2}" y="{H - 10}" text-anchor="middle">{xlabel}</text>',
           f'<text x="15" y="{(T + H - B) / 2}" text-anchor="middle" transform="rotate(-90 15 {(T + H - B) / 2})">{ylabel}</text>',
           f'<line x1="{L}" y1="{H - B}" x2="{W - R}" y2="{H - B}" stroke="black"/>',
           f'<line x1="{L}" y1="{T}" x2="{L}" y2="{H - B}" stroke="black"/>']
    if log_y:
        for e in range(int(lo), int(hi) + 1):
            y = Y(10 ** e)
            out.append(f'<line x1="{L}" y1="{y:.1f}" x2="{W - R}" y2="{y:.1f}" stroke="#ddd"/>')
            out.append(f'<text x="{L - 5}" y="{y + 4:.1f}" text-anchor="end">1e{e}</text>')
    else:
        for i in range(6):
            v = lo + (hi - lo) * i / 5
            y = Y(v)
            out.append(f'<line x1="{L}" y1="{y:.1f}" x2="{W - R}" y2="{y:.1f}" stroke="#ddd"/>')
            out.append(f'<text x="{L - 5}" y="{y + 4:.1f}" text-anchor="end">{v:.2f}</text>')
    for x, label in (xticks or [(x, str(x)) for x in xs]):
        out.append(f'<text x="{X(x):.1f}" y="{H - B + 16}" text-anchor="middle">{label}</text>')
    for i, (name, ys) in enumerate(series):
        color = COLORS[i % len(COLORS)]
        dash = ' stroke-dasharray="6,3"' if i >= len(COLORS) else ""  # colours repeat past the ninth series
        p = " ".join(f"{X(x):.1f},{Y(y):.1f}" for x, y in zip(xs, ys) if y is not None and (not log_y or y > 0))
        out.append(f'<polyline points="{p}" fill="none" stroke="{color}" stroke-width="2"{dash}/>')
        for x, y in zip(xs, ys):
            if y is not None and (not log_y or y > 0):
                out.append(f'<circle cx="{X(x):.1f}" cy="{Y(y):.1f}" r="2.5" fill="{color}"/>')
        ly = T + 10 + 18 * i
        out.append(f'<line x1="{W - R + 10}" y1="{ly}" x2="{W - R + 30}" y2="{ly}" stroke="{color}" stroke-width="2"{dash}/>')
        out.append(f'<text x="{W - R + 35}" y="{ly + 4}">{name}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def kl_by_position_svg(root, runs, title):
    series, xs = [], None
    for run in runs:
        r = load(root, run)
        if not r or not r.get("perplexity"):
            continue
        rule = " 4-over-6" if r["settings"]["nvfp4_scale_rule"] == "4over6" else ""
        for c in r["perplexity"]["configs"]:
            bp = c["by_position"]
            xs = [(b["begin"] + b["end"]) / 2 for b in bp]
            name = c["name"] + (rule if ("nvfp4" in c["name"] or "k8v4" in c["name"]) else "")
            if name not in dict(series):  # an anchor rerun in another invocation is the same series
                series.append((name, [b["mean_kl"] for b in bp]))
    if not series:
        return None
    return svg_lines(title, "context position", "mean KL(f32 || config), nats", xs, series, log_y=True,
                     xticks=[(x, str(int(x))) for x in xs[::max(1, len(xs) // 8)]])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("root")
    ap.add_argument("--svg-dir")
    ap.add_argument("--svg-prefix", default="eval57m")
    a = ap.parse_args()
    print(ppl_table(a.root, ["ppl_g1a", "ppl_g1b", "ppl_g1c", "ppl_4o6", "ppl_cal", "ppl_calhad"],
                    "GPU, perplexity/KL/top-1 (round 1)"))
    print(paired_table(a.root, [  # the recommended default against its anchors, all three in ppl_g1c
        ("fp8+hadamard − fp8 (g = 1, one invocation)", ("ppl_g1c", "fp8"), ("ppl_g1c", "fp8+hadamard")),
        ("fp8+hadamard − k8v4+hadamard (g = 1, one invocation)", ("ppl_g1c", "k8v4+hadamard"), ("ppl_g1c", "fp8+hadamard")),
        ("k8v4+hadamard − fp8 (g = 1, one invocation)", ("ppl_g1c", "fp8"), ("ppl_g1c", "k8v4+hadamard")),
        ("fp8: ppl_g1c − ppl_g1a (repeatability)", ("ppl_g1a", "fp8"), ("ppl_g1c", "fp8")),
        ("k8v4+hadamard: ppl_g1c − ppl_g1b (repeatability)", ("ppl_g1b", "k8v4+hadamard"), ("ppl_g1c", "k8v4+hadamard")),
    ], "Paired differences, fp8+hadamard and its anchors (ppl_g1c; 95% bootstrap over documents):"))
    print(paired_table(a.root, [
        ("k8v4+hadamard − fp8 (g = 1)", ("ppl_g1a", "fp8"), ("ppl_g1b", "k8v4+hadamard")),
        ("k8v4+hadamard − k8v4 (g = 1)", ("ppl_g1b", "k8v4"), ("ppl_g1b", "k8v4+hadamard")),
        ("nvfp4+hadamard − nvfp4 (g = 1)", ("ppl_g1a", "nvfp4"), ("ppl_g1b", "nvfp4+hadamard")),
        ("nvfp4+hadamard − k8v4+hadamard (g = 1)", ("ppl_g1b", "k8v4+hadamard"), ("ppl_g1b", "nvfp4+hadamard")),
        ("k8v4 − fp8 (g = 1)", ("ppl_g1a", "fp8"), ("ppl_g1b", "k8v4")),
        ("fp8: calibrated − g = 1", ("ppl_g1a", "fp8"), ("ppl_cal", "fp8")),
        ("nvfp4: calibrated − g = 1", ("ppl_g1a", "nvfp4"), ("ppl_cal", "nvfp4")),
        ("k8v4: calibrated − g = 1", ("ppl_g1b", "k8v4"), ("ppl_cal", "k8v4")),
        ("nvfp4+hadamard: calibrated − g = 1", ("ppl_g1b", "nvfp4+hadamard"), ("ppl_calhad", "nvfp4+hadamard")),
        ("k8v4+hadamard: calibrated − g = 1", ("ppl_g1b", "k8v4+hadamard"), ("ppl_calhad", "k8v4+hadamard")),
    ], "Paired differences between configurations (per-document means, 95% bootstrap over documents, 2000 resamples):"))
    print(paired_table(a.root, [
        ("nvfp4: 4-over-6 − amax/6", ("ppl_g1a", "nvfp4"), ("ppl_4o6", "nvfp4")),
        ("nvfp4+hadamard: 4-over-6 − amax/6", ("ppl_g1b", "nvfp4+hadamard"), ("ppl_4o6", "nvfp4+hadamard")),
        ("k8v4+hadamard: 4-over-6 − amax/6", ("ppl_g1b", "k8v4+hadamard"), ("ppl_4o6", "k8v4+hadamard")),
    ], "Paired differences, GPU, nvfp4 block-scale rule (ppl_4o6 against ppl_g1a / ppl_g1b):"))
    print(ppl_table(a.root, ["cpu6", "cpu4o6"], "CPU, nvfp4 block-scale rule amax/6 vs 4-over-6"))
    print(paired_table(a.root, [
        ("nvfp4: 4-over-6 − amax/6", ("cpu6", "nvfp4"), ("cpu4o6", "nvfp4")),
        ("nvfp4+hadamard: 4-over-6 − amax/6", ("cpu6", "nvfp4+hadamard"), ("cpu4o6", "nvfp4+hadamard")),
        ("k8v4+hadamard: 4-over-6 − amax/6", ("cpu6", "k8v4+hadamard"), ("cpu4o6", "k8v4+hadamard")),
    ], "Paired differences, CPU:"))
    print(ppl_table(a.root, ["ppl_long"], "GPU, perplexity/KL/top-1 at a long context (round 3)"))
    ret = {}
    for task, title in (("pk", "Passkey retrieval"), ("mn", "Multi-needle retrieval (4 needles, one asked)")):
        text, ret[task] = retrieval_table(a.root, task, title)
        print(text)
    if a.svg_dir:
        os.makedirs(a.svg_dir, exist_ok=True)
        for name, runs, title in ((f"{a.svg_prefix}_kl_by_position.svg", ["ppl_g1a", "ppl_g1b", "ppl_g1c", "ppl_4o6"],
                                   "Mean KL by context position, eval model, H200, g = 1"),
                                  (f"{a.svg_prefix}_long_kl_by_position.svg", ["ppl_long"],
                                   "Mean KL by context position (long context), eval model, H200, g = 1")):
            svg = kl_by_position_svg(a.root, runs, title)
            if svg:
                with open(os.path.join(a.svg_dir, name), "w") as f:
                    f.write(svg)
        for task, label in (("pk", "passkey"), ("mn", "multineedle")):
            if not ret.get(task):
                continue
            lengths, by_len = ret[task]
            xs = [math.log2(L) for L in lengths]
            svg = svg_lines(f"{label} accuracy by prompt length, eval model, H200", "prompt tokens", "accuracy", xs,
                            list(by_len.items()), xticks=list(zip(xs, map(str, lengths))), ymin=0.0, ymax=1.0)
            with open(os.path.join(a.svg_dir, f"{a.svg_prefix}_{label}_by_length.svg"), "w") as f:
                f.write(svg)


if __name__ == "__main__":
    main()
