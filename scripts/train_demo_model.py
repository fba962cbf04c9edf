#!/usr/bin/env python3
"""Trains nibble's bundled demo model: a ~4M-parameter Llama on Jane Austen's novels.

    scripts/extract_corpus.sh .corpus/austen.txt                      # on any Debian machine
    python3 scripts/train_demo_model.py --corpus .corpus/austen.txt --out OUT_DIR [--seed 1234]
                                         [--time-budget 150 | --steps N]

Runs on the GPU machine (torch, transformers, tokenizers; nothing is downloaded). Writes to OUT_DIR:
  tokenizer.json, tokenizer_config.json   byte-level BPE (vocab 4096, <|endoftext|> = id 0 = bos = eos)
  config.json, generation_config.json     LlamaForCausalLM: hidden 256, 4 layers, 4 heads, 2 KV heads
                                          (head_dim 64), intermediate 688, tied embeddings, 1024 positions
  model.safetensors                       bf16 weights
  golden.json                             transformers' float32 CPU reference (logits, greedy tokens)
  README.md                               what it is, how it was made, seed, checksums, versions, license

Determinism: everything is seeded and torch runs with deterministic algorithms. The number of
optimizer steps is the only thing --time-budget decides: it times a few warm-up steps, picks the
step count that fits the budget (rounded down to 100), then trains from a fresh seeded start for
exactly that many steps with a cosine schedule. README.md records the count; --steps N reproduces
the same weights on the same hardware and software versions without any timing.
"""
import argparse
import hashlib
import inspect
import json
import math
import os
import platform
import sys
import time

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # needed by deterministic cuBLAS; before CUDA init

import tokenizers  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers  # noqa: E402
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM  # noqa: E402

EOT = "<|endoftext|>"
VOCAB_SIZE = 4096
SEQ_LEN = 512
BATCH = 64
PEAK_LR = 3e-3
MIN_LR = 3e-4
WARMUP_STEPS = 200
GOLDEN_PROMPTS = ["It is a truth", "She was not in the habit of"]
GOLDEN_LOGIT_POSITIONS = 3
GOLDEN_GREEDY_TOKENS = 40


