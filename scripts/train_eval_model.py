#!/usr/bin/env python3
"""Trains nibble's accuracy-study model: a ~57M-parameter Llama (head_dim 128, GQA 4:1, 16K context)
on Jane Austen's novels mixed with synthetic long-range key-value recall tasks, so that the
precision of the KV cache visibly matters (docs/ACCURACY.md).

    scripts/extract_corpus.sh .corpus/austen.txt                       # on any Debian machine
    python3 scripts/train_eval_model.py --corpus .corpus/austen.txt --out OUT_DIR
                                        [--tokenizer models/demo-austen] [--seed 20261129]
                                        [--steps-short N] [--steps-long N] [--max-seconds S]

Runs on the GPU machine (torch, transformers, tokenizers; nothing is downloaded). Writes to OUT_DIR:
  config.json, generation_config.json   LlamaForCausalLM: hidden 768, 8 layers, 8 query heads and 2 KV
                                        heads of head_dim 128, SwiGLU 2048, RoPE theta 5e5, 16384 positions
  model.safetensors                     bf16 weights
  tokenizer.json, tokenizer_config.json the demo model's byte-level BPE (vocab 4096), copied
  heldout.txt                           the last 5% of the corpus's passages, never trained on: the
                                        perplexity/KL text of the study
  recipe.json                           everything needed to reproduce the run: arguments, seed, data
                                        mixture, steps, losses, versions, sha256 of every file written

Training data (every row is [T + 1] token ids; the loss is the next-token cross entropy):
  lm         a window of the training text; loss on every token
  passkey    nibble eval's passkey prompt, verbatim (src/eval/passkey.h: intro, the synthetic filler,
             "The pass key is KEY. Remember it. KEY is the pass key." at a random depth, the
             question), then " KEY."; loss on the answer tokens only
  multikey   nibble eval's multi-needle prompt, verbatim (src/eval/multi_needle.h), 1..16 named
             codes, one asked; loss on the answer tokens only
  haystack   the same needles, or lines "key 4821: 93017", scattered through Austen text of the
             training split, then a question about one of them; loss on the answer tokens only
A task row is filled up to T after its answer with <|endoftext|> and a training-text window (loss on).
The loss is mean(LM tokens) + mean(answer tokens), so the few answer tokens weigh as much as the text.
Two phases: `--steps-short` steps of rows of 2048 tokens (batch 32), then `--steps-long` steps of
rows of 16384 tokens (batch 4) so that every position of the context is trained; one cosine schedule
over both. Prompt lengths are log-uniform, so needles sit at every distance.

Determinism: the data stream and the initialization are seeded (Python's random.Random(seed) for the
data, torch.manual_seed(seed) for the weights). The attention is torch's flash SDPA kernel, whose
backward accumulates with atomics: a re-run gives the same data and nearly, not bitwise, the same
weights; recipe.json records the checksums of the run whose figures docs/ACCURACY.md reports.
"""
import argparse
import hashlib
import inspect
import json
import math
import os
import platform
import random
import re
import shutil
import sys
import time

import tokenizers  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM  # noqa: E402

EOT_ID = 0
MAX_POSITIONS = 16384
SHORT_T, SHORT_BATCH = 2048, 32
LONG_T, LONG_BATCH = 16384, 4
PEAK_LR, MIN_LR, WARMUP_STEPS = 1.5e-3, 1.5e-4, 60
HELDOUT_FRACTION = 0.05
# flash first; memory-efficient attention only if transformers ever passes an explicit mask
ATTENTION_KERNELS = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]
MIXTURE = {"lm": 0.25, "passkey": 0.2, "multikey": 0.3, "haystack": 0.25}

# --- nibble eval's retrieval prompts, verbatim (src/eval/retrieval.h, passkey.h, multi_needle.h) ---
FILLER = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. "
PASSKEY_INTRO = ("There is an important piece of information hidden inside a lot of irrelevant text. Find it and "
                 "remember it. I will ask you about it.\n")
PASSKEY_QUESTION = "\nWhat is the pass key? The pass key is"
MULTI_INTRO = ("There are several secret codes hidden inside a lot of irrelevant text. Find them and remember "
               "them. I will ask you about one of them.\n")