def sha256_of(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def train_tokenizer(text, out_dir):
    """Byte-level BPE, no normalizer, no BOS added by the post-processor (prompts are plain text)."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, min_frequency=2, special_tokens=[EOT],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    # Trained on the paragraphs (blank-line separated) in the file's order, the same every run.
    tok.train_from_iterator(text.split("\n\n"), trainer=trainer)
    assert tok.token_to_id(EOT) == 0, "expected <|endoftext|> to be id 0"
    tok.save(os.path.join(out_dir, "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": EOT,
        "eos_token": EOT,
        "unk_token": None,
        "pad_token": None,
        "add_bos_token": False,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": 1024,
        "added_tokens_decoder": {"0": {"content": EOT, "lstrip": False, "normalized": False, "rstrip": False,
                                       "single_word": False, "special": True}},
    }
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")
    return tok


def encode_corpus(tok, text):
    """The whole corpus as one id stream: paragraphs encoded one by one, joined by the ids of "\n\n"
    (nearly the tokenization of the whole file at once; only training reads this stream)."""
    ids = []
    pieces = text.split("\n\n")
    sep = tok.encode("\n\n").ids
    for i, p in enumerate(pieces):
        if i:
            ids.extend(sep)
        ids.extend(tok.encode(p).ids)
    return torch.tensor(ids, dtype=torch.int64)


def make_model_config():
    # transformers v5 names RoPE's settings rope_parameters; v4 took rope_theta.
    if "rope_parameters" in inspect.signature(LlamaConfig.__init__).parameters:
        rope = {"rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}}
    else:
        rope = {"rope_theta": 10000.0}
    return LlamaConfig(
        vocab_size=VOCAB_SIZE, hidden_size=256, intermediate_size=688, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, head_dim=64, max_position_embeddings=1024,
        **rope, rms_norm_eps=1e-5, hidden_act="silu", tie_word_embeddings=True,
        attention_bias=False, mlp_bias=False, bos_token_id=0, eos_token_id=0, dtype="bfloat16")


def lr_at(step, total):
    if step < WARMUP_STEPS:
        return PEAK_LR * (step + 1) / WARMUP_STEPS
    progress = (step - WARMUP_STEPS) / max(1, total - WARMUP_STEPS)
    return MIN_LR + 0.5 * (PEAK_LR - MIN_LR) * (1 + math.cos(math.pi * min(1.0, progress)))


def train(config, train_ids, val_ids, steps, seed, device, log_every=500):
    """Trains a fresh seeded model for exactly `steps` AdamW steps; returns (model, history)."""
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).to(device)
    model.train()
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=PEAK_LR, betas=(0.9, 0.95), eps=1e-8, fused=device == "cuda")
    gen = torch.Generator().manual_seed(seed + 1)  # batch offsets drawn on the CPU: device independent
    train_dev = train_ids.to(device)
    arange = torch.arange(SEQ_LEN + 1, device=device)
    history = []
    t0 = time.time()
    for step in range(steps):
        starts = torch.randint(0, len(train_ids) - SEQ_LEN - 1, (BATCH,), generator=gen).to(device)
        batch = train_dev[starts[:, None] + arange]  # [BATCH, SEQ_LEN + 1] token ids
        for g in opt.param_groups:
            g["lr"] = lr_at(step, steps)
        with torch.autocast(device_type=device, dtype=torch.bfloat16):
            loss = _loss(model, batch)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if (step + 1) % log_every == 0 or step + 1 == steps:
            entry = {"step": step + 1, "train_loss": round(loss.item(), 4), "seconds": round(time.time() - t0, 1)}
            if step + 1 == steps or (step + 1) % (log_every * 4) == 0:
                entry["val_loss"] = round(evaluate(model, val_ids, device), 4)
            history.append(entry)
            print(json.dumps(entry), flush=True)
    return model, history


def _loss(model, batch):
    """Next-token cross entropy of a [B, T+1] id batch (inputs: first T, targets: last T)."""
    logits = model(input_ids=batch[:, :-1]).logits.float()  # [B, T, vocab]
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1))


@torch.no_grad()
def evaluate(model, ids, device):
    model.eval()
    n = (len(ids) - 1) // SEQ_LEN
    losses = []
    for i in range(0, n, BATCH):
        rows = [ids[j * SEQ_LEN:(j + 1) * SEQ_LEN + 1] for j in range(i, min(n, i + BATCH))]
        batch = torch.stack(rows).to(device)
        with torch.autocast(device_type=device, dtype=torch.bfloat16):
            losses.append(_loss(model, batch).item() * len(rows))
    model.train()
    return sum(losses) / n


def time_steps(config, train_ids, val_ids, seed, device, budget):
    """Seconds per step measured on 60 steps (after 20 warm-up steps) → steps fitting the budget."""
    train(config, train_ids, val_ids, 20, seed, device, log_every=10 ** 9)
    if device == "cuda":
        torch.cuda.synchronize()
    t = time.time()
    train(config, train_ids, val_ids, 60, seed, device, log_every=10 ** 9)
    if device == "cuda":
        torch.cuda.synchronize()
    per_step = (time.time() - t) / 60
    return max(100, int(budget / per_step) // 100 * 100), per_step


@torch.no_grad()
def make_golden(out_dir, tok):
    """transformers float32 on the CPU (eager attention) over the saved bf16 files → golden.json."""
    ref = LlamaForCausalLM.from_pretrained(out_dir, dtype=torch.float32, attn_implementation="eager")
    ref.eval()
    cases = []
    for prompt in GOLDEN_PROMPTS:
        ids = tok.encode(prompt).ids
        logits = ref(input_ids=torch.tensor([ids])).logits[0]  # [len(ids), vocab] float32
        seq = list(ids)
        generated, gaps = [], []
        for _ in range(GOLDEN_GREEDY_TOKENS):  # full recompute each step: no cache in the reference
            last = ref(input_ids=torch.tensor([seq])).logits[0, -1]
            top2 = torch.topk(last, 2)
            nxt = int(top2.indices[0])
            generated.append(nxt)
            gaps.append(float(top2.values[0] - top2.values[1]))
            seq.append(nxt)
        cases.append({
            "prompt": prompt,
            "prompt_ids": ids,
            "logit_positions": list(range(GOLDEN_LOGIT_POSITIONS)),
            "logits": [[float(v) for v in logits[p]] for p in range(GOLDEN_LOGIT_POSITIONS)],
            "generated_ids": generated,
            "top1_top2_gaps": gaps,
            "generated_text": tok.decode(generated, skip_special_tokens=False),
        })
        print(f"greedy [{prompt}] -> {tok.decode(generated)!r}", flush=True)
    golden = {
        "model": "demo-austen",
        "reference": f"transformers {transformers.__version__} LlamaForCausalLM, float32 on the CPU, eager attention, "
                     "weights loaded from model.safetensors (bf16, upcast exactly to float32); greedy = argmax of a "
                     "full recompute per step; ids from tokenizers' Tokenizer.encode (no special tokens are added)",
        "cases": cases,
    }
    with open(os.path.join(out_dir, "golden.json"), "w") as f:
        json.dump(golden, f)
        f.write("\n")


def write_readme(out_dir, info):
    text = f"""# demo-austen

A small Llama-architecture language model trained on Jane Austen's six novels, bundled with nibble
so that `nibble generate` shows real text without any downloaded weights:

```sh
build/apps/nibble/nibble generate --model models/demo-austen --prompt "It is a truth" --max-tokens 60
```

It is a toy: {info['params']:,} parameters, trained for {info['seconds']:.0f} s on one GPU. It writes
Austen-flavoured English and has memorized much of its tiny corpus; it knows nothing else.

## Architecture

`LlamaForCausalLM`: hidden 256, 4 layers, 4 attention heads and 2 KV heads (head_dim 64, so NVFP4's
16-element blocks apply), SwiGLU intermediate 688, RMSNorm eps 1e-5, RoPE theta 10000, 1024 positions,
tied input/output embeddings, weights stored in bf16 (`model.safetensors`).

Tokenizer: byte-level BPE trained on the same corpus with the `tokenizers` library, vocabulary
{VOCAB_SIZE}; `<|endoftext|>` (id 0) is the only special token and serves as bos/eos. No token is
added to prompts.

## How it was made

```sh
scripts/extract_corpus.sh .corpus/austen.txt
python3 scripts/train_demo_model.py --corpus .corpus/austen.txt --out OUT --seed {info['seed']} --steps {info['steps']}
```

- Corpus: `{info['corpus_packages']}`, {info['corpus_bytes']:,} bytes, sha256 `{info['corpus_sha256']}`;
  {info['train_tokens']:,} training tokens, the last {info['val_tokens']:,} held out for validation.
- Seed {info['seed']}; AdamW (betas 0.9/0.95, weight decay 0.1), peak lr {PEAK_LR} with {WARMUP_STEPS} warm-up
  steps and cosine decay to {MIN_LR}, batch {BATCH} × {SEQ_LEN} tokens, bf16 autocast, gradient clip 1.0,
  {info['steps']} steps{info['steps_note']}.
- Final training loss {info['final_train_loss']:.3f}, validation loss {info['final_val_loss']:.3f} (nats/token).
- Device: {info['device_name']}; python {platform.python_version()}, torch {torch.__version__},
  transformers {transformers.__version__}, tokenizers {tokenizers.__version__}.
- Deterministic: seeded, `torch.use_deterministic_algorithms(True)`, SDPA math kernel; the same
  command with the same versions on the same hardware gives the same files.
- sha256: tokenizer.json `{info['tokenizer_sha256']}`, model.safetensors `{info['model_sha256']}`.

`golden.json` holds transformers' float32 (CPU, eager attention) logits at the first
{GOLDEN_LOGIT_POSITIONS} positions of {len(GOLDEN_PROMPTS)} prompts and {GOLDEN_GREEDY_TOKENS} greedy tokens
each, with the top-1/top-2 logit gap of every greedy step; tests/e2e/demo_model checks nibble against it.

## License

The training text is Jane Austen's novels as packaged in Debian's r-cran-janeaustenr (Project
Gutenberg texts), in the public domain. The weights and tokenizer are derived from that text and
from nibble's own script, and are distributed under the same terms as nibble.
"""
    with open(os.path.join(out_dir, "README.md"), "w") as f:
        f.write(text)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=1234)
    group = ap.add_mutually_exclusive_group()
    group.add_argument("--time-budget", type=float, default=150.0, help="seconds of training (chooses --steps)")
    group.add_argument("--steps", type=int, help="exact number of optimizer steps (reproduces a run)")
    args = ap.parse_args()

    os.makedirs(args.out, exist_ok=True)
    torch.use_deterministic_algorithms(True, warn_only=True)  # warns if some op has no deterministic kernel
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    device = "cuda" if torch.cuda.is_available() else "cpu"
    # The math SDPA kernel: deterministic backward (flash/mem-efficient/cuDNN backward need not be).
    torch.backends.cuda.enable_flash_sdp(False)
    torch.backends.cuda.enable_mem_efficient_sdp(False)
    torch.backends.cuda.enable_cudnn_sdp(False)
    torch.backends.cuda.enable_math_sdp(True)

    with open(args.corpus, encoding="utf-8") as f:
        text = f.read()
    corpus_sha = sha256_of(args.corpus)
    sidecar = args.corpus + ".json"
    packages = "r-cran-janeaustenr"
    if os.path.exists(sidecar):
        with open(sidecar) as f:
            meta = json.load(f)
        packages = ", ".join(f"{p['name']} {p['version']}" for p in meta["packages"])

    t_tok = time.time()
    tok = train_tokenizer(text, args.out)
    ids = encode_corpus(tok, text)
    n_val = len(ids) // 50
    train_ids, val_ids = ids[:-n_val], ids[-n_val:]
    print(f"tokenizer: {time.time() - t_tok:.1f} s, corpus {len(ids)} tokens ({len(text) / len(ids):.2f} chars/token)",
          flush=True)

    config = make_model_config()
    if args.steps is None:
        steps, per_step = time_steps(config, train_ids, val_ids, args.seed, device, args.time_budget)
        steps_note = f" (chosen by `--time-budget {args.time_budget:g}` from a timing of {per_step * 1000:.1f} ms/step)"
    else:
        steps, per_step, steps_note = args.steps, float("nan"), " (given by --steps)"
    print(f"training {steps} steps ({per_step * 1000:.1f} ms/step measured)", flush=True)
    t0 = time.time()
    model, history = train(config, train_ids, val_ids, steps, args.seed, device)
    seconds = time.time() - t0

    model = model.to(torch.bfloat16).cpu()
    model.config.dtype = torch.bfloat16
    model.save_pretrained(args.out, safe_serialization=True)
    GenerationConfig(bos_token_id=0, eos_token_id=0, do_sample=False, max_length=1024).save_pretrained(args.out)
    make_golden(args.out, tok)

    model.eval()
    try:  # a sample only: the files are already written
        sample_ids = model.generate(torch.tensor([tok.encode("It is a truth").ids]), max_new_tokens=60, do_sample=False)
        print("sample:", tok.decode(sample_ids[0].tolist()), flush=True)
    except Exception as e:  # noqa: BLE001
        print(f"sample generation failed: {e!r}", flush=True)

    write_readme(args.out, {
        "params": sum(p.numel() for p in model.parameters()),
        "seconds": seconds, "seed": args.seed, "steps": steps, "steps_note": steps_note,
        "corpus_packages": packages, "corpus_bytes": os.path.getsize(args.corpus), "corpus_sha256": corpus_sha,
        "train_tokens": len(train_ids), "val_tokens": len(val_ids),
        "final_train_loss": history[-1]["train_loss"], "final_val_loss": history[-1]["val_loss"],
        "device_name": torch.cuda.get_device_name(0) if device == "cuda" else platform.processor() or "cpu",
        "tokenizer_sha256": sha256_of(os.path.join(args.out, "tokenizer.json")),
        "model_sha256": sha256_of(os.path.join(args.out, "model.safetensors")),
    })
    print(f"final train loss {history[-1]['train_loss']:.4f}, val loss {history[-1]['val_loss']:.4f}; wrote {args.out}",
          flush=True)


if __name__ == "__main__":
    sys.exit(main())