NAMES = ["Alice", "Bob", "Carol", "David", "Emma", "Frank", "Grace", "Henry",
         "Irene", "Jack", "Kate", "Leo", "Maria", "Nick", "Olga", "Peter"]


def passkey_needle(key):
    return f"The pass key is {key}. Remember it. {key} is the pass key. "


def multi_needle_text(name, value):
    return f"The secret code for {name} is {value}. "


def multi_question(name):
    return f"\nWhat is the secret code for {name}? The secret code for {name} is"


def sha256_of(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def haystack(intro, filler_count, placed, question):
    """intro + filler sentences with needle texts after `after` sentences + question (build_haystack)."""
    parts = [intro]
    by_slot = {}
    for after, text in placed:
        by_slot.setdefault(min(max(after, 0), filler_count), []).append(text)
    for i in range(filler_count):
        parts.extend(by_slot.get(i, []))
        parts.append(FILLER)
    parts.extend(by_slot.get(filler_count, []))
    parts.append(question)
    return "".join(parts)


class Data:
    """The seeded stream of training rows."""

    def __init__(self, tok, train_text, train_ids, seed):
        self.tok = tok
        self.rng = random.Random(seed)
        self.train_text = train_text
        self.train_ids = train_ids  # torch int64 [n]
        self.paragraph_starts = [0] + [m.end() for m in re.finditer("\n\n", train_text)]
        self.filler_tokens = len(tok.encode(FILLER).ids) - 1  # in context the trailing space joins the next word
        self.chars_per_token = len(train_text) / len(train_ids)
        self.counts = {k: 0 for k in MIXTURE}

    def value(self):
        return str(10000 + self.rng.randrange(90000))

    def prompt_length(self, t):
        lo = 192 if t <= SHORT_T else 1024
        return int(math.exp(self.rng.uniform(math.log(lo), math.log(t - 16))))

    def passkey(self, length):
        key = self.value()
        f = max(0, (length - 60) // self.filler_tokens)
        k = round(self.rng.random() * f)
        return haystack(PASSKEY_INTRO, f, [(k, passkey_needle(key))], PASSKEY_QUESTION), f" {key}."

    def multikey(self, length):
        n = self.rng.choice([1, 2, 3, 4, 4, 4, 6, 8, 8, 12, 16])
        names = self.rng.sample(NAMES, n)
        values = []
        while len(values) < n:
            v = self.value()
            if v not in values:
                values.append(v)
        asked = self.rng.randrange(n)
        f = max(0, (length - 50 - 18 * n) // self.filler_tokens)
        placed = sorted((round(self.rng.random() * f), i) for i in range(n))
        text = haystack(MULTI_INTRO, f, [(a, multi_needle_text(names[i], values[i])) for a, i in placed],
                        multi_question(names[asked]))
        return text, f" {values[asked]}."

    def austen_window(self, chars):
        start = self.rng.choice(self.paragraph_starts)
        start = min(start, max(0, len(self.train_text) - chars))
        return self.train_text[start:start + chars]

    def haystack(self, length):
        """Needles at sentence ends of an Austen window; three styles of needle and question."""
        style = self.rng.choice(["passkey", "names", "lines"])
        n = 1 if style == "passkey" else self.rng.choice([1, 2, 4, 8, 16])
        text = self.austen_window(int((length - 40 - 14 * n) * self.chars_per_token * 0.97))
        cuts = [m.end() for m in re.finditer(r"[.!?][ \n]", text)] or [len(text)]
        if style == "passkey":
            key = self.value()
            needles, intro, question, answer = [passkey_needle(key)], PASSKEY_INTRO, PASSKEY_QUESTION, f" {key}."
        elif style == "names":
            names = self.rng.sample(NAMES, n)
            values = [self.value() for _ in names]
            asked = self.rng.randrange(n)
            needles = [multi_needle_text(a, b) for a, b in zip(names, values)]
            intro, question, answer = MULTI_INTRO, multi_question(names[asked]), f" {values[asked]}."
        else:
            keys = self.rng.sample(range(1000, 10000), n)
            values = [self.value() for _ in keys]
            asked = self.rng.randrange(n)
            needles = [f"\nkey {a}: {b}\n" for a, b in zip(keys, values)]
            intro, question, answer = "", f"\nkey {keys[asked]}:", f" {values[asked]}"
        at = sorted(self.rng.choice(cuts) for _ in needles)
        pieces, prev = [intro], 0
        for pos, needle in zip(at, needles):
            pieces += [text[prev:pos], needle]
            prev = pos
        pieces += [text[prev:], question]
        return "".join(pieces), answer

    def lm_window(self, n):
        start = self.rng.randrange(0, len(self.train_ids) - n)
        return self.train_ids[start:start + n]

    def batch(self, t, rows):
        """([rows, t+1] ids, [rows, t] LM mask, [rows, t] answer mask), masks indexed by target position."""
        kinds = self.rng.choices(list(MIXTURE), weights=list(MIXTURE.values()), k=rows)
        texts, lengths = [], []
        for kind in kinds:
            self.counts[kind] += 1
            if kind == "lm":
                continue
            length = self.prompt_length(t)
            texts.append(getattr(self, kind)(length))
            lengths.append(length)
        flat = [s for pair in texts for s in pair]
        encoded = self.tok.encode_batch([flat[i] for i in range(0, len(flat), 2)]) if texts else []
        answers = self.tok.encode_batch([flat[i] for i in range(1, len(flat), 2)]) if texts else []
        ids = torch.zeros(rows, t + 1, dtype=torch.int64)
        lm = torch.zeros(rows, t)
        ans = torch.zeros(rows, t)
        j = 0
        for r, kind in enumerate(kinds):
            if kind == "lm":
                ids[r] = self.lm_window(t + 1)
                lm[r] = 1
                continue
            prompt, answer = encoded[j].ids, answers[j].ids
            j += 1
            if len(prompt) + len(answer) + 2 > t + 1:  # an estimate ran long: keep the question end
                prompt = prompt[len(prompt) + len(answer) + 2 - (t + 1):]
            seq = prompt + answer + [EOT_ID]
            n = len(seq)
            ids[r, :n] = torch.tensor(seq)
            ids[r, n:] = self.lm_window(t + 1 - n)
            # target position p predicts ids[p + 1]: answer tokens sit at len(prompt) .. len(prompt)+len(answer)-1
            ans[r, len(prompt) - 1:len(prompt) - 1 + len(answer)] = 1
            lm[r, n:] = 1
        return ids, lm, ans


def show_examples(tok, data):
    """Prints what the loss sees in a few rows (from a separate stream: training data is unchanged)."""
    ids, lm, ans = data.batch(SHORT_T, 6)
    for r in range(ids.shape[0]):
        targets = ids[r, 1:]
        answer = [int(t) for t, m in zip(targets, ans[r]) if m > 0]
        first_ans = int(ans[r].nonzero()[0]) if answer else None
        tail = tok.decode(ids[r, max(0, first_ans - 24):first_ans + 1].tolist()) if answer else ""
        print(f"example row {r}: lm targets {int(lm[r].sum())}, answer targets {len(answer)} "
              f"{tok.decode(answer)!r} after ...{tail!r}", flush=True)


def make_model_config():
    if "rope_parameters" in inspect.signature(LlamaConfig.__init__).parameters:
        rope = {"rope_parameters": {"rope_type": "default", "rope_theta": 500000.0}}
    else:
        rope = {"rope_theta": 500000.0}
    return LlamaConfig(
        vocab_size=4096, hidden_size=768, intermediate_size=2048, num_hidden_layers=8,
        num_attention_heads=8, num_key_value_heads=2, head_dim=128, max_position_embeddings=MAX_POSITIONS,
        **rope, rms_norm_eps=1e-5, hidden_act="silu", tie_word_embeddings=True,
        attention_bias=False, mlp_bias=False, bos_token_id=0, eos_token_id=0, dtype="bfloat16")


def lr_at(step, total):
    if step < WARMUP_STEPS:
        return PEAK_LR * (step + 1) / WARMUP_STEPS
    progress = (step - WARMUP_STEPS) / max(1, total - WARMUP_STEPS)
    return MIN_LR + 0.5 * (PEAK_LR - MIN_LR) * (1 + math.cos(math.pi * min(1.0, progress)))


def losses(model, ids, lm, ans):
    logits = model(input_ids=ids[:, :-1]).logits.float()  # [B, T, vocab]
    ce = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1),
                                           reduction="none").view_as(lm)
    lm_loss = (ce * lm).sum() / lm.sum().clamp(min=1)
    ans_loss = (ce * ans).sum() / ans.sum().clamp(min=1)
    # answer accuracy: every answer token of a row predicted exactly (teacher forcing)
    wrong = ((logits.argmax(-1) != ids[:, 1:]).float() * ans).sum(-1)
    has = ans.sum(-1) > 0
    acc = ((wrong == 0) & has).float().sum() / has.float().sum().clamp(min=1)
    return lm_loss, ans_loss, acc


@torch.no_grad()
def heldout_loss(model, ids, device, t=2048, rows=16):
    model.eval()
    n = min(rows, (len(ids) - 1) // t)
    batch = torch.stack([ids[i * t:(i + 1) * t + 1] for i in range(n)]).to(device)
    with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
        logits = model(input_ids=batch[:, :-1]).logits.float()
    model.train()
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1)).item()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--tokenizer", default=os.path.join(os.path.dirname(__file__), "..", "models", "demo-austen"))
    ap.add_argument("--seed", type=int, default=20261129)
    ap.add_argument("--steps-short", type=int, default=400, help=f"steps of {SHORT_BATCH} x {SHORT_T} tokens")
    ap.add_argument("--steps-long", type=int, default=75, help=f"steps of {LONG_BATCH} x {LONG_T} tokens")
    ap.add_argument("--max-seconds", type=float, default=0,
                    help="stop early after this many seconds of training (0 = never); recipe.json records it")
    ap.add_argument("--log-every", type=int, default=25)
    args = ap.parse_args()
    t_start = time.time()
    os.makedirs(args.out, exist_ok=True)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    assert torch.cuda.is_available(), "train_eval_model.py needs a CUDA GPU (flash attention)"
    device = "cuda"

    with open(args.corpus, encoding="utf-8") as f:
        text = f.read()
    paragraphs = text.split("\n\n")
    n_held = int(len(paragraphs) * HELDOUT_FRACTION)
    train_text = "\n\n".join(paragraphs[:-n_held])
    held_text = "\n\n".join(paragraphs[-n_held:])
    with open(os.path.join(args.out, "heldout.txt"), "w", encoding="utf-8") as f:
        f.write(held_text)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(os.path.join(args.tokenizer, name), os.path.join(args.out, name))
    tok_config_path = os.path.join(args.out, "tokenizer_config.json")
    with open(tok_config_path) as f:
        tok_config = json.load(f)
    tok_config["model_max_length"] = MAX_POSITIONS
    with open(tok_config_path, "w") as f:
        json.dump(tok_config, f, indent=2)
        f.write("\n")
    tok = Tokenizer.from_file(os.path.join(args.out, "tokenizer.json"))
    assert tok.token_to_id("<|endoftext|>") == EOT_ID

    def encode_stream(t):
        sep = tok.encode("\n\n").ids
        out = []
        for i, e in enumerate(tok.encode_batch(t.split("\n\n"))):
            if i:
                out.extend(sep)
            out.extend(e.ids)
        return torch.tensor(out, dtype=torch.int64)

    train_ids, held_ids = encode_stream(train_text), encode_stream(held_text)
    data = Data(tok, train_text, train_ids, args.seed)
    print(f"data ready in {time.time() - t_start:.1f} s: {len(train_ids)} training tokens, {len(held_ids)} held-out",
          flush=True)

    show_examples(tok, Data(tok, train_text, train_ids, args.seed + 1))

    torch.manual_seed(args.seed)
    config = make_model_config()
    config._attn_implementation = "sdpa"
    model = LlamaForCausalLM(config).to(device=device, dtype=torch.float32)
    model.train()
    params = sum(p.numel() for p in model.parameters())
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=PEAK_LR, betas=(0.9, 0.95), eps=1e-8, fused=True)
    total = args.steps_short + args.steps_long
    history, stopped_early = [], False
    t0 = time.time()
    step = 0
    with sdpa_kernel(ATTENTION_KERNELS):
        for step in range(total):
            long_phase = step >= args.steps_short
            t, rows = (LONG_T, LONG_BATCH) if long_phase else (SHORT_T, SHORT_BATCH)
            ids, lm, ans = data.batch(t, rows)
            ids, lm, ans = ids.to(device, non_blocking=True), lm.to(device), ans.to(device)
            for g in opt.param_groups:
                g["lr"] = lr_at(step, total)
            with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
                lm_loss, ans_loss, acc = losses(model, ids, lm, ans)
            opt.zero_grad(set_to_none=True)
            (lm_loss + ans_loss).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            last = step + 1 == total
            if (step + 1) % args.log_every == 0 or last or step + 1 == args.steps_short:
                entry = {"step": step + 1, "T": t, "lm_loss": round(lm_loss.item(), 4),
                         "answer_loss": round(ans_loss.item(), 4), "answer_exact": round(acc.item(), 3),
                         "seconds": round(time.time() - t0, 1)}
                history.append(entry)
                print(json.dumps(entry), flush=True)
            if args.max_seconds and time.time() - t0 > args.max_seconds and not last:
                stopped_early = True
                print(f"--max-seconds {args.max_seconds:g} reached after {step + 1} of {total} steps", flush=True)
                break
    torch.cuda.synchronize()
    seconds = time.time() - t0
    with sdpa_kernel(ATTENTION_KERNELS):
        val = heldout_loss(model, held_ids, device)
    print(f"trained {step + 1} steps in {seconds:.1f} s; held-out loss {val:.4f} (2048-token windows)", flush=True)

    model = model.to(torch.bfloat16).cpu()
    model.config.dtype = torch.bfloat16
    model.save_pretrained(args.out, safe_serialization=True)
    GenerationConfig(bos_token_id=0, eos_token_id=0, do_sample=False, max_length=MAX_POSITIONS).save_pretrained(args.out)
    files = {name: sha256_of(os.path.join(args.out, name)) for name in sorted(os.listdir(args.out))
             if name != "recipe.json"}
    recipe = {
        "model": "eval-austen-57m",
        "script": "scripts/train_eval_model.py",
        "command": " ".join(["python3", "scripts/train_eval_model.py"] + sys.argv[1:]),
        "seed": args.seed,
        "parameters": params,
        "architecture": {"class": "LlamaForCausalLM", "hidden": 768, "layers": 8, "q_heads": 8, "kv_heads": 2,
                         "head_dim": 128, "intermediate": 2048, "rope_theta": 500000.0,
                         "max_position_embeddings": MAX_POSITIONS, "vocab": 4096, "tied_embeddings": True},
        "data": {"corpus": args.corpus, "corpus_sha256": sha256_of(args.corpus),
                 "heldout": f"last {HELDOUT_FRACTION:.0%} of the passages ({n_held} of {len(paragraphs)})",
                 "train_tokens": len(train_ids), "heldout_tokens": len(held_ids), "mixture": MIXTURE,
                 "rows_drawn": data.counts},
        "schedule": {"steps_short": args.steps_short, "short_rows": [SHORT_BATCH, SHORT_T],
                     "steps_long": args.steps_long, "long_rows": [LONG_BATCH, LONG_T],
                     "steps_trained": step + 1, "stopped_early_by_max_seconds": stopped_early,
                     "optimizer": "AdamW betas 0.9/0.95 wd 0.1 (matrices), clip 1.0",
                     "lr": {"peak": PEAK_LR, "min": MIN_LR, "warmup": WARMUP_STEPS, "decay": "cosine"},
                     "precision": "bf16 autocast, flash SDPA"},
        "train_seconds": round(seconds, 1),
        "final": history[-1] if history else None,
        "heldout_loss_2048": round(val, 4),
        "history": history,
        "device": torch.cuda.get_device_name(0),
        "versions": {"python": platform.python_version(), "torch": torch.__version__,
                     "transformers": transformers.__version__, "tokenizers": tokenizers.__version__},
        "sha256": files,
    }
    with open(os.path.join(args.out, "recipe.json"), "w") as f:
        json.dump(recipe, f, indent=2)
        f.write("\n")
    print(f"model.safetensors sha256 {files['model.safetensors']}", flush=True)
    print(f"wrote {args.out} in {time.time() - t_start:.1f} s total", flush=True)


if __name__ == "__main__":
    sys.exit(main())
